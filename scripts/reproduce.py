"""Train several systems on one corpus with the same budget and draw BLEU against sentence length.

This is what `make demo`, `make reproduce-local`, `make reproduce-multi30k` and `make reproduce-wmt14` run.
For each config: prepare the data and vocabulary (once per data folder), train (all systems at the same
time when `--parallel`, splitting the CPU threads or GPUs between them), then translate each test set once
with each run's beam settings and score all systems together with `seq2seq eval --by-length` (configs
that Moses-tokenise, `data.tokenize: moses` as the paper configs, also get the paper's tokenised BLEU,
`--moses-bleu`, beside sacrebleu's). The test set is the prepared one; a Multi30k corpus
(`data.source: multi30k`) has two, its official test_2016_flickr and test_2017_flickr, each scored with
the task's BLEU against its processed references (`--task-ref`) too. Writes to --out (for Multi30k, one
folder per test set, `--out/<test set>/`, holding the files of the first five lines):

    by_length.json / by_length.md   the table (BLEU, chrF, BP, 95% CI per bucket and system) and the
                                     paired differences between systems per bucket, with p-values
    curve.png                        BLEU by source length, one line per system (Bahdanau et al., Fig. 2)
    report.html                      all of it on one self-contained page, with example sentences and
                                     attention heat maps
    attention/                       heat maps of a few test sentences for the first attention system
    summary.md                       the tables, wall times and the paper's criteria (--criteria)

Usage: python scripts/reproduce.py --out runs/demo configs/demo_rnnsearch.yaml configs/demo_rnnencdec.yaml
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from seq2seq_attn.config import Config, load_config, to_dict
from seq2seq_attn.data import multi30k
from seq2seq_attn.errors import UserError
from seq2seq_attn.evaluation.metrics.report import bucket_rows, render
from seq2seq_attn.evaluation.models.heatmap import pick_by_length
from seq2seq_attn.io import read_lines, write_text
from seq2seq_attn.runs.checkpoint import load_checkpoint
from seq2seq_attn.runs.run_folder import resolve_checkpoint
from seq2seq_attn.training.log import METRICS_FILE, read_metrics

SEQ2SEQ = [sys.executable, "-m", "seq2seq_attn"]


def main() -> None:
    """`_main`, its errors one line each: a bad option, config or folder (exit 2), a step that failed
    (the step has said why; exit with its code). A SIGTERM stops the training processes it started."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        _main()
    except (UserError, OSError) as err:
        print(f"reproduce: error: {err}", file=sys.stderr)
        sys.exit(2)
    except subprocess.CalledProcessError as err:
        print(
            f"reproduce: error: step failed (exit {err.returncode}): {shlex.join(err.cmd)}", file=sys.stderr
        )
        sys.exit(err.returncode)


def _main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("configs", nargs="+", type=Path, help="one experiment config per system")
    parser.add_argument("--out", type=Path, required=True, help="folder for the table, curve and heat maps")
    parser.add_argument("--label", action="append", default=[], help="system names (default: config names)")
    parser.add_argument(
        "--set", action="append", default=[], dest="overrides", help="override for every config"
    )
    parser.add_argument("--runs", type=Path, help="train into RUNS/<label> instead of each config's run_dir")
    parser.add_argument("--parallel", action="store_true", help="train all systems at the same time")
    parser.add_argument("--heatmaps", type=int, default=4, help="attention heat maps to draw (0: none)")
    parser.add_argument("--criteria", action="store_true", help="check the paper's length criteria (demo)")
    args = parser.parse_args()

    labels = args.label or [load_config(path, args.overrides, "--set").name for path in args.configs]
    if len(labels) != len(args.configs):
        raise UserError(f"{len(labels)} --label for {len(args.configs)} configs")
    if len(set(labels)) < len(labels) or any("/" in label for label in labels):
        raise UserError(
            f"--label: each system needs a name of its own, without '/' (got {', '.join(labels)})"
        )
    # per-system overrides: everything from --set, plus the run folder when --runs is given
    system_sets = [
        args.overrides + ([f"train.run_dir={(args.runs / label).resolve()}"] if args.runs else [])
        for label in labels
    ]
    configs = [load_config(path, sets, "--set") for path, sets in zip(args.configs, system_sets, strict=True)]
    if args.criteria:  # checked before any training
        search, encdec = attention_and_fixed(configs, labels)
    args.out.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}

    start = time.monotonic()
    one_per_data_dir: dict[Path, Path] = {}
    for config, path in zip(configs, args.configs, strict=True):
        one_per_data_dir.setdefault(config.data_dir.resolve(), path)
    for path in one_per_data_dir.values():  # the data section does not depend on --runs
        _run([*SEQ2SEQ, "data", "prepare", str(path), *_sets(args.overrides)])
        _run([*SEQ2SEQ, "vocab", str(path), *_sets(args.overrides)])
    times["data + vocabulary"] = time.monotonic() - start

    start = time.monotonic()
    _train_all(args.configs, system_sets, args.parallel)
    times["training"] = time.monotonic() - start

    for config in configs:
        check_settings_reach_evaluation(config)
    start = time.monotonic()
    tests = test_sets(configs[0])
    reports = [
        (name, _evaluate(configs, labels, src, ref, task_ref, args.out / name))
        for name, src, ref, task_ref in tests
    ]
    times["translate + evaluate"] = time.monotonic() - start
    report, test_src = reports[0][1], tests[0][1]  # the criteria and heat maps read the first test set

    attention = next((c for c in configs if c.model.attends), None)
    if args.heatmaps and attention is not None:
        _heatmaps(attention, test_src, args.out / "attention", args.heatmaps)

    verdicts, findings = [], []
    if args.criteria:
        runs = {label: config.run_dir for config, label in zip(configs, labels, strict=True)}
        verdicts = check_criteria(report, search, encdec, runs)
        findings = [significance_finding(report, search, encdec)]
    write_text(args.out / "summary.md", _summary(reports, times, verdicts, findings, args))
    print((args.out / "summary.md").read_text(encoding="utf-8"))
    if verdicts and not all(ok for ok, _ in verdicts):
        sys.exit(1)


TestSet = tuple[str, Path, Path, Path | None]  # name ("" for the prepared one), sources, references, task's


def test_sets(config: Config) -> list[TestSet]:
    """The test sets each system translates once: Multi30k's official two with the task's processed
    references, else the prepared test split."""
    data = config.data
    if data.source == "multi30k":
        found = multi30k.test_sets(data.multi30k, data.src_lang, data.tgt_lang)
        return [(test.name, test.src, test.ref, test.task_ref) for test in found]
    return [("", config.data_dir / "test.src", config.data_dir / "test.tgt", None)]


def check_settings_reach_evaluation(config: Config) -> None:
    """Evaluation reads a run's search and scoring settings from its checkpoint (`eval --model`), which a
    re-run that trains no further does not write again: a `--set decode.*` or `eval.*` given then would be
    ignored while the run's config.yaml says it. Refused, naming the first such key."""
    saved = load_checkpoint(resolve_checkpoint(config.run_dir))["config"]
    wanted = to_dict(config)
    for section in ("decode", "eval"):
        for key, value in wanted[section].items():
            if saved[section].get(key) != value:
                raise UserError(
                    f"{config.run_dir}: its checkpoint has {section}.{key} = "
                    f"{saved[section].get(key)!r}, not {value!r}; evaluation reads the checkpoint's: run "
                    f"`seq2seq eval --model` with the setting, or train a new run (--runs ELSEWHERE)"
                )


def _evaluate(
    configs: list[Config], labels: list[str], src: Path, ref: Path, task_ref: Path | None, out: Path
) -> dict:
    """`seq2seq eval --by-length` of every system on one test set into `out`; returns the report."""
    out.mkdir(parents=True, exist_ok=True)
    report_path = out / "by_length.json"
    command = [*SEQ2SEQ, "eval", "--src", str(src), "--ref", str(ref), "--by-length"]
    command += [
        "--output",
        str(report_path),
        "--plot",
        str(out / "curve.png"),
        "--html",
        str(out / "report.html"),
    ]
    for config, label in zip(configs, labels, strict=True):
        command += ["--model", str(config.run_dir), "--label", label]
    if configs[0].data.tokenize == "moses":  # the paper's tokenised BLEU, beside sacrebleu's
        command += ["--moses-bleu", configs[0].data.tgt_lang]
    if task_ref is not None:  # the task's BLEU, beside sacrebleu's
        command += ["--task-ref", str(task_ref), "--task-lang", configs[0].data.tgt_lang]
    _run(command)
    report = json.loads(report_path.read_text(encoding="utf-8"))
    write_text(out / "by_length.md", render(report, "markdown"))
    return report


def _sets(overrides: list[str]) -> list[str]:
    return [part for item in overrides for part in ("--set", item)]


def _run(command: list[str], env: dict[str, str] | None = None) -> None:
    print("+", " ".join(command), file=sys.stderr, flush=True)
    subprocess.run(command, check=True, env=env)


def _train_all(paths: list[Path], system_sets: list[list[str]], parallel: bool) -> None:
    """Train every config; in parallel each process gets its share of the CPU threads (or one GPU each)."""
    commands = [
        [*SEQ2SEQ, "train", str(path), *_sets(sets)] for path, sets in zip(paths, system_sets, strict=True)
    ]
    if not parallel:
        for command in commands:
            _run(command)
        return
    threads = max(1, len(os.sched_getaffinity(0)) // len(commands))  # the cores this process may use
    gpus = _gpus()
    processes = []
    for index, command in enumerate(commands):
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        if len(gpus) >= len(commands):
            env["CUDA_VISIBLE_DEVICES"] = gpus[index]
        print("+", " ".join(command), file=sys.stderr, flush=True)
        processes.append(subprocess.Popen(command, env=env))
    try:
        while None in (codes := [p.poll() for p in processes]) and not any(codes):
            time.sleep(1)
        if failed := next((p for p in processes if p.returncode), None):  # the others stop below
            raise subprocess.CalledProcessError(failed.returncode, failed.args)
    finally:  # a failure, Ctrl-C or SIGTERM: the others save their checkpoint and stop (they resume)
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            process.wait()


def _gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them: those it already names (a
    caller's choice, kept), else every device."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [device.strip() for device in visible.split(",") if device.strip()]
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


def _heatmaps(config: Config, test_src: Path, folder: Path, count: int) -> None:
    """Heat maps of `count` test sentences of about 8 to 40 words (longer ones make unreadable pictures)."""
    lines = list(read_lines(test_src))
    chosen = folder / "sources.txt"
    folder.mkdir(parents=True, exist_ok=True)
    write_text(chosen, "".join(lines[i] + "\n" for i in pick_by_length(lines, count)))
    _run(
        [
            *SEQ2SEQ,
            "translate",
            "--model",
            str(config.run_dir),
            "-i",
            str(chosen),
            "-o",
            str(folder / "translations.txt"),
            "--attention",
            str(folder),
        ]
    )


def _bleu_by_bucket(report: dict, label: str) -> dict[str, float]:
    """BLEU per length bucket (all sentences; empty buckets left out) of system `label`."""
    system = next(s for s in report["systems"] if s["label"] == label)
    return {
        bucket: row["bleu"] for bucket, row in bucket_rows(system).items() if bucket != "all" and row["count"]
    }


def attention_and_fixed(configs: list[Config], labels: list[str]) -> tuple[str, str]:
    """The labels of the first attention system (RNNsearch) and the first fixed-vector one (RNNencdec)."""
    search = next((lab for c, lab in zip(configs, labels, strict=True) if c.model.attends), None)
    encdec = next((lab for c, lab in zip(configs, labels, strict=True) if not c.model.attends), None)
    if search is None or encdec is None:
        raise UserError("--criteria compares a system with attention and one without (model.attention none)")
    return search, encdec


ENCDEC_MOST = 0.6  # RNNencdec's longest bucket at most this share of its best bucket: it collapses
SEARCH_LEAST = 0.85  # RNNsearch's longest bucket at least this share of its best: it holds up
PPL_RISE = 1.05  # a later dev perplexity this much above the best one is called a rise


def check_criteria(
    report: dict, search: str, encdec: str, runs: dict[str, Path] | None = None
) -> list[tuple[bool, str]]:
    """The demo's acceptance test: the fixed vector collapses on long sentences, attention does not.

    - RNNencdec's BLEU in its longest bucket <= ENCDEC_MOST x its best bucket;
    - RNNsearch's BLEU in its longest bucket >= SEARCH_LEAST x its best bucket;
    - RNNsearch above RNNencdec in every bucket past 20 words.

    Each line gives the ratio against its threshold; a failed one adds what the system's training log
    says (`training_note`) when `runs` maps its label to its run folder.
    """
    a, b = _bleu_by_bucket(report, search), _bleu_by_bucket(report, encdec)
    longest = list(a)[-1]

    def share(label: str, bleu: dict[str, float], bound: float, at_most: bool) -> tuple[bool, str]:
        best, ratio = max(bleu.values()), bleu[longest] / max(max(bleu.values()), 1e-9)
        ok = ratio <= bound if at_most else ratio >= bound
        sign = "<=" if at_most else ">="
        text = f"{label}: longest bucket {longest} BLEU {bleu[longest]:.2f} {sign} {bound} x best {best:.2f}"
        return ok, f"{text} (ratio {ratio:.2f})"

    verdicts = [share(encdec, b, ENCDEC_MOST, at_most=True), share(search, a, SEARCH_LEAST, at_most=False)]
    edges = report["edges"]
    past_20 = [bucket["label"] for bucket, low in zip(report["buckets"], edges, strict=True) if low >= 20]
    below = [k for k in past_20 if k in a and k in b and a[k] <= b[k]]
    text = f"{search} above {encdec} in every bucket past 20 words ({', '.join(past_20)})"
    verdicts.append((not below, text + (f"; not in {', '.join(below)}" if below else "")))
    labels = [encdec, search, search]  # whose training a failure of each criterion points at
    return [
        (ok, text if ok or not runs else _with_cause(text, training_note(runs[label])))
        for (ok, text), label in zip(verdicts, labels, strict=True)
    ]


def _with_cause(text: str, note: str) -> str:
    return f"{text}; likely cause: {note}" if note else text


def training_note(run_dir: Path) -> str:
    """What a run's dev curve says about its training: a dev perplexity that rose after its best (the
    training went unstable), or a dev BLEU still climbing at the last validation (too short a training);
    "" when the log shows neither."""
    if not (Path(run_dir) / METRICS_FILE).is_file():
        return ""
    points = [record for record in read_metrics(run_dir) if "valid_ppl" in record]
    if not points:
        return ""
    best = min(points, key=lambda point: point["valid_ppl"])
    later = [point for point in points if point["step"] > best["step"]]
    worst = max(later, key=lambda point: point["valid_ppl"], default=None)
    if worst is not None and worst["valid_ppl"] > PPL_RISE * best["valid_ppl"]:
        return (
            f"dev perplexity rose from {best['valid_ppl']:.2f} (update {best['step']}) to "
            f"{worst['valid_ppl']:.2f} (update {worst['step']}): the training went unstable"
        )
    bleu = [point["valid_bleu"] for point in points if "valid_bleu" in point]
    if len(bleu) >= 2 and bleu[-1] >= max(bleu[:-1]):
        return (
            f"dev BLEU still rising at the last validation ({bleu[-1]:.2f}, update {points[-1]['step']}): "
            "a longer training (train.max_minutes) would likely help"
        )
    return ""


def significance_finding(report: dict, winner: str, loser: str) -> str:
    """In which buckets (all sentences) `winner`'s BLEU is above `loser`'s with p < 0.05 (paired test)."""
    comparison = next(c for c in report["comparisons"] if {c["system"], c["baseline"]} == {winner, loser})
    sign = 1 if comparison["system"] == winner else -1
    rows = [r for r in comparison["rows"] if r["subset"] == "all" and r["bucket"] != "all" and r["count"]]
    wins = [r["bucket"] for r in rows if r["significant"] and sign * r["delta"] > 0]
    others = [r["bucket"] for r in rows if r["bucket"] not in wins]
    alpha, test = report["significance"]["alpha"], report["significance"]["test"]
    finding = f"{winner} beats {loser} significantly ({test}, p < {alpha}) in the buckets "
    finding += ", ".join(wins) or "none"
    return finding + (f"; not significantly in {', '.join(others)}." if others else ": in every bucket.")


def _summary(
    reports: list[tuple[str, dict]],
    times: dict[str, float],
    verdicts: list[tuple[bool, str]],
    findings: list[str],
    args: argparse.Namespace,
) -> str:
    """The summary page: each test set's table (under its name when it has one) and links, the wall
    times, then the criteria and the significance findings of the first test set."""
    lines = [
        "# BLEU by source sentence length",
        "",
        "Command: `python scripts/reproduce.py " + " ".join(sys.argv[1:]) + "`",
    ]
    for name, report in reports:
        folder = f"{name}/" if name else ""
        lines += ["", f"## {name}", ""] if name else [""]
        lines += [render(report, "markdown"), "", f"![BLEU by length]({folder}curve.png)", ""]
        lines += [f"All of it on one page: [{folder}report.html]({folder}report.html)"]
    lines += ["", "| stage | wall time |", "|---|---|"]
    lines += [f"| {stage} | {seconds / 60:.1f} min |" for stage, seconds in times.items()]
    if verdicts:
        lines += ["", "Criteria (Bahdanau et al. 2014, Fig. 2):", ""]
        lines += [f"- {'PASS' if ok else 'FAIL'}: {text}" for ok, text in verdicts]
    if findings:
        lines += ["", "Paired significance per bucket:", ""] + [f"- {text}" for text in findings]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
