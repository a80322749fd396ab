"""`seq2seq eval`: sacrebleu BLEU/chrF of one or more systems, by sentence length
(evaluation/metrics/by_length.py scores, evaluation/models/systems.py brings trained runs in and writes
the outputs)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import typer

from ..config import EvalConfig, override
from ..config.loader import apply_override
from ..errors import UserError, setting
from ..evaluation.metrics.inputs import load_systems
from ..evaluation.models.systems import (
    Request,
    default_run_label,
    evaluate_runs,
    hypotheses_path,
    read_alignment,
    write_html,
    write_report,
)
from ..io import check_writable
from .config import SET
from .options import EVAL_FLAGS, config_options, refuse_standard_streams

# the `eval` keys `seq2seq eval` sets: every one but `align`'s
EVAL_KEYS = [field.name for field in dataclasses.fields(EvalConfig) if field.name != "align_threshold"]


class Format(str, Enum):
    text = "text"
    json = "json"
    csv = "csv"
    markdown = "markdown"


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)


@config_options(
    EvalConfig, "eval", EVAL_FLAGS, panel="", keys=EVAL_KEYS, from_runs=True, set_section="decode"
)
def eval_command(
    hyp: list[Path] = typer.Option(
        [], "--hyp", help="System output, one detokenised sentence per line; repeat for several systems."
    ),
    ref: Path = typer.Option(
        ..., "--ref", help="References, line-aligned with every --hyp.", show_default=False
    ),
    src: Path | None = typer.Option(
        None, "--src", help="Sources, line-aligned; needed by --by-length unless --bucket-by reference."
    ),
    model: list[Path] = typer.Option(
        [],
        "--model",
        help="A trained run (or checkpoint, exported model folder, hf://OWNER/NAME): translate --src with "
        "its decode settings, then score it; the hypotheses are kept next to the report (or in the run "
        "directory; for hf://, the working directory). Repeatable.",
    ),
    ensemble: list[str] = typer.Option(
        [],
        "--ensemble",
        metavar="RUN,RUN,...",
        help="Trained runs (or checkpoints) that translate --src together as one system, as `translate "
        "--model A --model B` does; scored like a --model. Repeatable, one system each.",
    ),
    label: list[str] = typer.Option(
        [],
        "--label",
        help="Name of each --hyp, then of each --model, then of each --ensemble, in order (default: file "
        "name without its extension / run name / run names joined by +).",
    ),
    by_length: bool = typer.Option(False, "--by-length", help="Also score each sentence-length bucket."),
    fmt: Format | None = typer.Option(
        None,
        "--format",
        help="Report format (default: from the --output extension .json, .csv or .md, else text).",
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the report to this file; the text table still goes to stdout."
    ),
    plot: Path | None = typer.Option(
        None, "--plot", help="Draw BLEU by length (needs --by-length) to this .png/.pdf/.svg file."
    ),
    html: Path | None = typer.Option(
        None,
        "--html",
        help="Also write a self-contained HTML report (works offline): the curve, the tables, the "
        "sentences where the systems differ most and, for --model runs, attention heat maps.",
    ),
    alignment: Path | None = typer.Option(
        None,
        "--alignment",
        help="With --html: add the attention alignment quality (AER) that `seq2seq align --json` wrote.",
    ),
    decode_sets: list[str] = typer.Option(
        [],
        SET,
        metavar="decode.KEY=VALUE",
        help="Change a decode key of the --model runs' search, typed like YAML, e.g. --set "
        "decode.beam_size=12 (repeatable).",
    ),
    overrides: dict[str, Any] | None = None,
) -> None:
    """Score system outputs against references with sacrebleu: BLEU, chrF and, with --by-length, both per
    source-length bucket with a bootstrap confidence interval (Bahdanau et al. 2014, Fig. 2). A --model
    run with a word vocabulary (a shortlist) adds the sentences free of unknown words as their own rows
    ("no UNK", Bahdanau et al. 2014, Table 1). Options left out take the `eval` section of the --model
    runs' configs."""
    given = dict(overrides or {})
    runs = [[path] for path in model] + [ensemble_runs(runs) for runs in ensemble]
    read = [*(("--hyp", path) for path in hyp), ("--ref", ref), ("--src", src)]
    written = [("--output", output), ("--plot", plot), ("--html", html)]
    refuse_standard_streams("eval", [*read, *written, ("--alignment", alignment)])
    check_options(hyp, runs, src, label, by_length, plot, alignment, html)
    check_settings(given, bool(runs), by_length and src is None)
    aer = read_alignment(alignment) if alignment is not None else None
    for _, destination in written:  # fail before any work, not after the report is written
        if destination is not None:
            check_writable(destination)
    if plot is not None:
        from ..evaluation.metrics.plots import image_format  # matplotlib is slow to import: only when drawing

        image_format(plot)
    override(EvalConfig(), given, "eval.")  # a bad option fails before any translation
    labels = list(label[len(hyp) :] or map(default_run_label, runs))
    keep_in = output.parent if output is not None else None
    kept = kept_translations(runs, labels, src, keep_in)
    refuse_overwriting([*written, *kept], [*read, ("--task-ref", given["task_ref"])])
    request = Request(
        ref,
        src,
        systems=load_systems(hyp, label[: len(hyp)]),
        runs=list(zip(runs, labels, strict=True)),
        by_length=by_length,
        decode=decode_changes(decode_sets),
        keep_in=keep_in,
    )
    evaluation = evaluate_runs(request, given)
    typer.echo(write_report(evaluation.report, fmt.value if fmt else None, output, plot), nl=False)
    if html is not None:
        write_html(html, evaluation, aer)


def decode_changes(items: list[str]) -> dict[str, object]:
    """`--set decode.KEY=VALUE` items as {KEY: value}; a key of another section is an error."""
    raw: dict = {}
    for item in items:
        apply_override(raw, item, SET)
    others = sorted(raw.keys() - {"decode"})
    if others:
        raise UserError(f"{SET}: eval changes decode keys only (decode.KEY=VALUE), not {others[0]}.*")
    return raw.get("decode", {})


def ensemble_runs(value: str) -> list[Path]:
    """The runs of one `--ensemble A,B,...` (two or more)."""
    runs = [item.strip() for item in value.split(",")]
    if len(runs) < 2 or not all(runs):
        raise UserError(f"--ensemble {value}: give two or more runs separated by commas (one run: --model)")
    return [Path(run) for run in runs]


def kept_translations(
    runs: list[list[Path]], labels: list[str], src: Path | None, keep_in: Path | None
) -> list[tuple[str, Path | None]]:
    """Where each run's translation of `src` is kept (`hypotheses_path`), named by its label."""
    if src is None:
        return []
    return [
        (f"{label}'s translation", hypotheses_path(paths[0], label, src, keep_in))
        for paths, label in zip(runs, labels, strict=True)
    ]


def refuse_overwriting(written: list[tuple[str, Path | None]], read: list[tuple[str, Path | None]]) -> None:
    """No file eval writes (the report, its figures, a run's kept translation) may be one it reads: the
    input would be lost, and the report would describe a file that no longer holds what was scored."""
    inputs = {Path(path).resolve(): option for option, path in read if path is not None}
    for what, path in written:
        if path is not None and (option := inputs.get(Path(path).resolve())):
            raise UserError(
                f"{path}: given as {option} and written as {what}: eval would write over its input"
            )


def check_options(
    hyp: list[Path],
    runs: list[list[Path]],
    src: Path | None,
    label: list[str],
    by_length: bool,
    plot: Path | None,
    alignment: Path | None,
    html: Path | None,
) -> None:
    """The combinations of options `seq2seq eval` refuses, before any work."""
    if not hyp and not runs:
        raise UserError("give at least one --hyp FILE, --model RUN_DIR or --ensemble RUN,RUN")
    if runs and src is None:
        option = "--model" if len(runs[0]) == 1 else "--ensemble"  # (the --model runs come first)
        raise UserError(f"{option} translates the source: give --src FILE")
    if label and len(label) != len(hyp) + len(runs):
        raise UserError(
            f"{len(label)} --label for {len(hyp)} --hyp and {len(runs)} --model / --ensemble: one each, "
            "or none"
        )
    if plot is not None and not by_length:
        raise UserError("--plot draws BLEU by sentence length: add --by-length")
    if alignment is not None and html is None:
        raise UserError("--alignment goes into the HTML report: add --html FILE")


def check_settings(given: Mapping[str, Any], runs: bool, bucketing_without_sources: bool) -> None:
    """The combinations of `eval` keys given that `seq2seq eval` refuses before any work: those the
    trained runs cannot complete, and bucketing by source length without the sources."""
    bucket_by = given["bucket_by"] or EvalConfig().bucket_by
    if bucketing_without_sources and bucket_by == "source":
        raise UserError(
            f"bucketing by source length needs the sources: give --src SRC (or {setting('eval.bucket_by')} "
            "reference)"
        )
    if given["words"] == "moses" and not runs and not given["words_lang"]:
        raise UserError(
            f"{setting('eval.words')} moses counts the words of one language: give "
            f"{setting('eval.words_lang')} LANG"
        )
    task_ref, task_lang = setting("eval.task_ref"), setting("eval.task_lang")
    if given["task_lang"] is not None and given["task_ref"] is None:
        raise UserError(f"{task_lang} is the language of the task's references: give {task_ref} FILE")
    if given["task_ref"] is not None and given["task_lang"] is None and not runs:
        raise UserError(f"{task_ref} with --hyp files only: give the references' language, {task_lang} LANG")
