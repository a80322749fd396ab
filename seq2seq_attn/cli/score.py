"""`seq2seq score`: forced decoding of given translations, and n-best rescoring
(evaluation/models/likelihood.py does the work).

torch is imported inside the command, so `seq2seq --help` and every other command start fast.
"""

from __future__ import annotations

import math
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..config import DecodeConfig, choices_enum
from ..errors import UserError
from ..io import atomic_write, check_writable, read_lines, write_json
from .options import MODEL_HELP, Device, device_option, refuse_standard_streams

if TYPE_CHECKING:
    from ..evaluation.models.likelihood import Scorer

Penalty = choices_enum(DecodeConfig, "length_penalty")


class Format(str, Enum):
    tsv = "tsv"
    jsonl = "jsonl"


def register(app: typer.Typer) -> None:
    app.command("score")(score_command)


# Long only by its typer option declarations; the body parses, calls and prints.
def score_command(
    model: list[Path] = typer.Option(
        ...,
        "--model",
        "-m",
        help=f"{MODEL_HELP} Repeat it to rescore with several models.",
        show_default=False,
    ),
    src: Path = typer.Option(..., "--src", help="Source sentences, one per line.", show_default=False),
    tgt: Path | None = typer.Option(
        None, "--tgt", help="Target sentences to score, line-aligned with --src."
    ),
    nbest: Path | None = typer.Option(
        None, "--nbest", help="Rescore this `translate --nbest` output instead of --tgt."
    ),
    weights: str | None = typer.Option(
        None, "--weights", help="With --nbest: one weight per --model, comma-separated (default: all 1)."
    ),
    length_penalty: Penalty = typer.Option(
        Penalty.none,
        "--length-penalty",
        help="With --nbest: divide each model's log-probability by lp(pieces), as in search.",
    ),
    alpha: float = typer.Option(
        DecodeConfig().alpha, "--alpha", help="The gnmt length penalty's alpha.", min=0
    ),
    best: bool = typer.Option(False, "--best", help="With --nbest: write each line's best hypothesis only."),
    fmt: Format = typer.Option(Format.tsv, "--format", help="With --tgt: tsv rows or JSON lines."),
    pieces: bool = typer.Option(False, "--pieces", help="With --tgt: add each piece's log-probability."),
    output: str = typer.Option("-", "--output", "-o", help="Output file ('-': stdout), written atomically."),
    report: Path | None = typer.Option(
        None, "--report", help="With --tgt: write the perplexity by source length to this JSON file."
    ),
    device: Device = device_option(),
) -> None:
    """Score translations with a trained model (forced decoding). With --tgt, one row per line: the total
    log-probability, the number of target pieces (EOS included), their mean, whether the source was cut,
    then the corpus perplexity by source-length bucket on stderr. With --nbest, rescore a `translate
    --nbest` list with one or more weighted models and write it re-ranked (or the best with --best)."""
    from ..evaluation.models.likelihood import load_scorer
    from ..model.device import resolve_device

    check_options(model, tgt, nbest, best, pieces, report)
    refuse_standard_streams("score", [("--report", report)])
    factors = parse_weights(weights, len(model))  # a bad option fails before any model loads
    for destination in [report] + ([Path(output)] if output != "-" else []):
        if destination is not None:
            check_writable(destination)
    scorers = [load_scorer(path, resolve_device(device.value, "--device")) for path in model]
    sources = list(read_lines(src))
    if tgt is not None:
        targets = list(read_lines(tgt))
        if len(targets) != len(sources):
            raise UserError(f"{src} has {len(sources)} lines but {tgt} has {len(targets)}: one target each")
        rows, table = score_pairs(scorers[0], sources, targets, fmt.value, pieces, report)
        write_rows(output, rows)
        typer.echo(table, err=True, nl=False)
    else:
        write_rows(output, rescore_rows(scorers, sources, nbest, factors, length_penalty.value, alpha, best))


def check_options(
    model: list[Path], tgt: Path | None, nbest: Path | None, best: bool, pieces: bool, report: Path | None
) -> None:
    """The combinations of options `seq2seq score` refuses, before any work."""
    if (tgt is None) == (nbest is None):
        raise UserError("give either --tgt FILE (score pairs) or --nbest FILE (rescore a list)")
    if tgt is not None and len(model) > 1:
        raise UserError("--tgt scores with one --model; several models rescore an --nbest list")
    if tgt is not None and best:
        raise UserError("--best picks from an n-best list: use it with --nbest")
    if nbest is not None and (pieces or report is not None):
        raise UserError("--pieces and --report describe --tgt scores: leave them out with --nbest")


def parse_weights(text: str | None, models: int) -> list[float]:
    if text is None:
        return [1.0] * models
    try:
        weights = [float(part) for part in text.split(",")]
    except ValueError:
        raise UserError(f"--weights {text!r}: expected comma-separated numbers, e.g. 1,0.5") from None
    if not all(math.isfinite(weight) for weight in weights):
        raise UserError(f"--weights {text!r}: expected finite numbers (nan or inf rank nothing)")
    if len(weights) != models:
        raise UserError(f"--weights {text!r} has {len(weights)} weights for {models} --model: one each")
    return weights


def score_pairs(
    scorer: Scorer, sources: list[str], targets: list[str], fmt: str, pieces: bool, report: Path | None
) -> tuple[list[str], str]:
    """The rows of every pair and the perplexity table (also written to `report` when given)."""
    from ..evaluation.models.likelihood import format_score, render_perplexity

    scores = scorer.score(sources, targets)
    found = scorer.perplexity(sources, scores)
    if report is not None:
        write_json(report, found)
    rows = [format_score(index, score, fmt, pieces) for index, score in enumerate(scores)]
    return rows, render_perplexity(found)


def rescore_rows(
    scorers: list[Scorer],
    sources: list[str],
    nbest: Path,
    weights: list[float],
    penalty: str,
    alpha: float,
    best: bool,
) -> list[str]:
    """The n-best list re-ranked by the weighted models (`likelihood.rescore`), or each line's best."""
    from ..decoding.translate import nbest_row
    from ..evaluation.models.likelihood import best_texts, read_nbest, rescore

    ranked = rescore(read_nbest(str(nbest), len(sources)), sources, scorers, weights, penalty, alpha)
    if best:
        return best_texts(ranked)
    return [nbest_row(entry.index, entry.rank, entry.score, entry.text) for entry in ranked]


def write_rows(output: str, rows: list[str]) -> None:
    text = "".join(row + "\n" for row in rows)
    if output == "-":  # UTF-8 whatever the locale says, as translate writes
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
        return
    with atomic_write(output) as out:
        out.write(text)
