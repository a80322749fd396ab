"""`seq2seq align`: how well a run's attention aligns words, as AER against gold alignments
(evaluation/models/align.py).

torch and matplotlib are imported inside the command, so `seq2seq --help` stays fast.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import typer

from ..config import EvalConfig, override
from ..console import info
from ..errors import UserError
from ..evaluation.metrics.buckets import check_edges
from ..io import check_writable, write_json, write_text
from .options import EVAL_FLAGS, Device, config_options, device_option, model_option


class GoldFormat(str, Enum):
    pharaoh = "pharaoh"
    naacl = "naacl"


class Method(str, Enum):
    argmax = "argmax"
    threshold = "threshold"


def register(app: typer.Typer) -> None:
    app.command("align")(align_command)


def parse_sentences(text: str) -> list[int]:
    """'1,5,9' -> [1, 5, 9] (checked against the corpus size later)."""
    try:
        return [int(part) for part in text.split(",")] if text else []
    except ValueError:
        raise UserError(f"--sentences {text!r}: expected comma-separated line numbers, e.g. 1,5,9") from None


# Long only by its typer option declarations; the body parses, calls and prints.
@config_options(EvalConfig, "eval", EVAL_FLAGS, panel="", keys=("buckets", "align_threshold"), from_runs=True)
def align_command(
    model: Path = model_option(),
    src: Path = typer.Option(..., "--src", help="Sources, one sentence per line.", show_default=False),
    ref: Path = typer.Option(
        ...,
        "--ref",
        help="References, line-aligned with --src: forced through the model.",
        show_default=False,
    ),
    gold: Path = typer.Option(
        ..., "--gold", help="Gold word alignments of each --src/--ref pair.", show_default=False
    ),
    gold_format: GoldFormat = typer.Option(
        GoldFormat.pharaoh,
        "--gold-format",
        help="pharaoh: one line per pair, i-j sure, i?j or ipj possible; naacl: one link per line, "
        "`sentence source target`, then S (sure, the default) or P and a confidence, counted from 1.",
    ),
    one_indexed: bool = typer.Option(
        False, "--one-indexed", help="Pharaoh word numbers count from 1 (default: from 0)."
    ),
    method: Method = typer.Option(
        Method.argmax,
        "--method",
        help="argmax: each target word links to its most attended source word; threshold: every pair "
        "with word-level attention >= --threshold.",
    ),
    by_length: bool = typer.Option(False, "--by-length", help="Also score each source-length bucket."),
    heatmaps: Path | None = typer.Option(
        None, "--heatmaps", help="Folder for an SVG heat map with the gold links per --sentences line."
    ),
    sentences: str = typer.Option(
        "", "--sentences", help="Line numbers (from 1) to draw, e.g. 1,5,9; also kept in --json."
    ),
    json_out: Path | None = typer.Option(
        None, "--json", help="Write the scores (and figures) as JSON to this file."
    ),
    device: Device = device_option(),
    overrides: dict[str, Any] | None = None,
) -> None:
    """Force each reference through a trained model, turn its attention into word links and score them
    against gold alignments: AER, precision and recall (Och & Ney 2003), beside a diagonal baseline."""
    from ..decoding.loader import load_one
    from ..evaluation.models.align import (
        alignment_section,
        attention_scores,
        diagonal_links,
        load_corpus,
        render_text,
        score_links,
    )
    from ..model.device import resolve_device

    numbers = parse_sentences(sentences)
    if heatmaps is not None and not numbers:
        raise UserError("--heatmaps draws the lines given by --sentences: add e.g. --sentences 1,5,9")
    if json_out is not None:
        check_writable(json_out)
    corpus = load_corpus(str(src), str(ref), str(gold), gold_format.value, one_indexed)
    torch_device = resolve_device(device.value, "--device")
    trained = load_one(model, torch_device)
    if not trained.config.model.attends:
        raise UserError(f"{model}: an RNNencdec (model.attention none) has no attention to align words with")
    settings = override(trained.config.eval, overrides or {}, "eval.")  # left out: the run's eval section
    edges = check_edges(settings.buckets) if by_length else None
    scores = attention_scores(trained.model, trained.vocab, corpus, torch_device)
    section = alignment_section(
        corpus, scores, method=method.value, threshold=settings.align_threshold, edges=edges, figures=numbers
    )
    diagonal_by_length = score_links(diagonal_links(corpus), corpus, edges)[1]
    typer.echo(render_text(section, diagonal_by_length), nl=False)
    if json_out is not None:
        write_json(json_out, section)
        info(f"wrote {json_out}")
    if heatmaps is not None:
        heatmaps.mkdir(parents=True, exist_ok=True)
        for number, figure in zip(numbers, section["figures"], strict=True):
            write_text(heatmaps / f"{number:06d}.svg", figure["svg"])
        info(f"wrote {len(numbers)} heat maps to {heatmaps}")
