"""`seq2seq eval`: sacrebleu BLEU/chrF of one or more systems, by sentence length
(evaluation/metrics/by_length.py scores, evaluation/models/systems.py brings trained runs in and writes
the outputs)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from ..config import EvalConfig, choices_enum, override
from ..config.loader import apply_override
from ..errors import UserError
from ..evaluation.metrics.buckets import parse_edges
from ..evaluation.metrics.by_length import comparison_pairs
from ..evaluation.metrics.inputs import load_systems
from ..evaluation.models.systems import (
    default_run_label,
    evaluate_runs,
    read_alignment,
    write_html,
    write_report,
)
from ..io import check_writable
from .config import SET
from .options import run_default_option

BucketBy = choices_enum(EvalConfig, "bucket_by")
Words = choices_enum(EvalConfig, "words")
Significance = choices_enum(EvalConfig, "significance")

# The command-line option that overrides each `eval` key, for error messages.
OPTIONS = {
    "buckets": "--buckets",
    "bucket_by": "--bucket-by",
    "words": "--words",
    "bootstrap": "--bootstrap",
    "seed": "--seed",
    "min_bucket_size": "--min-bucket-size",
    "significance": "--significance",
}


class Format(str, Enum):
    text = "text"
    json = "json"
    csv = "csv"
    markdown = "markdown"


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)


# Long only by its typer option declarations; the body parses, calls and prints.
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
        "name / run name / run names joined by +).",
    ),
    by_length: bool = typer.Option(False, "--by-length", help="Also score each sentence-length bucket."),
    buckets: str | None = run_default_option(
        "buckets",
        OPTIONS["buckets"],
        "Bucket edges in words. Bucket i is [edge_i, edge_i+1) and the last is open: with 0,10,20 a "
        "9-word sentence is in 0-10, a 10-word one in 10-20, a 25-word one in 20+.",
    ),
    bucket_by: BucketBy | None = run_default_option(
        "bucket_by", OPTIONS["bucket_by"], "Whose length picks the bucket: the source's or the reference's."
    ),
    words: Words | None = run_default_option(
        "words",
        OPTIONS["words"],
        "How lengths count words: white-space separated, or Moses-tokenised (the paper's unit).",
    ),
    words_lang: str | None = typer.Option(
        None,
        "--words-lang",
        metavar="LANG",
        help="With --words moses: the language of the bucketed side (default: the --model runs' own).",
    ),
    bootstrap: int | None = run_default_option(
        "bootstrap", OPTIONS["bootstrap"], "Bootstrap resamples for the 95% BLEU interval (0: none).", min=0
    ),
    seed: int | None = run_default_option("seed", OPTIONS["seed"], "Seed of the bootstrap.", min=0),
    min_bucket_size: int | None = run_default_option(
        "min_bucket_size", OPTIONS["min_bucket_size"], "Flag buckets with fewer sentences.", min=0
    ),
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
    baseline: str | None = typer.Option(
        None,
        "--baseline",
        metavar="LABEL",
        help="Compare every other system with this one (default: every pair of systems).",
    ),
    significance: Significance | None = run_default_option(
        "significance",
        OPTIONS["significance"],
        "Paired test of BLEU differences per bucket, as sacrebleu's: bootstrap resampling (paired-bs) "
        "or approximate randomization (paired-ar), with --bootstrap resamples or trials.",
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
    moses_bleu: str | None = typer.Option(
        None,
        "--moses-bleu",
        metavar="LANG",
        help="Also report BLEU-moses: BLEU of text tokenised by the Moses tokenizer for target language "
        "LANG, with no further tokenisation and no smoothing (the paper's multi-bleu.perl setting).",
    ),
    task_ref: Path | None = typer.Option(
        None,
        "--task-ref",
        metavar="FILE",
        help="Also report BLEU-task, a shared task's metric: BLEU of the hypotheses lowercased, "
        "punctuation-normalised and Moses-tokenised with escaping, against FILE, the references as the "
        "task processed them (line-aligned with --ref, e.g. Multi30k's *.lc.norm.tok.fr); no smoothing.",
    ),
    task_lang: str | None = typer.Option(
        None,
        "--task-lang",
        metavar="LANG",
        help="With --task-ref: the references' language (default: the --model runs' target language).",
    ),
    lowercase: bool = typer.Option(
        False,
        "--lowercase",
        help="Case-insensitive BLEU and chrF (sacrebleu's -lc; the signatures say case:lc). On by itself "
        "when a --model run writes lowercased text (data.tokenize: task).",
    ),
) -> None:
    """Score system outputs against references with sacrebleu: BLEU, chrF and, with --by-length, both per
    source-length bucket with a bootstrap confidence interval (Bahdanau et al. 2014, Fig. 2). A --model
    run with a word vocabulary (a shortlist) adds the sentences free of unknown words as their own rows
    ("no UNK", Bahdanau et al. 2014, Table 1). Options left out take the `eval` section of the --model
    runs' configs."""
    trained = [[path] for path in model] + [ensemble_runs(runs) for runs in ensemble]
    check_options(hyp, trained, src, label, by_length, bucket_by, (words, words_lang), plot, alignment, html)
    check_task_options(task_ref, task_lang, bool(trained))
    aer = read_alignment(alignment) if alignment is not None else None
    for destination in (output, plot, html):  # fail before any work, not after the report is written
        if destination is not None:
            check_writable(destination)
    if plot is not None:
        from ..evaluation.metrics.plots import image_format  # matplotlib is slow to import: only when drawing

        image_format(plot)
    given = {
        "buckets": parse_edges(buckets, OPTIONS["buckets"]) if buckets is not None else None,
        "bucket_by": bucket_by.value if bucket_by else None,
        "words": words.value if words else None,
        "bootstrap": bootstrap,
        "seed": seed,
        "min_bucket_size": min_bucket_size,
        "significance": significance.value if significance else None,
    }
    override(EvalConfig(), given, "eval.", OPTIONS)  # a bad option fails before any translation
    decode = decode_changes(decode_sets)
    systems = load_systems(hyp, label[: len(hyp)])
    runs = list(zip(trained, label[len(hyp) :] or map(default_run_label, trained), strict=True))
    comparison_pairs(
        [system.label for system in systems] + [name for _, name in runs], baseline, "--baseline"
    )
    evaluation = evaluate_runs(
        systems,
        ref,
        src,
        runs,
        given,
        OPTIONS,
        by_length=by_length,
        baseline=baseline,
        moses_lang=moses_bleu,
        task_ref=task_ref,
        task_lang=task_lang,
        words_lang=words_lang,
        keep_in=output.parent if output is not None else None,
        decode=decode,
        lowercase=lowercase,
    )
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


def check_options(
    hyp: list[Path],
    trained: list[list[Path]],
    src: Path | None,
    label: list[str],
    by_length: bool,
    bucket_by: BucketBy | None,
    words: tuple[Words | None, str | None],
    plot: Path | None,
    alignment: Path | None,
    html: Path | None,
) -> None:
    """The combinations of options `seq2seq eval` refuses, before any work."""
    if not hyp and not trained:
        raise UserError("give at least one --hyp FILE, --model RUN_DIR or --ensemble RUN,RUN")
    if trained and src is None:
        option = "--model" if len(trained[0]) == 1 else "--ensemble"  # (the --model runs come first)
        raise UserError(f"{option} translates the source: give --src FILE")
    if label and len(label) != len(hyp) + len(trained):
        raise UserError(
            f"{len(label)} --label for {len(hyp)} --hyp and {len(trained)} --model / --ensemble: one each, "
            "or none"
        )
    if by_length and src is None and (bucket_by.value if bucket_by else EvalConfig().bucket_by) == "source":
        raise UserError(
            "bucketing by source length needs the sources: give --src SRC (or --bucket-by reference)"
        )
    if words[0] is not None and words[0].value == "moses" and not trained and not words[1]:
        raise UserError("--words moses counts the words of one language: give --words-lang LANG")
    if plot is not None and not by_length:
        raise UserError("--plot draws BLEU by sentence length: add --by-length")
    if alignment is not None and html is None:
        raise UserError("--alignment goes into the HTML report: add --html FILE")


def check_task_options(task_ref: Path | None, task_lang: str | None, trained: bool) -> None:
    """The task's BLEU needs its references, and their language where no trained run says it."""
    if task_lang is not None and task_ref is None:
        raise UserError("--task-lang is the language of the task's references: give --task-ref FILE")
    if task_ref is not None and task_lang is None and not trained:
        raise UserError("--task-ref with --hyp files only: give the references' language, --task-lang LANG")
