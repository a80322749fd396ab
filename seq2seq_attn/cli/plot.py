"""`seq2seq plot`: figures redrawn from saved results. Other figures join the group with
`@plot_app.command("name")`."""

from __future__ import annotations

from pathlib import Path

import typer

from ..console import info
from ..evaluation.metrics.saved_reports import merge_reports
from ..io import read_json

plot_app = typer.Typer(help="Draw figures from saved results.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(plot_app, name="plot")


@plot_app.command("curve")
def plot_curve(
    reports: list[Path] = typer.Argument(
        ..., help="JSON reports saved by `seq2seq eval --by-length --output X.json`.", show_default=False
    ),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Image file (.png, .pdf, .svg); default curve.png beside the first report.",
    ),
) -> None:
    """Redraw BLEU by sentence length from saved reports; several reports share one figure (same buckets)."""
    merged = merge_reports([(str(path), read_json(path)) for path in reports])
    from ..evaluation.metrics.plots import save_curve  # matplotlib is slow to import: only when drawing

    output = output or reports[0].parent / "curve.png"
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
    from ..evaluation.metrics.plots import save_figure, training_figure
    from ..training.log import read_metrics

    output = output or run_dir / "training.png"
    save_figure(training_figure(read_metrics(run_dir), title=run_dir.name), output)
    info(f"wrote {output}")
