"""Benchmark ours side by side with JoeyNMT 2.3.0 and OpenNMT-py 3.5.1, on the same tokens and budget.

For each repetition, the toolkits run one after the other (the order rotates), each: train a matched model
for the wall-clock budget, then decode the whole test set with beam search and greedily from the checkpoint
it reached, and score it. Ours also redoes data preparation + vocabulary + encoding from scratch, and trains
its no-attention model over the same updates. Training throughput is the mean over one range of updates,
the same for every toolkit. Medians over the repetitions and the ratios ours/peer go to --doc (markdown)
and the JSON file next to it; every stage's log stays under --out. Run from the repository root:

    python -m benchmarks.bench                          # synthetic corpus, 3 x 5 minutes per toolkit
    python -m benchmarks.bench --corpus DIR             # any folder of {train,valid,test}.{en,fr}[.gz]
    python -m benchmarks.bench --toolkits ours --reps 1 --budget 0.5 --doc /tmp/p.md   # a quick look at ours

With `--curves 10,20,30 --seeds 1,2` it measures quality against time instead (benchmarks/curves.py): each
system trains once per seed, a checkpoint is written at each point and every one is decoded and scored by
length. The set-up (data, pieces, the peers' installs, the machine) is the same for both modes.

The peers are pip-installed on first use into --cache (see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sacrebleu

from seq2seq_attn.config import Config, DecodeConfig, choices_enum, load_config
from seq2seq_attn.io import read_lines, write_json, write_text

from . import curves, logs, report
from .machine import describe, load_warning, provenance_warnings, span_warning
from .measure import Job, Measured, launched, read_snapshots, run_job
from .toolkits import (
    PEERS,
    Levers,
    Ours,
    Pieces,
    Settings,
    Skip,
    Toolkit,
    export_pieces,
    matched_recipe,
)

ROOT = Path(__file__).resolve().parent.parent
SEQ2SEQ = ["-m", "seq2seq_attn"]
ALL = ["ours", *PEERS]
SIDE_BY_SIDE = ["ours", "joeynmt", "opennmt"]  # the default systems of the side-by-side run
CURVES = ["ours", "opennmt", "opennmt-general"]  # ... of --curves (JoeyNMT has no checkpoints on request)
PROG = f"python -m {__spec__.name}"  # how it is run, for --help and the report
RESULTS = ROOT / "benchmarks/results/side_by_side.md"  # the latest run per device and corpus
CURVE_RESULTS = ROOT / "benchmarks/results/quality_curves.md"
REPS, BUDGET_MIN, SEEDS = 3, 5.0, [1, 2]  # the defaults of --reps, --budget, --seeds
# a committed report shows a folder outside the repository by its placeholder, not by this machine's path
PLACEHOLDERS = {"--out": report.OUT, "--cache": "CACHE", "--doc": "DOC"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add(
        "--corpus",
        type=Path,
        help="folder with line-aligned {train,valid,test}.{SRC,TGT}[.gz] (default: synthetic)",
    )
    add(
        "--corpus-name",
        help="what the report calls --corpus in its command, settings and headings (e.g. the docs' EN_FR), "
        "so that a committed report names no local path (default: the folder's name, with the path as "
        "given in the command and settings)",
    )
    add("--src-lang", default="en", help="source file suffix in --corpus")
    add("--tgt-lang", default="fr", help="target file suffix in --corpus")
    add("--reps", type=int, help=f"repetitions (medians and min-max are reported; default {REPS})")
    add("--budget", type=float, help=f"training wall-clock budget per run, minutes (default {BUDGET_MIN:g})")
    add("--warmup", type=int, default=25, help="updates left out of the steady-state throughput")
    add(
        "--steps",
        type=int,
        default=100,
        help="updates after the warm-up averaged (fewer if a run stops first)",
    )
    add("--log-every", type=int, default=25, help="updates per throughput interval (all toolkits)")
    add(
        "--max-steps", type=int, default=0, help="also stop training after this many updates (0: budget only)"
    )
    add("--batch", type=int, default=64, help="sentences per batch")
    add("--beam", type=int, default=5, help="beam width")
    add("--max-len", type=int, default=100, help="skip training pairs longer than this many pieces")
    add(
        "--max-output-ratio",
        type=float,
        default=1.5,
        help="generate at most this many pieces per source piece, + 5 (OpenNMT-py's -max_length_ratio)",
    )
    add("--alpha", type=float, default=0.6, help="GNMT length-penalty exponent for all toolkits")
    add(
        "--decode-steps",
        type=int,
        default=0,
        help="decode every test sentence into exactly N pieces in every toolkit (0: until EOS), so that "
        "decoding speed compares the searches at equal steps whatever the models learnt (each search's "
        "multiply-adds per piece say whether the arithmetic is equal too); not JoeyNMT",
    )
    add("--device", choices=["auto", "cpu", "cuda"], default="auto")
    add("--threads", type=int, default=0, help="OMP/MKL threads of every process (0: torch's default)")
    add(
        "--opennmt-hidden",
        type=int,
        default=Settings.opennmt_hidden,
        help="OpenNMT-py's hidden_size: its decoder's; its brnn encoder gets half per direction (512: ours)",
    )
    add(
        "--toolkits",
        help=f"comma-separated subset of {','.join(ALL)} (default: {','.join(SIDE_BY_SIDE)}; with --curves "
        f"{','.join(CURVES)}). opennmt: matched to our model and recipe; opennmt-general: its default "
        "model (general attention, input feeding) and recipe",
    )
    add("--config", type=Path, default=ROOT / "configs/small_rnnsearch.yaml", help="our attention model")
    add("--baseline", type=Path, default=ROOT / "configs/small_rnnencdec.yaml", help="our no-attention model")
    add(
        "--set",
        action="append",
        default=[],
        dest="overrides",
        help="extra override for our configs, KEY=VALUE",
    )
    add("--out", type=Path, default=ROOT / "runs/bench", help="logs, data and models of every run")
    add("--cache", type=Path, default=ROOT / ".bench", help="the peers' virtual environments (venvs/)")
    add(
        "--doc",
        type=Path,
        help=f"markdown report, JSON next to it (default: {RESULTS.relative_to(ROOT)}; with --curves "
        f"{CURVE_RESULTS.relative_to(ROOT)})",
    )
    add("--no-install", action="store_true", help="never pip-install a peer; skip those not installed")
    add(
        "--precision",
        choices=[c.value for c in choices_enum(DecodeConfig, "precision")],
        default="auto",
        help="our search's decode.precision (auto: fp32 on CPU, bf16 on GPU; int8: CPU only); int8 also "
        "runs OpenNMT-py's search int8 (torch's quantize_dynamic of its Linear layers and recurrent cells)",
    )
    add(
        "--lexical-shortlist",
        type=int,
        nargs=2,
        metavar=("TOP_K", "FREQUENT"),
        help="our search scores only each sentence's lexical candidates: a table of TOP_K candidates per "
        "source piece and the FREQUENT most frequent target pieces, learnt from the trained run by "
        "`seq2seq lexical-shortlist` after training (not timed with decoding)",
    )
    add(
        "--by-length",
        action="store_true",
        help="quality per CPU-hour: score each toolkit's beam-search output of the test set by source length "
        "(Moses words) with `seq2seq eval --by-length`, ours against each peer with paired bootstrap "
        "significance; the outputs, the eval report and its plot go to a folder named after --doc. One "
        "run per toolkit (--reps 1) with a realistic --budget; ours' preparation timing and no-attention "
        "run are left out",
    )
    add(
        "--curves",
        type=_numbers(float),
        metavar="MIN,MIN,...",
        help="quality against time: each system trains once per --seeds seed for the last point's minutes, "
        "with a checkpoint written at each point (its write left out of the training time); each is "
        "decoded (beam search) and scored by length; medians and min-max per point, BLEU against CPU-"
        "seconds and wall clock in a PNG. Every toolkit loads its data its default way inside its clock",
    )
    add(
        "--seeds",
        type=_numbers(int),
        metavar="S,S,...",
        help=f"--curves: the seeds, one training per system each (default {','.join(map(str, SEEDS))}); "
        "ours gets `seed`, OpenNMT-py `seed`",
    )
    add(
        "--add-seeds",
        action="store_true",
        help="--curves: add these seeds to the result already in --doc's JSON, the same measurement with "
        "other seeds run earlier (checked first); each sitting's machine and command are kept with its seeds",
    )
    args = parser.parse_args(argv)
    if args.curves is not None:
        _check_curves(parser, args)
    elif args.seeds is not None or args.add_seeds:
        parser.error("--seeds, --add-seeds: only with --curves")
    if args.corpus_name and not args.corpus:
        parser.error("--corpus-name: only with --corpus")
    args.reps = REPS if args.reps is None else args.reps
    args.budget = BUDGET_MIN if args.budget is None else args.budget
    args.toolkits = args.toolkits or ",".join(CURVES if args.curves else SIDE_BY_SIDE)
    args.doc = args.doc or (CURVE_RESULTS if args.curves else RESULTS)
    unknown = sorted(set(args.toolkits.split(",")) - set(ALL))
    if unknown:
        parser.error(f"--toolkits: unknown {', '.join(unknown)} (choose from {', '.join(ALL)})")
    if min(args.reps, args.steps, args.log_every, args.batch, args.beam) < 1 or args.budget <= 0:
        parser.error("--reps, --steps, --log-every, --batch, --beam and --budget must be positive")
    if args.decode_steps < 0:
        parser.error("--decode-steps must be >= 0")
    if args.by_length and (args.reps != 1 or args.decode_steps):
        parser.error(
            "--by-length scores one run per toolkit at its own output lengths: use --reps 1 "
            "without --decode-steps"
        )
    if args.curves:
        _check_curve_systems(parser, args)
    return args


def _numbers(kind: type):
    """An argparse type: comma-separated numbers of `kind`, e.g. '10,20,30'."""

    def parse(text: str) -> list:
        try:
            return [kind(part) for part in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None

    return parse


def _check_curves(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--curves: increasing positive points, distinct seeds, and none of what belongs to the side-by-side
    run (repetitions are the seeds, the budget is the last point, the search is the plain beam search)."""
    points, args.seeds = args.curves, args.seeds or SEEDS
    if min(points) <= 0 or points != sorted(set(points)):
        parser.error(f"--curves: increasing positive minutes, got {','.join(map(str, points))}")
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds: each seed once, got {','.join(map(str, args.seeds))}")
    given = {
        "--reps": args.reps is not None,
        "--budget": args.budget is not None,
        "--max-steps": bool(args.max_steps),
        "--by-length": args.by_length,
        "--decode-steps": bool(args.decode_steps),
        "--precision": args.precision != "auto",
        "--lexical-shortlist": bool(args.lexical_shortlist),
    }
    clashing = [option for option, set_ in given.items() if set_]
    if clashing:
        parser.error(
            f"--curves: not with {', '.join(clashing)} (the seeds repeat, the last point ends training)"
        )


def _check_curve_systems(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--curves: every system can be asked for checkpoints, and OpenNMT-py's encoder is as wide as ours
    (its `brnn` gives each direction half of --opennmt-hidden, ours `model.hidden_size`)."""
    chosen = args.toolkits.split(",")
    if "joeynmt" in chosen:
        parser.error("--curves: JoeyNMT cannot be asked for a checkpoint while it trains (no hook)")
    if not any(key.startswith("opennmt") for key in chosen):
        return
    model = load_config(args.config, args.overrides, "--set").model
    if not model.bidirectional or args.opennmt_hidden != 2 * model.hidden_size:
        parser.error(
            f"--curves: encoder widths differ: ours {model.hidden_size} per direction"
            f"{'' if model.bidirectional else ' (one direction)'}, OpenNMT-py {args.opennmt_hidden // 2} "
            f"per direction of two; give --opennmt-hidden {2 * model.hidden_size} or --set "
            f"model.hidden_size={args.opennmt_hidden // 2}"
        )


@dataclass
class Bench:
    """What both modes start from once set up: the settings, the environment of every process, where
    everything goes, the test set's references, the toolkits ready to run (peers installed, the data in
    pieces) and the result's common part (command, machine, settings, corpus, toolkits, warnings)."""

    args: argparse.Namespace
    settings: Settings
    env: dict[str, str]
    out: Path
    data_dir: Path
    refs: list[str]
    toolkits: list[Toolkit]
    result: dict[str, Any]
    ours_sets: list[str]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    bench = set_up(args, argv)
    if args.curves:
        quality_curves(bench)
    else:
        side_by_side(bench)


def set_up(args: argparse.Namespace, argv: list[str] | None) -> Bench:
    """Describe the machine (first: the load before any of our work), prepare the data and our
    vocabulary, hand the peers our pieces, install the peers (a peer that cannot run is skipped, with the
    reason in the result)."""
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench: --device cuda: no CUDA device is available")
    machine = describe(device, args.threads)
    config = load_config(args.config, args.overrides, "--set")
    settings = _settings(args, device, config)
    out = args.out.resolve()
    env = _environment(args.threads)
    data_dir, peer_dir = out / "data", out / "peer-data"
    data_sets = _data_overrides(args, data_dir)
    ours_sets = [*data_sets, *_train_overrides(settings), *args.overrides]

    _step(f"preparing the data in {data_dir}")
    _prepare(args.config, ours_sets, out / "logs", env, force=False)
    pieces = Pieces(data_dir / "vocab")
    export_pieces(data_dir, pieces, peer_dir)

    chosen = args.toolkits.split(",")
    toolkits: list[Toolkit] = []
    result: dict[str, Any] = {
        "command": _command(args, sys.argv[1:] if argv is None else argv),
        "machine": machine,
        "settings": {
            **_jsonable(vars(args)),
            "corpus": (args.corpus_name or _portable(args.corpus)) if args.corpus else None,
            "budget_min": args.budget,
            "device": device,
            "attention": settings.attention,
        },
        "corpus": _corpus(args, data_dir),
        "toolkits": {},
        "warnings": [],
    }
    _warn(result, load_warning(machine["load_before"]))
    if "ours" in chosen:
        levers = Levers(args.precision, tuple(args.lexical_shortlist) if args.lexical_shortlist else None)
        toolkits.append(Ours(args.config, ours_sets, settings, data_dir, levers))
    for key in (k for k in PEERS if k in chosen):
        peer = PEERS[key](args.cache.resolve(), peer_dir, pieces, settings, torch.__version__.split("+")[0])
        _step(f"setting up {peer.label} in {peer.venv}")
        try:
            peer.setup(install=not args.no_install)
            toolkits.append(peer)
        except Skip as reason:
            result["toolkits"][key] = {"label": peer.label, "skipped": str(reason), "runs": []}
            print(f"bench: {peer.label} skipped: {reason}", file=sys.stderr)
    for toolkit in toolkits:
        result["toolkits"][toolkit.key] = {
            "label": toolkit.label,
            "version": toolkit.version(),
            "recipe": toolkit.recipe_text(),
            "runs": [],
        }
    result["toolkits"] = {key: result["toolkits"][key] for key in ALL if key in result["toolkits"]}
    refs = list(read_lines(data_dir / "test.tgt"))
    return Bench(args, settings, env, out, data_dir, refs, toolkits, result, ours_sets)


def side_by_side(bench: Bench) -> None:
    """--reps repetitions: each toolkit trains to the budget, then decodes the test set with beam search and
    greedily (toolkits alternating); ours also times its data preparation and its no-attention model.
    Medians, min-max and ratios to --doc."""
    args, result, out = bench.args, bench.result, bench.out
    result["ours_extra"] = []
    # our no-attention model, trained just over the throughput window
    baseline_sets = [*bench.ours_sets, f"train.max_steps={args.warmup + args.steps}"]
    baseline = Ours(args.baseline, baseline_sets, bench.settings, bench.data_dir)
    for rep in range(args.reps):
        for toolkit in _rotated(bench.toolkits, rep):
            _step(f"repetition {rep + 1}/{args.reps}: {toolkit.label}")
            folder = out / f"rep{rep + 1}" / toolkit.key
            record = run_toolkit(toolkit, folder, bench.settings.beam, bench.env, bench.refs)
            result["toolkits"][toolkit.key]["runs"].append({"rep": rep, **record})
            for stage, others in record["others_cores"].items():
                _warn(result, span_warning(f"{toolkit.label} {stage}, repetition {rep + 1}", others))
            if toolkit.key == "ours" and not args.by_length:
                extra = ours_extra(args.config, bench.ours_sets, baseline, folder.parent, bench.env)
                result["ours_extra"].append({"rep": rep, **extra})
            write_json(out / "results.json", result)  # partial results survive an interrupted benchmark

    if args.by_length:
        _step("scoring the beam-search outputs by length")
        result["by_length"] = score_by_length(result, bench.data_dir, args, bench.env)
    for warning in provenance_warnings(result["machine"]):
        _warn(result, warning)
    report.summarise(result)
    write_json(out / "results.json", result)
    json_path = report.save(result, args.doc, args.out)
    print(report.markdown({result["machine"]["device"]: result}))
    print(f"bench: wrote {args.doc} and {json_path}; logs under {out}", file=sys.stderr)


def quality_curves(bench: Bench) -> None:
    """--curves: per seed (toolkits alternating), each system trains once with a checkpoint at every
    point, then each checkpoint is decoded and scored by length (`curve_run`); the curves, their medians
    and min-max over the seeds and the plot go to --doc (benchmarks/curves.py)."""
    args, result, out = bench.args, bench.result, bench.out
    try:
        before = curves.earlier(args.doc.with_suffix(".json"), result) if args.add_seeds else None
    except ValueError as problem:
        sys.exit(f"bench: --add-seeds: {problem}")
    done = len(before["settings"]["seeds"]) if before else 0  # seeds of earlier sittings: rotation goes on
    for index, seed in enumerate(args.seeds):
        for toolkit in _rotated(bench.toolkits, done + index):
            _step(f"seed {seed}: {toolkit.label}")
            record = curve_run(toolkit.seeded(seed), out / f"seed{seed}" / toolkit.key, bench)
            result["toolkits"][toolkit.key]["runs"].append({"seed": seed, **record})
            for stage, others in record["others_cores"].items():
                _warn(result, span_warning(f"{toolkit.label} {stage}, seed {seed}", others))
            for point in record["points"]:
                _warn(result, curves.late_warning(f"{toolkit.label}, seed {seed}", point))
            write_json(out / "results.json", result)  # partial results survive an interrupted benchmark
    for warning in provenance_warnings(result["machine"]):
        _warn(result, warning)
    if before is not None:
        curves.add_seeds(result, before)
    curves.summarise(result)
    write_json(out / "results.json", result)
    json_path = curves.save(result, args.doc, args.out)
    print(curves.markdown(result))
    print(f"bench: wrote {args.doc}, {json_path} and the plot; logs under {out}", file=sys.stderr)


def _rotated(toolkits: list[Toolkit], turn: int) -> list[Toolkit]:
    """The toolkits in order, each turn starting with the next one (none always runs first)."""
    shift = turn % max(len(toolkits), 1)
    return toolkits[shift:] + toolkits[:shift]


def train(toolkit: Toolkit, folder: Path, env: dict[str, str], points: tuple[float, ...] = ()) -> Measured:
    """Train `toolkit` in an emptied `folder`: to the budget, or with a checkpoint at each of `points`."""
    toolkit.prepare_training(folder)
    return run_job(toolkit.train_job(folder, points), env)


def decode(
    toolkit: Toolkit, checkpoint: Path, beam: int, hyp: Path, env: dict[str, str], refs: list[str]
) -> dict[str, Any]:
    """Decode the test set with `checkpoint` into `hyp` (the toolkit's own output) and its detokenised
    text next to it (`.txt`); the search's figures: time, rates, sacrebleu BLEU, multiply-adds per piece
    and the GFLOP/s they make, memory, and the load meanwhile. `error` (and no rates) when it failed."""
    decoded = run_job(toolkit.decode_job(checkpoint, beam, hyp), env)
    figures: dict[str, Any] = {
        "log": str(decoded.log),
        "peak_rss_mb": decoded.peak_rss_mb,
        "cuda_peak_mb": decoded.cuda_peak_mb,
        "others_cores": decoded.others_cores,
        "peak_load": decoded.peak_load,
    }
    if decoded.returncode or not hyp.is_file():
        return {**figures, "error": f"decoding failed (exit {decoded.returncode}), see {decoded.log}"}
    output = toolkit.output(hyp, decoded)
    if len(output.texts) != len(refs):
        return {**figures, "error": f"decoding gave {len(output.texts)} lines for {len(refs)}: {hyp}"}
    if not output.seconds:
        return {**figures, "error": f"decoding time not found in {decoded.log}"}
    text = hyp.with_suffix(".txt")  # detokenised, whatever the toolkit writes
    write_text(text, "".join(f"{line}\n" for line in output.texts))
    macs = output.macs_per_piece
    return {
        **figures,
        "text": str(text),
        "seconds": output.seconds,
        "sentences_per_s": len(refs) / output.seconds,
        "tokens_per_s": output.tokens / output.seconds,
        "bleu": sacrebleu.corpus_bleu(output.texts, [refs]).score,
        "macs_per_piece": macs,
        "gflop_per_s": None if macs is None else 2 * macs * output.tokens / output.seconds / 1e9,
    }


def run_toolkit(
    toolkit: Toolkit, folder: Path, beam: int, env: dict[str, str], refs: list[str]
) -> dict[str, Any]:
    """Train for the budget, then decode the test set with beam search and greedily; one flat record.

    The throughput per logging interval is kept as `train_points`; the steady rate over the range of
    updates every toolkit reached is taken from them once all have run (report.summarise).
    `others_cores`: the cores other processes kept busy during each stage (the caller turns them into
    warnings)."""
    trained = train(toolkit, folder, env)
    toolkit.discard_late(folder, trained)
    record: dict[str, Any] = {
        "params": toolkit.parameters(trained),
        "train_points": toolkit.train_points(folder, trained),
        "train_steps": toolkit.trained_steps(folder),  # where training stopped: the decoded checkpoint's
        "train_seconds": trained.seconds,
        "train_peak_rss_mb": trained.peak_rss_mb,
        "train_cuda_peak_mb": trained.cuda_peak_mb,
        "train_log": str(trained.log),
        "peak_load": trained.peak_load,  # the 1-minute load average, ours included
        "others_cores": {"training": trained.others_cores},
    }
    if trained.returncode and not trained.interrupted:
        return {**record, "error": f"training failed (exit {trained.returncode}), see {trained.log}"}
    checkpoint = toolkit.checkpoint(folder)
    if checkpoint is None:
        return {**record, "error": f"training wrote no checkpoint within the budget, see {trained.log}"}
    setup = toolkit.decoding_setup(folder)
    if setup is not None:
        prepared = run_job(setup, env)
        if prepared.returncode:
            return {
                **record,
                "error": f"decoding set-up failed (exit {prepared.returncode}), see {prepared.log}",
            }
        record |= {
            "decoding_setup_s": prepared.seconds,
            "lexical_coverage": logs.lexical_coverage(prepared.text()),
        }
    for name, width in (("beam", beam), ("greedy", 1)):
        decoded = decode(toolkit, checkpoint, width, folder / f"test.{name}.hyp", env, refs)
        record["others_cores"][f"{name} decoding"] = decoded.pop("others_cores")
        record["peak_load"] = max(record["peak_load"], decoded.pop("peak_load"))
        peaks = decoded.pop("peak_rss_mb"), decoded.pop("cuda_peak_mb")
        if "error" in decoded:
            return {**record, "error": f"{name} {decoded['error']}"}
        if name == "beam":
            record["decode_peak_rss_mb"], record["decode_cuda_peak_mb"] = peaks
        record[f"bleu_{name}"] = decoded.pop("bleu")
        record |= {f"{name}_{key}": value for key, value in decoded.items()}
    return record


def curve_run(toolkit: Toolkit, folder: Path, bench: Bench) -> dict[str, Any]:
    """One system, one seed: train with a checkpoint at each --curves point (every write left out of the
    training time, curves.points), decode each with beam search and score all of them by length in one
    `seq2seq eval`. A training that wrote fewer checkpoints keeps those it wrote, with an `error`."""
    minutes = bench.args.curves
    trained = train(toolkit, folder, bench.env, tuple(60 * minute for minute in minutes))
    record: dict[str, Any] = {
        "params": toolkit.parameters(trained),
        "train_seconds": trained.seconds,
        "train_peak_rss_mb": trained.peak_rss_mb,
        "train_log": str(trained.log),
        "peak_load": trained.peak_load,
        "others_cores": {"training": trained.others_cores},
        "points": curves.points(read_snapshots(folder / "snapshots.jsonl"), minutes),
    }
    if len(record["points"]) < len(minutes):
        record["error"] = f"{len(record['points'])} of {len(minutes)} checkpoints written, see {trained.log}"
    for point in record["points"]:
        at = f"{point['minutes']:g} min"
        hyp = folder / f"test.{point['minutes']:g}min.hyp"
        decoded = decode(toolkit, Path(point["checkpoint"]), bench.settings.beam, hyp, bench.env, bench.refs)
        record["others_cores"][f"decoding at {at}"] = decoded["others_cores"]
        record["peak_load"] = max(record["peak_load"], decoded["peak_load"])
        if "error" in decoded:
            return {**record, "error": f"decoding at {at}: {decoded['error']}"}
        point |= {"text": decoded["text"], "decode_s": decoded["seconds"], "bleu_sacrebleu": decoded["bleu"]}
    if record["points"]:
        scored = score_points(record["points"], folder, bench)
        if "error" in scored:
            return {**record, **scored}
    return record


def score_points(points: list[dict[str, Any]], folder: Path, bench: Bench) -> dict[str, Any]:
    """`seq2seq eval --by-length` of one run's checkpoints (each point's beam output, labelled by its
    minutes): each point gets `bleu` and `buckets` (BLEU per source-length bucket) in place; the eval
    report is `by_length.json` in `folder`. {} when scored, else {"error": ...}."""
    systems = [part for p in points for part in ("--hyp", p["text"], "--label", f"{p['minutes']:g} min")]
    path = folder / "by_length.json"
    argv = [
        *SEQ2SEQ,
        "eval",
        *systems,
        *_by_length_options(bench.args, bench.data_dir)[1],
        "--output",
        str(path),
    ]
    scored = run_job(Job(launched(sys.executable, argv), folder / "eval.log", cwd=ROOT), bench.env)
    if scored.returncode:
        return {"error": f"seq2seq eval failed (exit {scored.returncode}), see {scored.log}"}
    report_ = json.loads(path.read_text(encoding="utf-8"))
    for point in points:
        point |= curves.bleu_of(report_, f"{point['minutes']:g} min")
    return {}


def ours_extra(
    config: Path, sets: list[str], baseline: Ours, folder: Path, env: dict[str, str]
) -> dict[str, Any]:
    """Ours alone: data preparation + vocabulary + encoding from scratch, and the no-attention throughput."""
    scratch = folder / "prep-timing"
    prepared, vocab = _prepare(config, [*sets, f"data.dir={scratch / 'data'}"], scratch, env, force=True)
    shutil.rmtree(scratch / "data")  # the logs stay
    trained = train(baseline, folder / "ours-noattn", env)  # never resumes an earlier benchmark's run
    vocab_s, encode_s = logs.vocab_seconds(vocab.text())
    return {
        "prepare_s": prepared.seconds,
        "vocab_s": vocab_s,
        "encode_s": encode_s,
        "prep_total_s": prepared.seconds + vocab.seconds,
        "prep_peak_rss_mb": max((m.peak_rss_mb for m in (prepared, vocab) if m.peak_rss_mb), default=None),
        "noattn_points": baseline.train_points(folder / "ours-noattn", trained),
        "noattn_log": str(trained.log),
    }


def score_by_length(
    result: dict[str, Any], data_dir: Path, args: argparse.Namespace, env: dict[str, str]
) -> dict[str, Any]:
    """Quality after the same budget: every toolkit's beam-search output, copied into the folder named
    after --doc, scored by `seq2seq eval --by-length` (BLEU per source-length bucket with bootstrap
    intervals, and ours against each peer by paired bootstrap resampling). Returns the eval command as
    anyone can rerun it (CORPUS: the --corpus folder), the files and the eval report; an `error` instead
    when a toolkit has no output or eval fails."""
    folder = args.doc.resolve().with_suffix("")
    folder.mkdir(parents=True, exist_ok=True)
    systems: list[str] = []
    for key, toolkit in result["toolkits"].items():
        run = toolkit["runs"][0] if toolkit["runs"] else {}
        if "beam_text" not in run:
            return {"error": f"{toolkit['label']} has no beam-search output to score"}
        hyp = folder / f"{key}.test.beam.txt"
        shutil.copyfile(run["beam_text"], hyp)
        systems += ["--hyp", _portable(hyp), "--label", toolkit["label"]]
    report_path, plot = folder / "by_length.json", folder / "by_length.png"
    corpus, options = _by_length_options(args, data_dir)
    options += ["--significance", "paired-bs"]
    options += ["--baseline", "ours"] if len(result["toolkits"]) > 1 else []
    outputs = ["--output", _portable(report_path), "--plot", _portable(plot)]
    argv = [*SEQ2SEQ, "eval", *systems, *options, *outputs]
    log = args.out.resolve() / "logs" / "eval.log"
    scored = run_job(Job(launched(sys.executable, argv), log, cwd=ROOT), env)
    if scored.returncode:
        return {"error": f"seq2seq eval failed (exit {scored.returncode}), see {scored.log}"}
    # the report is committed: the corpus folder by its placeholder, as in the command
    name = (args.corpus_name or "CORPUS") if args.corpus else "DATA"
    write_text(report_path, report_path.read_text(encoding="utf-8").replace(str(corpus), name))
    command = shlex.join(["seq2seq", "eval", *systems, *options, *outputs])
    return {
        "command": command.replace(str(corpus), name),
        "outputs": systems[1::4],
        "plot": _portable(plot),
        "report": json.loads(report_path.read_text(encoding="utf-8")),
    }


def _by_length_options(args: argparse.Namespace, data_dir: Path) -> tuple[Path, list[str]]:
    """The test set every toolkit translated, for `seq2seq eval --by-length`: the corpus' own files when
    plain text (what a reader has), else our prepared split; lengths in Moses-tokenised source words.
    Returns the folder they are in and the options."""
    corpus = args.corpus.resolve() if args.corpus else data_dir
    ref, src = corpus / f"test.{args.tgt_lang}", corpus / f"test.{args.src_lang}"
    if not (ref.is_file() and src.is_file()):
        corpus, ref, src = data_dir, data_dir / "test.tgt", data_dir / "test.src"
    options = ["--ref", str(ref), "--src", str(src), "--by-length", "--words", "moses"]
    return corpus, [*options, "--words-lang", args.src_lang]


# ----------------------------------------------------------------------------------------------------------
# set-up


def _prepare(config: Path, sets: list[str], logs_dir: Path, env: dict[str, str], force: bool) -> tuple:
    """`seq2seq data prepare` then `seq2seq vocab` (measured); a failure ends the benchmark."""
    done = []
    for verb in (["data", "prepare"], ["vocab"]):
        argv = [
            *SEQ2SEQ,
            *verb,
            str(config),
            *[p for s in sets for p in ("--set", s)],
            *(["--force"] if force else []),
        ]
        measured = run_job(Job(launched(sys.executable, argv), logs_dir / f"{verb[-1]}.log"), env)
        if measured.returncode:
            sys.exit(
                f"bench: seq2seq {' '.join(verb)} failed (exit {measured.returncode}), see {measured.log}"
            )
        done.append(measured)
    return tuple(done)


def _settings(args: argparse.Namespace, device: str, config: Config) -> Settings:
    """What every toolkit gets the same value of, our model's attention, cell and recipe (for the matched
    peer) included. --curves: every toolkit loads its data its default way inside its clock."""
    return Settings(
        device=device,
        batch=args.batch,
        beam=args.beam,
        max_len=args.max_len,
        output_ratio=args.max_output_ratio,
        alpha=args.alpha,
        log_every=args.log_every,
        max_steps=args.max_steps,
        budget_s=args.budget * 60,
        attention=config.model.attention,
        opennmt_hidden=args.opennmt_hidden,
        decode_steps=args.decode_steps,
        cell=config.model.cell,
        embed=config.model.src_embed_dim,
        recipe=matched_recipe(config.model, config.train),
        int8=args.precision == "int8",
        default_loading=bool(args.curves),
    )


def _data_overrides(args: argparse.Namespace, data_dir: Path) -> list[str]:
    """Our config's data section pointed at the benchmark's folder and, with --corpus, at that corpus."""
    sets = [f"data.dir={data_dir}"]
    if args.corpus is None:
        return sets
    sets += ["data.source=local", f"data.src_lang={args.src_lang}", f"data.tgt_lang={args.tgt_lang}"]
    for split in ("train", "valid", "test"):
        for side, lang in (("src", args.src_lang), ("tgt", args.tgt_lang)):
            plain = args.corpus.resolve() / f"{split}.{lang}"
            path = plain if plain.is_file() else plain.with_name(plain.name + ".gz")
            if not path.is_file():
                sys.exit(f"bench: --corpus: neither {plain} nor {path.name} exists")
            sets.append(f"data.local.{split}.{side}={path}")
    return sets


def _train_overrides(s: Settings) -> list[str]:
    """Our training matched to the peers: batch, length limit, log interval; no validation in the budget."""
    return [
        "train.batch_type=sentences",
        f"train.batch_size={s.batch}",
        f"train.max_len={s.max_len}",
        f"train.log_every={s.log_every}",
        f"train.max_steps={s.max_steps}",
        "train.max_minutes=0",
        "train.validate_every=1000000000",
        "train.valid_bleu=false",
        f"train.device={s.device}",
    ]


def _warn(result: dict[str, Any], warning: str | None) -> None:
    """Keep a competition warning for the report and say it at once on stderr."""
    if warning:
        result["warnings"].append(warning)
        print(f"bench: warning: {warning}", file=sys.stderr, flush=True)


def _environment(threads: int) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if threads:
        env |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    return env


def _corpus(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    """Which corpus: its short id (--corpus-name, the folder name, or synthetic), a description, and the
    pairs per split."""
    pairs = {
        split: sum(1 for _ in read_lines(data_dir / f"{split}.src")) for split in ("train", "valid", "test")
    }
    if not args.corpus:
        return {"id": "synthetic", "name": "synthetic (seq2seq_attn)", "pairs": pairs}
    identity = args.corpus_name or args.corpus.resolve().name
    name = f"{args.corpus_name or args.corpus} ({args.src_lang}-{args.tgt_lang})"
    return {"id": identity, "name": name, "pairs": pairs}


def _command(args: argparse.Namespace, argv: list[str]) -> str:
    """The command as run, its folders outside the repository by their placeholders; with --corpus-name,
    the --corpus folder written as that name."""
    named = {"--corpus": args.corpus_name} if args.corpus and args.corpus_name else {}
    return report.shown_command(PROG, argv, PLACEHOLDERS | named)


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    """Paths as strings, relative to the repository when inside it (the report is committed)."""
    return {key: _portable(value) if isinstance(value, Path) else value for key, value in values.items()}


def _portable(path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


def _step(message: str) -> None:
    print(f"bench [{time.strftime('%H:%M:%S')}]: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
