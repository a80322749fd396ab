"""Attention heat maps for people: source pieces on x, target pieces on y, as in Bahdanau et al. 2014, Fig. 3.

Long sentences stay readable: each label gets CELL_INCHES until the figure reaches MAX_INCHES; past that
the font shrinks to fit, and once it would fall below MIN_FONT only every k-th label is written.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure

from ...io import write_json
from ..metrics.plots import label_text, save_figure

if TYPE_CHECKING:
    from ...decoding.translate import Translation, Translator

CELL_INCHES = 0.3  # room per label while the figure is small
MAX_INCHES = 30.0  # largest side of a figure
MAX_FONT, MIN_FONT = 10.0, 4.0  # label font sizes in points


def axis_layout(count: int) -> tuple[float, float, int]:
    """(inches, font size, label step) for an axis carrying `count` labels."""
    inches = max(min(CELL_INCHES * count, MAX_INCHES), 2.0)
    points_per_label = inches * 72 / max(count, 1)
    font = min(MAX_FONT, 0.8 * points_per_label)
    step = max(1, math.ceil(MIN_FONT / font))
    return inches, max(font, MIN_FONT), step


def attention_figure(weights: np.ndarray, src_labels: list[str], tgt_labels: list[str]) -> Figure:
    """The heat map of `weights` (len(tgt_labels), len(src_labels)): source on top, translation down."""
    if weights.shape != (len(tgt_labels), len(src_labels)):
        raise ValueError(
            f"attention {weights.shape} does not match {len(tgt_labels)} x {len(src_labels)} labels"
        )
    width, x_font, x_step = axis_layout(len(src_labels))
    height, y_font, y_step = axis_layout(len(tgt_labels))
    figure = Figure(figsize=(width + 1.5, height + 1.5))
    axes = figure.subplots()
    axes.imshow(weights, cmap="gray", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    axes.xaxis.tick_top()
    axes.xaxis.set_label_position("top")
    axes.set_xticks(range(0, len(src_labels), x_step))
    axes.set_xticklabels([label_text(p) for p in src_labels[::x_step]], rotation=90, fontsize=x_font)
    axes.set_yticks(range(0, len(tgt_labels), y_step))
    axes.set_yticklabels([label_text(p) for p in tgt_labels[::y_step]], fontsize=y_font)
    axes.set_xlabel("source")
    axes.set_ylabel("translation")
    with warnings.catch_warnings():  # a glyph missing from the font (emoji, rare scripts) draws as a box
        warnings.simplefilter("ignore", UserWarning)
        figure.tight_layout()
    return figure


def draw_attention(
    path: str | Path, weights: np.ndarray, src_labels: list[str], tgt_labels: list[str]
) -> None:
    """Write the heat map of `weights` (len(tgt_labels), len(src_labels)) to `path` (.png, .pdf, .svg)."""
    figure = attention_figure(weights, src_labels, tgt_labels)
    with warnings.catch_warnings():  # see attention_figure: missing glyphs
        warnings.simplefilter("ignore", UserWarning)
        save_figure(figure, path)


def attention_files(translator: Translator, folder: Path) -> Callable[[int, Translation], None]:
    """What `translate_stream` calls for each line to write the best hypothesis' heat map
    (`<folder>/<index>.png`) and matrix (`<index>.json`, with the pieces that label it); lines with
    nothing attended (empty) get no files. An earlier run's numbered files are removed first, so that none
    is left describing a line of other input. It turns on the translator's attention."""
    folder.mkdir(parents=True, exist_ok=True)
    for earlier in folder.iterdir():
        if re.fullmatch(r"\d{6}\.(json|png)", earlier.name):
            earlier.unlink()
    translator.with_attention = True

    def write(index: int, translation: Translation) -> None:
        found = translator.attention(translation)
        if found is None:
            return
        weights, source, target = found
        record = {"index": index, "source": source, "target": target}
        write_json(
            folder / f"{index:06d}.json",
            {**record, "attention": np.round(weights.astype(np.float64), 5).tolist()},
        )
        draw_attention(folder / f"{index:06d}.png", weights, source, target)

    return write


def pick_by_length(lines: Sequence[str], count: int, shortest: int = 8, longest: int = 40) -> list[int]:
    """Line numbers of up to `count` lines whose word counts spread from `shortest` to `longest` (longer
    sentences make unreadable pictures): for each target length, the first line closest to it; none
    without lines (`eval --html` without sources)."""
    if not lines:
        return []
    targets = [shortest + k * (longest - shortest) // max(count - 1, 1) for k in range(count)]
    picks = [min(range(len(lines)), key=lambda i, n=n: (abs(len(lines[i].split()) - n), i)) for n in targets]
    return list(dict.fromkeys(picks))
