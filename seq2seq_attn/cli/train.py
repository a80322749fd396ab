"""`seq2seq train CONFIG`."""

from __future__ import annotations

from pathlib import Path

import typer

from ..config import load_config
from .config import CONFIG_ARG, SET, SET_OPTION, print_resolved


def register(app: typer.Typer) -> None:
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
