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
from pathlib import Path
from typing import Any

import sacrebleu

from seq2seq_attn.config import DecodeConfig, choices_enum, load_config
from seq2seq_attn.io import read_lines, write_json, write_text

from . import logs, report
from .machine import describe, load_warning, provenance_warnings, span_warning
from .measure import Job, launched, run_job
from .toolkits import PEERS, Levers, Ours, Pieces, Settings, Skip, Toolkit, export_pieces

ROOT = Path(__file__).resolve().parent.parent
SEQ2SEQ = ["-m", "seq2seq_attn"]
ALL = ["ours", *PEERS]
PROG = f"python -m {__spec__.name}"  # how it is run, for --help and the report
RESULTS = ROOT / "benchmarks/results/side_by_side.md"  # the latest run per device and corpus


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
    add("--src-lang", default="en", help="source file suffix in --corpus")
    add("--tgt-lang", default="fr", help="target file suffix in --corpus")
    add("--reps", type=int, default=3, help="repetitions (medians are reported)")
    add("--budget", type=float, default=5.0, help="training wall-clock budget per run, minutes")
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
        "decoding speed compares the searches at equal work whatever the models learnt; not JoeyNMT",
    )
    add("--device", choices=["auto", "cpu", "cuda"], default="auto")
    add("--threads", type=int, default=0, help="OMP/MKL threads of every process (0: torch's default)")
    add(
        "--opennmt-hidden",
        type=int,
        default=Settings.opennmt_hidden,
        help="OpenNMT-py's hidden_size: its decoder's; its brnn encoder gets half per direction (512: ours)",
    )
    add("--toolkits", default=",".join(ALL), help=f"comma-separated subset of {','.join(ALL)}")
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
    add("--doc", type=Path, default=RESULTS, help="markdown report (JSON next to it)")
    add("--no-install", action="store_true", help="never pip-install a peer; skip those not installed")
    add(
        "--precision",
        choices=[c.value for c in choices_enum(DecodeConfig, "precision")],
        default="auto",
        help="our search's decode.precision (auto: fp32 on CPU, bf16 on GPU; int8: CPU only)",
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
    args = parser.parse_args(argv)
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
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench: --device cuda: no CUDA device is available")
    machine = describe(device, args.threads)  # first: the load average before any of our work
    settings = Settings(
        device=device,
        batch=args.batch,
        beam=args.beam,
        max_len=args.max_len,
        output_ratio=args.max_output_ratio,
        alpha=args.alpha,
        log_every=args.log_every,
        max_steps=args.max_steps,
        budget_s=args.budget * 60,
        attention=load_config(args.config, args.overrides, "--set").model.attention,
        opennmt_hidden=args.opennmt_hidden,
        decode_steps=args.decode_steps,
    )
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
        "command": f"{PROG} " + shlex.join(sys.argv[1:] if argv is None else argv),
        "machine": machine,
        "settings": {
            **_jsonable(vars(args)),
            "budget_min": args.budget,
            "device": device,
            "attention": settings.attention,
        },
        "corpus": _corpus(args, data_dir),
        "toolkits": {},
        "ours_extra": [],
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
        result["toolkits"][toolkit.key] = {"label": toolkit.label, "version": toolkit.version(), "runs": []}
    result["toolkits"] = {key: result["toolkits"][key] for key in ALL if key in result["toolkits"]}

    # our no-attention model, trained just over the throughput window
    baseline_sets = [*ours_sets, f"train.max_steps={args.warmup + args.steps}"]
    baseline = Ours(args.baseline, baseline_sets, settings, data_dir)
    refs = list(read_lines(data_dir / "test.tgt"))
    for rep in range(args.reps):
        shift = rep % max(len(toolkits), 1)  # alternate: each repetition starts with the next toolkit
        for toolkit in toolkits[shift:] + toolkits[:shift]:
            _step(f"repetition {rep + 1}/{args.reps}: {toolkit.label}")
            folder = out / f"rep{rep + 1}" / toolkit.key
            record = run_toolkit(toolkit, folder, settings.beam, env, refs)
            result["toolkits"][toolkit.key]["runs"].append({"rep": rep, **record})
            for stage, others in record["others_cores"].items():
                _warn(result, span_warning(f"{toolkit.label} {stage}, repetition {rep + 1}", others))
            if toolkit.key == "ours" and not args.by_length:
                extra = ours_extra(args.config, ours_sets, baseline, folder.parent, env)
                result["ours_extra"].append({"rep": rep, **extra})
            write_json(out / "results.json", result)  # partial results survive an interrupted benchmark

    if args.by_length:
        _step("scoring the beam-search outputs by length")
        result["by_length"] = score_by_length(result, data_dir, args, env)
    for warning in provenance_warnings(machine):
        _warn(result, warning)
    report.summarise(result)
    write_json(out / "results.json", result)
    json_path = report.save(result, args.doc)
    print(report.markdown({device: result}))
    print(f"bench: wrote {args.doc} and {json_path}; logs under {out}", file=sys.stderr)


def run_toolkit(
    toolkit: Toolkit, folder: Path, beam: int, env: dict[str, str], refs: list[str]
) -> dict[str, Any]:
    """Train for the budget, then decode the test set with beam search and greedily; one flat record.

    The throughput per logging interval is kept as `train_points`; the steady rate over the range of
    updates every toolkit reached is taken from them once all have run (report.summarise). The folder is
    emptied first: a run directory left by an earlier benchmark would be resumed. `others_cores`: the
    cores other processes kept busy during each stage (the caller turns them into warnings)."""
    shutil.rmtree(folder, ignore_errors=True)
    trained = run_job(toolkit.train_job(folder), env)
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
    if toolkit.checkpoint(folder) is None:
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
        hyp = folder / f"test.{name}.hyp"
        decoded = run_job(toolkit.decode_job(folder, width, hyp), env)
        record["others_cores"][f"{name} decoding"] = decoded.others_cores
        record["peak_load"] = max(record["peak_load"], decoded.peak_load)
        if decoded.returncode or not hyp.is_file():
            return {
                **record,
                "error": f"{name} decoding failed (exit {decoded.returncode}), see {decoded.log}",
            }
        output = toolkit.output(hyp, decoded, len(refs))
        if len(output.texts) != len(refs):
            return {
                **record,
                "error": f"{name} decoding gave {len(output.texts)} lines for {len(refs)}: {hyp}",
            }
        if not output.seconds:
            return {**record, "error": f"{name} decoding time not found in {decoded.log}"}
        text = folder / f"test.{name}.txt"  # detokenised, whatever the toolkit writes
        write_text(text, "".join(f"{line}\n" for line in output.texts))
        record |= {
            f"{name}_text": str(text),
            f"{name}_seconds": output.seconds,
            f"{name}_sentences_per_s": len(refs) / output.seconds,
            f"{name}_tokens_per_s": output.tokens / output.seconds,
            f"bleu_{name}": sacrebleu.corpus_bleu(output.texts, [refs]).score,
            f"{name}_log": str(decoded.log),
        }
        if name == "beam":
            record |= {"decode_peak_rss_mb": decoded.peak_rss_mb, "decode_cuda_peak_mb": decoded.cuda_peak_mb}
    return record


def ours_extra(
    config: Path, sets: list[str], baseline: Ours, folder: Path, env: dict[str, str]
) -> dict[str, Any]:
    """Ours alone: data preparation + vocabulary + encoding from scratch, and the no-attention throughput."""
    scratch = folder / "prep-timing"
    prepared, vocab = _prepare(config, [*sets, f"data.dir={scratch / 'data'}"], scratch, env, force=True)
    shutil.rmtree(scratch / "data")  # the logs stay
    shutil.rmtree(folder / "ours-noattn", ignore_errors=True)  # never resume an earlier benchmark's run
    trained = run_job(baseline.train_job(folder / "ours-noattn"), env)
    vocab_s, encode_s = logs.vocab_seconds(vocab.text())
    return {
        "prepare_s": prepared.seconds,
        "vocab_s": vocab_s,
        "encode_s": encode_s,
        "prep_total_s": prepared.seconds + vocab.seconds,
        "prep_peak_rss_mb": max(prepared.peak_rss_mb, vocab.peak_rss_mb),
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
    # the test set every toolkit translated: the corpus' own files when plain text (what a reader has)
    corpus = args.corpus.resolve() if args.corpus else data_dir
    ref, src = corpus / f"test.{args.tgt_lang}", corpus / f"test.{args.src_lang}"
    if not (ref.is_file() and src.is_file()):
        corpus, ref, src = data_dir, data_dir / "test.tgt", data_dir / "test.src"
    options = ["--ref", str(ref), "--src", str(src), "--by-length", "--words", "moses"]
    options += ["--words-lang", args.src_lang, "--significance", "paired-bs"]
    options += ["--baseline", "ours"] if len(result["toolkits"]) > 1 else []
    outputs = ["--output", _portable(report_path), "--plot", _portable(plot)]
    argv = [*SEQ2SEQ, "eval", *systems, *options, *outputs]
    log = args.out.resolve() / "logs" / "eval.log"
    scored = run_job(Job(launched(sys.executable, argv), log, cwd=ROOT), env)
    if scored.returncode:
        return {"error": f"seq2seq eval failed (exit {scored.returncode}), see {scored.log}"}
    # the report is committed: the corpus folder by its placeholder, as in the command
    name = "CORPUS" if args.corpus else "DATA"
    write_text(report_path, report_path.read_text(encoding="utf-8").replace(str(corpus), name))
    command = shlex.join(["seq2seq", "eval", *systems, *options, *outputs])
    return {
        "command": command.replace(str(corpus), name),
        "outputs": systems[1::4],
        "plot": _portable(plot),
        "report": json.loads(report_path.read_text(encoding="utf-8")),
    }


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
    """Which corpus: its short id (the folder name, or synthetic), a description, and the pairs per split."""
    identity = args.corpus.resolve().name if args.corpus else "synthetic"
    name = f"{args.corpus} ({args.src_lang}-{args.tgt_lang})" if args.corpus else "synthetic (seq2seq_attn)"
    pairs = {
        split: sum(1 for _ in read_lines(data_dir / f"{split}.src")) for split in ("train", "valid", "test")
    }
    return {"id": identity, "name": name, "pairs": pairs}


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
