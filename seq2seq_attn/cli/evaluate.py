"""`seq2seq eval`: sacrebleu BLEU/chrF of one or more systems, by sentence length; `seq2seq plot`: figures.

`plot` is a command group: other figures join it with `@plot_app.command("name")`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..config import EvalConfig, choices_enum, override
from ..console import info
from ..errors import UserError
from ..evaluate import (
    System,
    comparison_pairs,
    differing_examples,
    evaluate,
    load_systems,
    merge_reports,
    parse_edges,
    read_text,
    shortlist_subset,
)
from ..io import check_writable, read_json, write_text
from ..report import render

if TYPE_CHECKING:
    from ..config import Config
    from ..translate import Translator
    from ..vocab import Vocab

DEFAULTS = EvalConfig()


plot_app = typer.Typer(help="Draw figures from saved results.", no_args_is_help=True)


BucketBy = choices_enum(EvalConfig, "bucket_by")
Significance = choices_enum(EvalConfig, "significance")

# The command-line option that overrides each `eval` key, for error messages.
OPTIONS = {
    "buckets": "--buckets",
    "bucket_by": "--bucket-by",
    "bootstrap": "--bootstrap",
    "seed": "--seed",
    "min_bucket_size": "--min-bucket-size",
    "significance": "--significance",
}


def run_default_option(key: str, flag: str, help: str, **kwargs: Any) -> Any:
    """A typer option for `eval` key `key` with no default of its own: when it is left out, the `eval`
    section of the --model run's config applies (the schema's default without a run), as its help says."""
    default = getattr(DEFAULTS, key)
    shown = ",".join(map(str, default)) if isinstance(default, list) else default
    help = f"{help} Default: the --model run's eval.{key}, else {shown}."
    return typer.Option(None, flag, help=help, show_default=False, **kwargs)


class Format(str, Enum):
    text = "text"
    json = "json"
    csv = "csv"
    markdown = "markdown"


SUFFIX_FORMATS = {".json": "json", ".csv": "csv", ".md": "markdown"}


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
    app.add_typer(plot_app, name="plot")


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
        help="A trained run (or checkpoint): translate --src with its decode settings, then score it; the "
        "hypotheses are kept next to the report (or in the run directory). Repeatable.",
    ),
    label: list[str] = typer.Option(
        [],
        "--label",
        help="Name of each --hyp, then of each --model, in order (default: file name / run name).",
    ),
    by_length: bool = typer.Option(False, "--by-length", help="Also score each sentence-length bucket."),
    buckets: str | None = run_default_option(
        "buckets",
        OPTIONS["buckets"],
        "Bucket edges in words. Bucket i is [edge_i, edge_i+1) and the last is open: with 0,10,20 a "
        "9-word sentence is in 0-10, a 10-word one in 10-20, a 25-word one in 20+.",
    ),
    bucket_by: BucketBy | None = run_default_option(
        "bucket_by", OPTIONS["bucket_by"], "Whose length, in whitespace-separated words, picks the bucket."
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
    moses_bleu: str | None = typer.Option(
        None,
        "--moses-bleu",
        metavar="LANG",
        help="Also report BLEU-moses: BLEU of text tokenised by the Moses tokenizer for target language "
        "LANG, with no further tokenisation and no smoothing (the paper's multi-bleu.perl setting).",
    ),
) -> None:
    """Score system outputs against references with sacrebleu: BLEU, chrF and, with --by-length, both per
    source-length bucket with a bootstrap confidence interval (Bahdanau et al. 2014, Fig. 2). A --model
    run with a word vocabulary (a shortlist) adds the sentences free of unknown words as their own rows
    ("no UNK", Bahdanau et al. 2014, Table 1). Options left out take the `eval` section of the --model
    runs' configs."""
    if not hyp and not model:
        raise UserError("give at least one --hyp FILE or --model RUN_DIR")
    if model and src is None:
        raise UserError("--model translates the source: give --src FILE")
    if label and len(label) != len(hyp) + len(model):
        raise UserError(
            f"{len(label)} --label for {len(hyp)} --hyp and {len(model)} --model: one each, or none"
        )
    if plot is not None and not by_length:
        raise UserError("--plot draws BLEU by sentence length: add --by-length")
    aer = read_alignment(alignment, html) if alignment is not None else None
    for destination in (output, plot, html):  # fail before any work, not after the report is written
        if destination is not None:
            check_writable(destination)
    if plot is not None:
        from ..plots import image_format  # matplotlib is slow to import: only when drawing

        image_format(plot)
    given = {
        "buckets": parse_edges(buckets) if buckets is not None else None,
        "bucket_by": bucket_by.value if bucket_by else None,
        "bootstrap": bootstrap,
        "seed": seed,
        "min_bucket_size": min_bucket_size,
        "significance": significance.value if significance else None,
    }
    override(DEFAULTS, given, "eval.", OPTIONS)  # a bad option fails before any translation
    systems = load_systems(hyp, label[: len(hyp)])
    references = read_text(ref)
    sources = read_text(src) if src is not None else None
    labels = label[len(hyp) :] or [default_model_label(path) for path in model]
    comparison_pairs([system.label for system in systems] + labels, baseline)  # a bad --baseline fails early
    translated = []
    for run, name in zip(model, labels, strict=True):
        folder = output.parent if output is not None else (run if run.is_dir() else run.parent.parent)
        translated.append(translate_run(run, name, sources, folder / f"{Path(src).stem}.{name}.hyp"))
    systems += [run.system for run in translated]
    config = override(runs_eval_section([run.config for run in translated], given), given, "eval.", OPTIONS)
    # (label, vocabulary) of the word-vocabulary runs: their shortlists define the "no UNK" sentences
    shortlists = [(run.system.label, run.vocab) for run in translated if run.vocab.model_type == "word"]
    report = evaluate(
        systems,
        references,
        sources,
        by_length=by_length,
        config=config,
        references_path=str(ref),
        sources_path=str(src) if src is not None else "",
        subsets=[shortlist_subset(shortlists, sources, references)] if shortlists else [],
        moses_lang=moses_bleu,
        baseline=baseline,
    )
    write_outputs(report, fmt.value if fmt else None, output, plot)
    if html is not None:
        write_html(html, report, systems, references, sources, translated, aer)


def runs_eval_section(configs: list[Config], given: dict[str, Any]) -> EvalConfig:
    """The `eval` section the --model runs were configured with (the defaults without runs). Runs that
    differ in a key the command line does not set leave no single answer: an error names the key."""
    if not configs:
        return DEFAULTS
    first = configs[0].eval
    for other in configs[1:]:
        for key in OPTIONS:
            if given[key] is None and getattr(other.eval, key) != getattr(first, key):
                raise UserError(
                    f"the --model runs differ in eval.{key} ({getattr(first, key)} vs "
                    f"{getattr(other.eval, key)}): give {OPTIONS[key]}"
                )
    return first


def read_alignment(path: Path, html: Path | None) -> dict[str, Any]:
    """The AER section that `seq2seq align --json` wrote, checked enough to render (align.py)."""
    if html is None:
        raise UserError("--alignment goes into the HTML report: add --html FILE")
    section = read_json(path)
    if not isinstance(section, dict) or not {"method", "overall", "by_length"} <= section.keys():
        raise UserError(f"{path}: not the JSON of `seq2seq align --json` (method, overall, by_length)")
    return section


def default_model_label(run: Path) -> str:
    return run.name if run.is_dir() else f"{run.parent.parent.name}-{run.stem}"


@dataclass(frozen=True)
class TranslatedRun:
    """A --model system with what scored and drew it: the run's translator and config."""

    system: System
    translator: Translator
    config: Config

    @property
    def vocab(self) -> Vocab:
        return self.translator.vocab


def translate_run(run: Path, label: str, sources: list[str], hyp_path: Path) -> TranslatedRun:
    """Translate `sources` with a trained run's own decode settings and keep the hypotheses file."""
    from ..checkpoint import load_trained
    from ..device import resolve_device
    from ..translate import Translator

    device = resolve_device("auto", "--device")
    network, vocab, config = load_trained(run, device)
    translator = Translator(network, vocab, config.decode, device)
    translations = translator.translate(sources)
    hypotheses = [t.texts[0] if t.texts else "" for t in translations]
    write_text(hyp_path, "".join(line + "\n" for line in hypotheses))
    info(f"eval: translated {len(sources)} lines with {run} -> {hyp_path}")
    return TranslatedRun(System(label, hypotheses, str(hyp_path)), translator, config)


HTML_HEATMAPS = 3  # attention heat maps per --model run in the HTML report


def attention_heatmaps(run: TranslatedRun, sources: list[str]) -> list[dict[str, str]]:
    """[{"title", "svg"}] of a few sources spread over lengths, as the run attends while translating them."""
    from ..heatmap import attention_figure, pick_by_length
    from ..plots import svg_text

    lines = pick_by_length(sources, HTML_HEATMAPS)
    run.translator.with_attention = True
    heatmaps = []
    for line, translation in zip(lines, run.translator.translate([sources[i] for i in lines]), strict=True):
        found = run.translator.attention(translation)
        if found is not None:
            title = f"{run.system.label}, line {line + 1} ({len(sources[line].split())} words)"
            heatmaps.append({"title": title, "svg": svg_text(attention_figure(*found))})
    return heatmaps


def write_html(
    path: Path,
    report: dict[str, Any],
    systems: list[System],
    references: list[str],
    sources: list[str] | None,
    translated: list[TranslatedRun],
    alignment: dict[str, Any] | None = None,
) -> None:
    """The self-contained HTML report (see `html_report`); heat maps of the --model runs with attention."""
    from ..html_report import render_html
    from ..plots import curve_figure, svg_text  # matplotlib is slow to import: only when drawing

    curve = svg_text(curve_figure(report)) if report["buckets"] else ""
    heatmaps = [
        heatmap
        for run in translated
        if run.config.model.attention != "none"
        for heatmap in attention_heatmaps(run, sources or [])
    ]
    examples = differing_examples(report, systems, references, sources)
    page = render_html(report, curve_svg=curve, examples=examples, heatmaps=heatmaps, alignment=alignment)
    write_text(path, page)
    info(f"wrote {path}")


def write_outputs(report: dict[str, Any], fmt: str | None, output: Path | None, plot: Path | None) -> None:
    """Print the report (or save it and print the table) and draw the curve if asked."""
    fmt = fmt or (SUFFIX_FORMATS.get(output.suffix.lower(), "text") if output else "text")
    if output is None:
        typer.echo(render(report, fmt), nl=False)
    else:
        write_text(output, render(report, fmt))
        typer.echo(render(report, "text"), nl=False)
        info(f"wrote {output}")
    if plot is not None:
        from ..plots import save_curve  # matplotlib is slow to import: only when drawing

        save_curve(report, plot)
        info(f"wrote {plot}")


@plot_app.command("curve")
def plot_curve(
    reports: list[Path] = typer.Argument(
        ..., help="JSON reports saved by `seq2seq eval --by-length --output X.json`.", show_default=False
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Image file: .png, .pdf or .svg.", show_default=False
    ),
) -> None:
    """Redraw BLEU by sentence length from saved reports; several reports share one figure (same buckets)."""
    merged = merge_reports([(str(path), read_json(path)) for path in reports])
    from ..plots import save_curve  # matplotlib is slow to import: only when drawing

    save_curve(merged, output)
    info(f"wrote {output}")


@plot_app.command("training")
def plot_training(
    run_dir: Path = typer.Argument(..., help="A run directory with metrics.jsonl.", show_default=False),
    output: Path = typer.Option(
        None, "--output", "-o", help="Image file (.png, .pdf, .svg); default RUN_DIR/training.png."
    ),
) -> None:
    """Draw training and dev loss, and dev BLEU, against updates from a run's metrics.jsonl."""
    from ..metrics import read_metrics
    from ..plots import save_figure, training_figure

    output = output or run_dir / "training.png"
    save_figure(training_figure(read_metrics(run_dir), title=run_dir.name), output)
    info(f"wrote {output}")
