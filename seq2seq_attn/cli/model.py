"""`seq2seq model-info`: the model a config describes, its architecture and parameters, without training;
`seq2seq export`: a trained run as a model folder to share (runs/export.py), pushed to the
Hugging Face hub with `--push` (runs/hub.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..config import load_config
from ..console import info
from ..errors import UserError
from ..io import check_readable, read_json
from .config import CONFIG_ARG, SET, SET_OPTION
from .options import refuse_standard_streams

if TYPE_CHECKING:
    from ..runs.model_folder import Evaluation

SRC_VOCAB = typer.Option(None, "--src-vocab", min=4, help="Source vocabulary size (default: vocab.size).")
TGT_VOCAB = typer.Option(None, "--tgt-vocab", min=4, help="Target vocabulary size (default: vocab.size).")


def register(app: typer.Typer) -> None:
    app.command("model-info")(model_info)
    app.command("export")(export_command)


def model_info(
    config: Path = CONFIG_ARG,
    overrides: list[str] = SET_OPTION,
    src_vocab: int | None = SRC_VOCAB,
    tgt_vocab: int | None = TGT_VOCAB,
) -> None:
    """Print CONFIG's model: a summary line, the module tree and the parameter count of each module.

    The model is built on torch's `meta` device, so even the paper's 30k-vocabulary models take no memory.
    """
    import torch  # here, not at module level: keeps `seq2seq --help` fast

    from ..model import build_model
    from ..model.summary import describe

    cfg = load_config(config, overrides, SET)
    src_size = src_vocab or cfg.vocab.size
    tgt_size = tgt_vocab or cfg.vocab.size
    with torch.device("meta"):
        model = build_model(cfg.model, src_size, tgt_size)
    typer.echo(describe(model, cfg.model, src_size, tgt_size))


def export_command(
    run: Path = typer.Argument(
        ...,
        help="A run directory (its best checkpoint) or a checkpoint file in a run's checkpoints/ folder.",
        show_default=False,
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="The model folder to write (whole or not at all).", show_default=False
    ),
    average: int = typer.Option(
        0, "--average", min=0, help="Export the mean of the run's last K step-N.pt checkpoints."
    ),
    report: Path | None = typer.Option(
        None,
        "--report",
        help="A report of `seq2seq eval --output X.json`: its tables go into the model card, the file "
        "into the folder.",
    ),
    plot: Path | None = typer.Option(
        None, "--plot", help="With --report: its figure (`eval --plot`; .png, .svg or .jpg), in the card."
    ),
    push: str | None = typer.Option(
        None,
        "--push",
        metavar="OWNER/NAME",
        help="Then upload the folder to this model repository on the Hugging Face hub (made if missing).",
    ),
    force: bool = typer.Option(False, "--force", help="Replace the folder when it holds an earlier export."),
) -> None:
    """Write a trained run as a model folder in the Hugging Face layout: the weights as safetensors (no
    pickle), config.json, the sentencepiece models, the lexical shortlist when the run has one, and a
    model card (README.md). `seq2seq translate --model`, `eval`, `score` and `s2s.load` take the folder,
    or hf://OWNER/NAME once it is pushed."""
    from ..runs.export import export_run
    from ..runs.hub import HUB_PREFIX, check_repo_id, push_folder

    if plot is not None and report is None:
        raise UserError("--plot is the figure of a report: give --report too")
    refuse_standard_streams("export", [("--output", output)])
    if push is not None:
        check_repo_id(push, "--push")
    evaluation = read_evaluation(report, plot) if report is not None else None
    folder = export_run(run, output, average=average, evaluation=evaluation, repo_id=push, force=force)
    info(f"export: wrote {folder}")
    if push is not None:
        push_folder(folder, push, f"seq2seq export of {run}")
        info(f"export: pushed {folder} to {HUB_PREFIX}{push}")


def read_evaluation(report: Path, plot: Path | None) -> Evaluation:
    """The eval report (and figure) for the model card: checked, its tables rendered in markdown."""
    from ..evaluation.metrics.report import render
    from ..evaluation.metrics.saved_reports import check_report
    from ..runs.model_folder import FIGURE_SUFFIXES, Evaluation

    found = check_report(read_json(report), str(report))
    if plot is not None:
        if plot.suffix.lower() not in FIGURE_SUFFIXES:
            raise UserError(f"{plot}: a model card shows {', '.join(FIGURE_SUFFIXES)} images")
        check_readable(plot)  # a missing figure fails here, before the export
    labels = [system["label"] for system in found["systems"]]
    return Evaluation(report, render(found, "markdown"), labels, plot)
