"""`seq2seq train CONFIG`, and `seq2seq model-info CONFIG`: the model a config describes, its architecture
and parameters, without training."""

from __future__ import annotations

from pathlib import Path

import typer

from ..config import load_config
from .config import CONFIG_ARG, SET, SET_OPTION, print_resolved

SRC_VOCAB = typer.Option(None, "--src-vocab", min=4, help="Source vocabulary size (default: vocab.size).")
TGT_VOCAB = typer.Option(None, "--tgt-vocab", min=4, help="Target vocabulary size (default: vocab.size).")


def register(app: typer.Typer) -> None:
    app.command("model-info")(model_info)
    app.command("train")(train_command)


def train_command(
    config: Path = CONFIG_ARG,
    overrides: list[str] = SET_OPTION,
    resume: bool = typer.Option(
        False, "--resume", help="Require a checkpoint to resume from (a run with one resumes anyway)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Validate and print the resolved config; no training."
    ),
) -> None:
    """Prepare data and vocabulary if needed, then train into the run directory (runs/<name>).

    Re-running on a run directory that has a checkpoint continues exactly where it stopped; only one
    process at a time trains into a run directory. Under
    `torchrun --nproc_per_node=N -m seq2seq_attn train CONFIG` it trains with DDP.
    """
    resolved = load_config(config, overrides, SET)
    if dry_run:
        print_resolved(resolved)
        return
    from ..training.train import train  # torch import only when training

    train(resolved, resume=resume)


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
