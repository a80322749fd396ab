"""Figures: the paper's BLEU-against-sentence-length curve (Bahdanau et al. 2014, Fig. 2), the
diagnostics by length, and a run's training curves.

Figures are built with matplotlib's object API on an Agg canvas (no pyplot global state, no display),
so they draw the same on a headless server; files are written atomically, never half-drawn.
"""

from __future__ import annotations

import io
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ...errors import UserError
from ...io import atomic_write
from .diagnostics import DIAGNOSTICS
from .report import bucket_rows, length_unit

IMAGE_FORMATS = ("png", "pdf", "svg")


def image_format(path: str | Path) -> str:
    """'png', 'pdf' or 'svg' from the file name of an image to write."""
    kind = Path(path).suffix.lower().lstrip(".")
    if kind not in IMAGE_FORMATS:
        raise UserError(f"{path}: cannot tell the image format, use a .png, .pdf or .svg file name")
    return kind


def save_figure(figure: Figure, path: str | Path) -> None:
    """Write `figure` atomically; the format follows the extension (.png, .pdf or .svg)."""
    kind = image_format(path)
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format=kind, dpi=150)


def svg_text(figure: Figure) -> str:
    """The figure as an `<svg>` element to inline in HTML: no XML prolog, no metadata, nothing external
    (text as paths, images as data URIs)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue().decode("utf-8")
    return text[text.index("<svg") :]


def _values(rows: list[dict[str, Any]], key: str) -> np.ndarray:
    """A row field as floats, NaN where null (matplotlib leaves a gap there)."""
    return np.array([np.nan if row[key] is None else row[key] for row in rows], dtype=float)


def _tick_label(bucket: str, rows: list[dict[str, Any]]) -> str:
    """'10-20\\nn=412', with every system's count if the merged reports disagree, '*' if few."""
    counts = list(dict.fromkeys(str(row["count"]) for row in rows))
    return f"{bucket}\nn={'/'.join(counts)}{'*' if any(row['few'] for row in rows) else ''}"


SIGNIFICANCE_MARKERS = ("*", "P", "X", "D", "^", "v")  # one per comparison, cycled


def mark_significant(
    axes: Any, report: dict[str, Any], buckets: list[str], by_label: dict[str, dict]
) -> None:
    """Where a paired difference is significant, a marker halfway between the two systems' points.

    by_label: per system label, {bucket label: its row on all sentences}.
    """
    alpha = report["significance"]["alpha"]
    for k, comparison in enumerate(report["comparisons"]):
        hits = [
            row["bucket"]
            for row in comparison["rows"]
            if row["subset"] == "all" and row["bucket"] in buckets and row["significant"]
        ]
        if not hits:
            continue
        system, baseline = by_label[comparison["system"]], by_label[comparison["baseline"]]
        middle = [(system[b]["bleu"] + baseline[b]["bleu"]) / 2 for b in hits]
        axes.scatter(
            [buckets.index(b) for b in hits],
            middle,
            marker=SIGNIFICANCE_MARKERS[k % len(SIGNIFICANCE_MARKERS)],
            s=90,
            color="black",
            zorder=3,
            label=label_text(f"{comparison['system']} vs {comparison['baseline']}: p < {alpha}"),
        )


def label_text(text: str) -> str:
    """A label as matplotlib should print it (a system's, a piece of a heat map's): `$` would start math
    mode, control characters draw nothing."""
    shown = "".join("\ufffd" if unicodedata.category(c) == "Cc" else c for c in text)
    return shown.replace("$", r"\$")


def curve_figure(report: dict[str, Any]) -> Figure:
    """BLEU per length bucket, one line per system, its 95% bootstrap interval as a band, and a marker
    in each bucket where two systems differ significantly."""
    buckets = [bucket["label"] for bucket in report["buckets"]]
    if not buckets:
        raise UserError("the report has no length buckets: evaluate with `seq2seq eval --by-length`")
    figure = Figure(figsize=(8, 5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    x = np.arange(len(buckets))
    by_bucket = []  # per system: {bucket label: row}
    for system in report["systems"]:
        rows = bucket_rows(system)
        by_bucket.append(rows)
        ordered = [rows[bucket] for bucket in buckets]
        overall = rows["all"]["bleu"]
        (line,) = axes.plot(
            x,
            _values(ordered, "bleu"),
            marker="o",
            label=label_text(f"{system['label']} (all: BLEU {overall:.2f})"),
        )
        if report["bootstrap"]["resamples"]:
            axes.fill_between(
                x,
                _values(ordered, "ci_low"),
                _values(ordered, "ci_high"),
                color=line.get_color(),
                alpha=0.2,
                linewidth=0,
            )
    labels = [system["label"] for system in report["systems"]]
    mark_significant(axes, report, buckets, dict(zip(labels, by_bucket, strict=True)))
    axes.set_xticks(x, [_tick_label(b, [rows[b] for rows in by_bucket]) for b in buckets])
    axes.set_xlabel(f"{report['bucket_by'].capitalize()} sentence length ({length_unit(report)})")
    axes.set_ylabel("BLEU")
    axes.set_ylim(bottom=0)
    band = ", bands: 95% bootstrap CI" if report["bootstrap"]["resamples"] else ""
    axes.set_title(f"BLEU by sentence length{band}")
    axes.grid(alpha=0.3)
    axes.legend()
    if any(rows[b]["few"] for rows in by_bucket for b in buckets):
        axes.annotate(
            f"* fewer than {report['min_bucket_size']} sentences",
            xy=(1, 0),
            xycoords="figure fraction",
            ha="right",
            va="bottom",
            fontsize="small",
        )
    return figure


def save_curve(report: dict[str, Any], path: str | Path) -> None:
    save_figure(curve_figure(report), path)


def diagnostics_figure(report: dict[str, Any]) -> Figure:
    """Each diagnostic (diagnostics.py) per length bucket, one panel each, one line per system; a system
    without attention has lines in the output-side panels only."""
    buckets = [bucket["label"] for bucket in report["buckets"]]
    if not buckets or not report.get("diagnostics"):
        raise UserError("the report has no diagnostics by length: evaluate with `seq2seq eval --by-length`")
    figure = Figure(figsize=(12, 6.5), layout="constrained")
    FigureCanvasAgg(figure)
    panels = figure.subplots(2, (len(DIAGNOSTICS) + 1) // 2).ravel()
    x = np.arange(len(buckets))
    for axes, diagnostic in zip(panels, DIAGNOSTICS, strict=False):
        for k, system in enumerate(report["diagnostics"]):
            rows = {row["bucket"]: row for row in system["rows"]}
            values = _values([rows[bucket] for bucket in buckets], diagnostic.key)
            if not np.isnan(values).all():
                axes.plot(x, values, marker="o", color=f"C{k}")
        axes.set_title(diagnostic.header)
        axes.set_xticks(x, buckets, fontsize="small")
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
    systems = [Line2D([], [], marker="o", color=f"C{k}") for k in range(len(report["diagnostics"]))]
    labels = [label_text(system["label"]) for system in report["diagnostics"]]
    ratio = [diagnostic.key for diagnostic in DIAGNOSTICS].index("length_ratio")  # a panel every system has
    panels[ratio].legend(systems, labels, fontsize="small")
    figure.supxlabel(f"{report['bucket_by'].capitalize()} sentence length ({length_unit(report)})")
    figure.suptitle("Why long sentences fail: diagnostics by length (docs/evaluation.md)")
    return figure


def diagnostics_path(curve: str | Path) -> Path:
    """Where `eval --plot CURVE` draws the diagnostics: beside the curve, `<name>.diagnostics.<ext>`."""
    curve = Path(curve)
    return curve.with_name(f"{curve.stem}.diagnostics{curve.suffix}")


def training_figure(records: list[dict[str, Any]], title: str = "") -> Figure:
    """Training loss and dev loss against updates (left), dev BLEU against updates (right)."""
    train = [r for r in records if "loss" in r]
    valid = [r for r in records if "valid_loss" in r]
    if not train and not valid:
        raise UserError("metrics.jsonl holds no training or validation records yet")
    figure = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(figure)
    loss_axes, bleu_axes = figure.subplots(1, 2)
    loss_axes.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
    loss_axes.plot([r["step"] for r in valid], [r["valid_loss"] for r in valid], marker="o", label="dev loss")
    loss_axes.set_xlabel("update")
    loss_axes.set_ylabel("cross-entropy per target token")
    loss_axes.legend()
    bleu_axes.plot([r["step"] for r in valid], [r["valid_bleu"] for r in valid], marker="o", color="C2")
    bleu_axes.set_xlabel("update")
    bleu_axes.set_ylabel("dev BLEU")
    for axes in (loss_axes, bleu_axes):
        axes.grid(alpha=0.3)
    if title:
        figure.suptitle(title)
    return figure
