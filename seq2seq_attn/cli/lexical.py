"""`seq2seq lexical-shortlist RUN`: learn the run's lexical shortlist (decoding/shortlist_learning.py)
for faster decoding."""

from __future__ import annotations

from pathlib import Path

import typer

from .options import Device, device_option


def register(app: typer.Typer) -> None:
    app.command("lexical-shortlist")(lexical_shortlist_command)


def lexical_shortlist_command(
    run: Path = typer.Argument(
        ...,
        help="A run directory (its best checkpoint) or a checkpoint file: one table per checkpoint, "
        "lexical_shortlist.npz for the best, lexical_shortlist.<name>.npz for another.",
    ),
    top_k: int = typer.Option(50, "--top-k", help="Candidates kept per source piece.", min=1),
    frequent: int = typer.Option(1000, "--frequent", help="Most frequent target pieces, always in.", min=0),
    sentences: int = typer.Option(
        20000, "--sentences", help="Training pairs sampled to learn from (seeded).", min=1
    ),
    device: Device = device_option(),
) -> None:
    """Learn which target pieces each source piece's translation uses, from the run's own attention on its
    training data, into RUN/lexical_shortlist.npz; `translate --lexical-shortlist` (decode.lexical_shortlist)
    then scores only those. Prints the share of the dev set's reference pieces the lists cover."""
    from ..decoding.shortlist_learning import build_for_run
    from ..model.device import resolve_device

    built = build_for_run(run, top_k, frequent, sentences, resolve_device(device.value, "--device"))
    typer.echo(f"lexical shortlist: {built.path} from {built.pairs} training pairs")
    typer.echo(f"dev reference pieces covered: {100 * built.valid_coverage:.2f}%")
