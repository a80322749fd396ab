"""The common throughput window, medians over the repetitions, ratios ours/peer, the speed targets, and
the markdown / JSON report.

The JSON file next to the markdown (benchmarks/results/side_by_side.json by default) keeps the latest
result per device and corpus ("cpu synthetic", "cuda en-fr", ...): a GPU run or a run on another corpus
adds its section and replaces only the earlier run of the same device and corpus; the markdown is always
regenerated from the whole file.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from seq2seq_attn.evaluation.metrics.report import render_markdown
from seq2seq_attn.io import write_json, write_text

from . import logs
from .machine import COMPETING_CORES, summary

REPOSITORY = Path(__file__).resolve().parents[1]
OUT = "OUT"  # how a committed report names an output folder outside the repository

# (key, label, decimals) of every per-run figure, in table order
FIGURES = [
    ("params", "parameters", 0),
    ("train_tokens_per_s", "training: target tokens/s (steady state)", 0),
    ("train_steps", "training: updates in the budget (the decoded checkpoint's)", 0),
    ("train_peak_rss_mb", "training: peak RSS (MiB)", 0),
    ("train_cuda_peak_mb", "training: peak GPU memory (MiB)", 0),
    ("beam_sentences_per_s", "beam search: sentences/s", 1),
    ("beam_tokens_per_s", "beam search: target tokens/s", 0),
    ("greedy_sentences_per_s", "greedy: sentences/s", 1),
    ("greedy_tokens_per_s", "greedy: target tokens/s", 0),
    ("beam_macs_per_piece", "beam search: multiply-adds per output piece", 0),
    ("beam_gflop_per_s", "beam search: matrix-product GFLOP/s", 2),
    ("greedy_macs_per_piece", "greedy: multiply-adds per output piece", 0),
    ("greedy_gflop_per_s", "greedy: matrix-product GFLOP/s", 2),
    ("decode_peak_rss_mb", "beam search: peak RSS (MiB)", 0),
    ("decode_cuda_peak_mb", "beam search: peak GPU memory (MiB)", 0),
    ("bleu_beam", "BLEU, beam search, after the budget", 2),
    ("bleu_greedy", "BLEU, greedy, after the budget", 2),
    ("lexical_coverage", "lexical shortlist: dev reference pieces covered (%)", 2),
]
# ours alone: data preparation and the cost of attention
OURS_FIGURES = [
    ("prepare_s", "data prepare (s)", 1),
    ("vocab_s", "sentencepiece training (s)", 1),
    ("encode_s", "encoding into the token cache (s)", 1),
    ("prep_total_s", "prepare + vocabulary + encoding, wall (s)", 1),
    ("prep_peak_rss_mb", "peak RSS of those steps (MiB)", 0),
    ("noattn_tokens_per_s", "no-attention model: training target tokens/s", 0),
]
READING = (
    "Each cell: the median over the repetitions, [min, max] when there were several. Ratios (of the "
    "medians) above 1 favour ours for speed and BLEU; for memory and multiply-adds, below 1 does."
)
# Multiply-adds per piece within this factor of ours: the searches compare at equal arithmetic
EQUAL_ARITHMETIC = 1.1
# the speed targets: the factor ours / faster peer required on each device
TARGETS = {
    "cpu": {"train": 1.5, "beam": 2.0, "greedy": 1.0},
    "cuda": {"train": 2.0, "beam": 3.0, "greedy": 1.0},
}


def medians(runs: list[dict[str, Any]], keys: list[str]) -> dict[str, float | None]:
    """The median of each figure over the runs that produced it (None when none did)."""
    out: dict[str, float | None] = {}
    for key in keys:
        values = [run[key] for run in runs if run.get(key) is not None]
        out[key] = median(values) if values else None
    return out


def ranges(runs: list[dict[str, Any]], keys: list[str]) -> dict[str, list[float]]:
    """[min, max] of each figure that several runs produced (one run has no range)."""
    out = {}
    for key in keys:
        values = [run[key] for run in runs if run.get(key) is not None]
        if len(values) > 1:
            out[key] = [min(values), max(values)]
    return out


def ratio(ours: float | None, peer: float | None) -> float | None:
    return ours / peer if ours is not None and peer else None


def apply_window(result: dict[str, Any]) -> None:
    """Every run's steady training rate over the same range of updates (`logs.common_window`), in place."""
    runs = [run for toolkit in result["toolkits"].values() for run in toolkit["runs"]]
    extras = result.get("ours_extra", [])
    point_lists = [run.get("train_points", []) for run in runs] + [e.get("noattn_points", []) for e in extras]
    settings = result["settings"]
    window = logs.common_window(point_lists, settings["warmup"], settings["steps"])
    for run in runs:
        run["train_tokens_per_s"] = logs.steady_rate(run.get("train_points", []), window)
    for extra in extras:
        extra["noattn_tokens_per_s"] = logs.steady_rate(extra.get("noattn_points", []), window)
    result["window"] = list(window)


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """Add the common window, medians, ratios ours/peer and the targets to a result (in place); return it."""
    apply_window(result)
    keys = [key for key, _, _ in FIGURES]
    for toolkit in result["toolkits"].values():
        toolkit["median"] = medians(toolkit["runs"], keys)
        toolkit["range"] = ranges(toolkit["runs"], keys)
    ours = result["toolkits"].get("ours", {}).get("median", {})
    peers = {key: t for key, t in result["toolkits"].items() if key != "ours"}
    result["ratios"] = {
        key: {figure: ratio(ours.get(figure), peer["median"][figure]) for figure in keys}
        for key, peer in peers.items()
    }
    extra = result.get("ours_extra", [])
    result["ours_median"] = medians(extra, [key for key, _, _ in OURS_FIGURES])
    result["targets"] = targets(result)
    return result


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each speed target on this device: what it asks, the ratio measured, whether it is met."""
    factors = TARGETS.get(result["machine"]["device"], TARGETS["cpu"])
    ours = result["toolkits"].get("ours", {}).get("median", {})
    peers = [t["median"] for key, t in result["toolkits"].items() if key != "ours" and t["runs"]]

    def versus_best_peer(figure: str) -> float | None:
        values = [peer[figure] for peer in peers if peer.get(figure) is not None]
        return ratio(ours.get(figure), max(values)) if values else None

    noattn = result.get("ours_median", {}).get("noattn_tokens_per_s")
    rows = [
        (
            "training target tokens/s vs the faster peer",
            versus_best_peer("train_tokens_per_s"),
            factors["train"],
        ),
        (
            "beam-search sentences/s vs the faster peer",
            versus_best_peer("beam_sentences_per_s"),
            factors["beam"],
        ),
        (
            "greedy target tokens/s vs the faster peer",
            versus_best_peer("greedy_tokens_per_s"),
            factors["greedy"],
        ),
        ("BLEU after the same budget vs the best peer", versus_best_peer("bleu_beam"), 1.0),
        ("attention / no-attention training tokens/s", ratio(ours.get("train_tokens_per_s"), noattn), 0.5),
    ]
    return [
        {
            "target": name,
            "measured": value,
            "required": required,
            "met": None if value is None else value >= required,
        }
        for name, value, required in rows
    ]


# ----------------------------------------------------------------------------------------------------------
# files


def save(result: dict[str, Any], doc: Path, out: Path) -> Path:
    """Store `result` (its paths `portable`) in the JSON next to `doc` (by device and corpus), regenerate
    `doc`; returns the JSON."""
    path = doc.with_suffix(".json")
    results = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    results[f"{result['machine']['device']} {result['corpus']['id']}"] = portable(result, out=out)
    write_json(path, results)
    write_text(doc, markdown(results))
    return path


def map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """`value` (JSON-like: dicts, lists, scalars) with `change` applied to every string in it."""
    if isinstance(value, dict):
        return {key: map_strings(item, change) for key, item in value.items()}
    if isinstance(value, list):
        return [map_strings(item, change) for item in value]
    return change(value) if isinstance(value, str) else value


def shown_command(prog: str, argv: list[str], placeholders: dict[str, str]) -> str:
    """The command as a committed report shows it: the value of each option in `placeholders` (`--opt v` or
    `--opt=v`) relative to the repository when inside it, else the option's placeholder, not this machine's
    path."""

    def shown(option: str, value: str) -> str:
        path = Path(value).resolve()
        return str(path.relative_to(REPOSITORY)) if path.is_relative_to(REPOSITORY) else placeholders[option]

    words = list(argv)
    for i, word in enumerate(argv):
        option, equals, value = word.partition("=")
        if equals and option in placeholders:
            words[i] = f"{option}={shown(option, value)}"
        elif i and argv[i - 1] in placeholders:
            words[i] = shown(argv[i - 1], word)
    return f"{prog} " + shlex.join(words)


def portable(value: Any, root: Path = REPOSITORY, out: Path | None = None) -> Any:
    """`value` with absolute paths inside the repository made relative to it, and those inside an `out`
    folder elsewhere written from OUT (the report is committed: no machine's paths)."""
    prefixes = {f"{root}/": ""}
    if out is not None and not out.resolve().is_relative_to(root):
        prefixes[f"{out.resolve()}/"] = f"{OUT}/"

    def shown(text: str) -> str:
        prefix = next((prefix for prefix in prefixes if text.startswith(prefix)), None)
        return text if prefix is None else prefixes[prefix] + text[len(prefix) :]

    return map_strings(value, shown)


def markdown(results: dict[str, dict[str, Any]]) -> str:
    """The whole report: one section per device and corpus, CPU first."""
    lines = [
        "# Performance: seq2seq-attn side by side with JoeyNMT and OpenNMT-py",
        "",
        "Generated by `python -m benchmarks.bench` (`make bench`): do not edit by hand, rerun it. The",
        "figures of every run are in the JSON file next to this one; the logs of every stage in the output",
        "folder.",
        "What each figure means: benchmarks/README.md; the figures in context: docs/performance.md.",
    ]
    for key in sorted(results, key=lambda k: (not k.startswith("cpu"), k)):
        lines += ["", *section(results[key])]
    return "\n".join(lines) + "\n"


def section(result: dict[str, Any]) -> list[str]:
    """One device: how it was run, the side-by-side table, the targets, ours alone, problems, method."""
    m = result["machine"]
    where = f"GPU: {m['gpu']}" if m["device"] == "cuda" else f"CPU: {m['cpu']}, {m['cores']} cores"
    title = f"{where}; corpus {result['corpus']['id']}"
    lines = [f"## {title}", "", f"    {result['command']}", "", *_context(result), ""]
    lines += _side_by_side(result["toolkits"], result["ratios"])
    lines += ["", READING]
    lines += [*_arithmetic(result), ""]
    lines += ["| target | measured | required | met |", "|---|---:|---:|---|"]
    for t in result["targets"]:
        met = "n/a" if t["met"] is None else ("yes" if t["met"] else "**no**")
        lines.append(f"| {t['target']} | {_ratio(t['measured'])} | {t['required']:g}× | {met} |")
    ours = result["ours_median"]
    if any(value is not None for value in ours.values()):
        lines += ["", "| ours alone | median |", "|---|---:|"]
        lines += [
            f"| {label} | {_number(ours[key], d)} |"
            for key, label, d in OURS_FIGURES
            if ours[key] is not None
        ]
    lines += _by_length(result.get("by_length"))
    problems = [
        f"- {t['label']} skipped: {t['skipped']}" for t in result["toolkits"].values() if t.get("skipped")
    ]
    for t in result["toolkits"].values():
        problems += [
            f"- {t['label']}, repetition {r['rep'] + 1}: {r['error']}" for r in t["runs"] if r.get("error")
        ]
    if problems:
        lines += ["", "Problems:", "", *problems]
    return [*lines, "", *METHOD]


def _context(result: dict[str, Any]) -> list[str]:
    m, s, corpus = result["machine"], result["settings"], result["corpus"]
    gpu = f"; {m['gpu']} (CUDA {m['cuda']})" if "gpu" in m else ""
    pairs = ", ".join(f"{n:,} {split}" for split, n in corpus["pairs"].items())
    stop = f" or {s['max_steps']} updates, whichever comes first" if s["max_steps"] else ""
    repetitions = f"{s['reps']} repetition{'s' if s['reps'] != 1 else ''}"
    first, last = result["window"]
    short = (
        f" (asked for {first}-{first + s['steps']}; the shortest run's log ends at update {last})"
        if last < first + s["steps"]
        else ""
    )
    peaks = [r["peak_load"] for t in result["toolkits"].values() for r in t["runs"] if r.get("peak_load")]
    peak = f"at most {max(peaks):.2f}" if peaks else "not measured"
    return [
        f"- machine: {summary(m)}{gpu}; {m['os']}; Python {m['python']}; {m['date']}",
        f"- load: 1-minute load average {m['load_before']:.2f} before the run, {peak} during it "
        "(ours included)",
        *(f"- **warning**: {warning}" for warning in result.get("warnings", [])),
        "- toolkits: " + "; ".join(_version(t) for t in result["toolkits"].values()),
        *_opennmt_sizes(result),
        f"- corpus: {corpus['name']}: {pairs} pairs",
        f"- {repetitions}, toolkits alternating, medians shown",
        f"- training: {s['budget_min']:g} min of wall clock from process start{stop}; batch {s['batch']} "
        f"sentences; pairs up to {s['max_len']} pieces; steady state = mean over updates {first}-{last} "
        f"for every toolkit, in intervals of {s['log_every']}{short}",
        f"- decoding: beam {s['beam']} and greedy; GNMT length penalty alpha {s['alpha']:g}; a sentence "
        "stops when a step's best candidate is EOS (the peers' rule; ours `decode.stopping: top`); "
        + _output_bound(s),
        f"- our search: {_levers(s)}",
    ]


def _by_length(scored: dict[str, Any] | None) -> list[str]:
    """`--by-length`: the quality reached in the budget, per source-length bucket, as `seq2seq eval` reports
    it (ours against each peer with paired significance), and the command that re-scores the outputs."""
    if not scored:
        return []
    heading = ["", "### Quality after the same budget, by source length", ""]
    if "error" in scored:
        return [*heading, f"Not scored: {scored['error']}"]
    return [
        *heading,
        "The beam-search outputs are committed next to this report; re-score them with",
        "",
        f"    {scored['command']}",
        "",
        f"![BLEU by source length]({Path(scored['plot']).parent.name}/{Path(scored['plot']).name})",
        "",
        *render_markdown(scored["report"]).splitlines(),
    ]


def _levers(settings: dict[str, Any]) -> str:
    """Our search's speed levers in the run: its precision and lexical shortlist."""
    precision = settings.get("precision", "auto")
    text = "fp32" if precision == "auto" and settings.get("device") == "cpu" else precision
    lexical = settings.get("lexical_shortlist")
    if not lexical:
        return f"{text}, full output layer"
    top_k, frequent = lexical
    return (
        f"{text}, lexical shortlist of {top_k} candidates per source piece and the {frequent:,} most "
        "frequent target pieces, learnt from the trained run by `seq2seq lexical-shortlist`"
    )


def _arithmetic(result: dict[str, Any]) -> list[str]:
    """Whether each peer's search did the same multiply-adds per piece as ours (within EQUAL_ARITHMETIC),
    so that its speed compares the searches at equal arithmetic as well as equal steps."""
    lines = []
    for key, ratios in result["ratios"].items():
        label = result["toolkits"][key]["label"]
        for name in ("beam", "greedy"):
            value = ratios.get(f"{name}_macs_per_piece")
            if value is not None:
                equal = 1 / EQUAL_ARITHMETIC <= value <= EQUAL_ARITHMETIC
                verdict = "equal arithmetic" if equal else "**not** equal arithmetic"
                lines.append(f"- {name}, ours / {label}: {value:.2f}x the multiply-adds per piece: {verdict}")
    return ["", *lines] if lines else []


def _opennmt_sizes(result: dict[str, Any]) -> list[str]:
    """OpenNMT-py's width, when it ran: its `hidden_size` is the decoder's and is split in two for the
    encoder's directions, so at one hidden size its encoder is half as wide as ours."""
    if not any(key.startswith(logs.OPENNMT) for key in result["toolkits"]):
        return []
    hidden = result["settings"].get("opennmt_hidden", 256)
    return [
        f"- OpenNMT-py sizes: hidden_size {hidden}: encoder {hidden // 2} + {hidden // 2}, decoder {hidden}"
    ]


def _side_by_side(toolkits: dict[str, Any], ratios: dict[str, Any]) -> list[str]:
    peers = [key for key in toolkits if key != "ours"]
    header = [
        "",
        *(t["label"] for t in toolkits.values()),
        *(f"ours / {toolkits[p]['label']}" for p in peers),
    ]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for key, label, decimals in FIGURES:
        values = [t.get("median", {}).get(key) for t in toolkits.values()]
        if all(value is None for value in values):
            continue  # e.g. GPU memory on a CPU run
        spans = [t.get("range", {}).get(key) for t in toolkits.values()]
        numbers = [
            _number(v, decimals) + _span(span, decimals) for v, span in zip(values, spans, strict=True)
        ]
        cells = [label, *numbers, *(_ratio(ratios[p][key]) for p in peers)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


METHOD = f"""How it is measured:

- Same tokens for all: our sentencepiece models cut the prepared corpus into pieces once; the peers read those
  pieces as words and their output is joined back into text with the same models. BLEU: sacrebleu (13a) on
  detokenised text against the untouched references, for all three.
- Matched models: 1-layer bidirectional encoder and 1-layer decoder with attention, of our config's cell,
  embeddings 128, and the same kind of attention score as our config's (additive: our `bahdanau`,
  OpenNMT-py's `mlp`, JoeyNMT's `bahdanau`; Luong's `general`: JoeyNMT's `luong`). OpenNMT-py (`opennmt`)
  trains with our config's optimiser, rate, clipping, loss normalisation and dropout before the output
  layer; `opennmt-general` is its default model and recipe (LSTM cells, `general` attention, SGD at 1,
  loss per sentence, dropout 0.3) at our network's widths; JoeyNMT Adam 1e-3, clip 5, dropout 0.1. The
  toolkits count sizes differently (OpenNMT-py's `brnn` splits 256 into 128 + 128): compare the parameter
  counts.
- Training throughput: target tokens/s (padding excluded, EOS included) as each toolkit logs it per interval,
  averaged over the same range of updates for every toolkit (cut to where the shortest run's log ends).
  Updates in the budget: those behind the checkpoint that is decoded, i.e. where training stopped.
- Load: the 1-minute load average before the run, and during each timed stage the cores other processes
  kept busy (all CPU time on the machine minus the stage's own); above {COMPETING_CORES:g} cores, a warning.
- Wall-clock budget: each toolkit's training process gets SIGINT the same number of seconds after it started
  (SIGTERM 30 s later if it is still running: OpenNMT-py sometimes trains on through SIGINT); ours and
  JoeyNMT save a checkpoint then, OpenNMT-py does not, so it saves one every interval and loses at most one
  interval; its checkpoints and log lines written after the budget are left out. That last checkpoint is
  decoded and scored. Every repetition trains from scratch in an emptied folder.
- Decoding: the whole test set, timed by each toolkit around its search (start-up and model loading
  excluded): OpenNMT-py's translation time, JoeyNMT's generation time, ours around the translate pipeline
  (`benchmarks/ours_decode.py`). Every toolkit decodes `batch` sentences per batch and stops a sentence
  once the best candidate of a step is EOS (OpenNMT-py's and JoeyNMT's rule; ours runs it with
  `decode.stopping: top`, where its default, `bound`, searches on while a longer hypothesis can still win).
  Target tokens are the generated pieces. int8 (`--precision int8`): ours `decode.precision: int8`,
  OpenNMT-py its model through torch's `quantize_dynamic` (Linear layers and recurrent cells).
- Arithmetic: after its timed run, ours and OpenNMT-py decode the whole test set again, in the batches
  the timed run made, untimed and in fp32, under torch's `FlopCounterMode`: the matrix products'
  multiply-adds (encoder and its padding included) per generated piece. GFLOP/s: twice that, times the
  timed run's pieces per second (an int8 search does the same multiply-adds, in int8).
- Memory: each process's own peak RSS (VmHWM, recorded at its exit); on GPU also
  `torch.cuda.max_memory_allocated`.
- Ours alone: `seq2seq data prepare` + `seq2seq vocab` redone from scratch each repetition, and the
  no-attention model (`--baseline` config) trained over the same window of updates.""".splitlines()


def _output_bound(settings: dict[str, Any]) -> str:
    """The output-length rule of the run."""
    steps = settings.get("decode_steps", 0)
    if steps:
        return (
            f"every output exactly {steps} pieces (`--decode-steps`: EOS forbidden before them, the search "
            "ended after them; ours runs one step more, to score its EOS), so decoding speed compares the "
            "searches at equal steps whatever the models learnt (equal arithmetic only where the "
            "multiply-adds per piece match), and BLEU is no quality figure"
        )
    return (
        f"outputs up to {settings['max_output_ratio']:g} x source pieces + 5 (JoeyNMT: 1.5 x the batch's "
        "longest source, its only relative bound)"
    )


def _version(toolkit: dict[str, Any]) -> str:
    parts = [f"{key} {value}" for key, value in (toolkit.get("version") or {}).items() if value]
    return toolkit["label"] + (f" ({', '.join(parts)})" if parts else "")


def _span(span: list[float] | None, decimals: int) -> str:
    return "" if span is None else f" [{_number(span[0], decimals)}, {_number(span[1], decimals)}]"


def _number(value: float | None, decimals: int) -> str:
    return "–" if value is None else f"{value:,.{decimals}f}"


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"
