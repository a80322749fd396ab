"""The evaluation report as one self-contained HTML page: open it offline, mail it, archive it.

Everything is inline: the CSS, the BLEU-by-length curve and the attention heat maps as `<svg>` elements
(text drawn as paths, images as data URIs), so the page makes no network request. Sections, in order:
how the numbers were computed, the curve (intervals and significance marks), the tables of `report`,
the sentences where the systems differ most per bucket, attention heat maps, and attention alignment
quality when it was measured.

The alignment section takes plain data, so any aligner can fill it:
{"method": str, "overall": {"aer", "precision", "recall" (each None where undefined), "sentences"},
 "by_length": [{"bucket": str, "aer", "precision", "recall", "sentences"}],
 "baseline": {same keys as overall} or None, "figures": [{"title": str, "svg": str}]}.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape
from typing import Any

from .report import Table, notes, number, tables

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 78em; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { padding: 0.2em 0.6em; border-bottom: 1px solid #eee; text-align: right; }
th { background: #f4f4f4; } td.name, th.name { text-align: left; }
tr.significant td { background: #e6f4e6; font-weight: 600; }
.notes { color: #555; font-size: 0.85em; } .notes p { margin: 0.2em 0; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.9em; }
.example { border-left: 3px solid #ccc; padding-left: 0.8em; margin: 0.8em 0; }
.example td { text-align: left; vertical-align: top; }
"""


def _table(table: Table, marked_column: str | None = None) -> str:
    """An HTML table; rows whose `marked_column` cell is 'yes' get the "significant" class."""
    mark = table.columns.index(marked_column) if marked_column in table.columns else None

    def cells(tag: str, row: Sequence[str]) -> str:
        return "".join(
            f'<{tag} class="name">{escape(c)}</{tag}>' if i < table.left else f"<{tag}>{escape(c)}</{tag}>"
            for i, c in enumerate(row)
        )

    body = "".join(
        f'<tr class="significant">{cells("td", row)}</tr>'
        if mark is not None and row[mark] == "yes"
        else f"<tr>{cells('td', row)}</tr>"
        for row in table.rows
    )
    title = f"<h3>{escape(table.title)}</h3>" if table.title else ""
    return f"{title}<table><thead><tr>{cells('th', table.columns)}</tr></thead><tbody>{body}</tbody></table>"


def _figure(svg: str, caption: str, element_id: str = "") -> str:
    ident = f' id="{escape(element_id)}"' if element_id else ""
    return f"<figure{ident}>{svg}<figcaption>{escape(caption)}</figcaption></figure>"


def _examples(examples: Sequence[dict[str, Any]]) -> str:
    parts = ["<h2>Sentences where the systems differ most</h2>"]
    for group in examples:
        parts.append(f"<h3>Bucket {escape(group['bucket'])}</h3>")
        for sentence in group["sentences"]:
            rows = [("source", sentence["source"], ""), ("reference", sentence["reference"], "")]
            rows += [(out["label"], out["text"], f"{out['chrf']:.1f}") for out in sentence["outputs"]]
            body = "".join(
                f'<tr><td class="name">{escape(who)}</td><td>{escape(text)}</td><td>{score}</td></tr>'
                for who, text, score in rows
            )
            parts.append(
                f'<div class="example"><p>line {sentence["line"] + 1}</p><table><thead><tr>'
                f'<th class="name">who</th><th class="name">text</th><th>sentence chrF</th></tr></thead>'
                f"<tbody>{body}</tbody></table></div>"
            )
    return "".join(parts)


ALIGNMENT_COLUMNS = ("bucket", "sentences", "AER", "precision", "recall")


def _alignment(alignment: dict[str, Any]) -> str:
    """AER, precision and recall overall, by length, and of the baseline aligner when given."""

    def row(name: str, scores: dict[str, Any]) -> list[str]:
        # a bucket without sentences or gold links has None scores (align.alignment_scores): "-", as in text
        measures = [number(scores[k], 3) for k in ("aer", "precision", "recall")]
        return [name, str(scores["sentences"]), *measures]

    rows = [row("all", alignment["overall"])] + [row(r["bucket"], r) for r in alignment["by_length"]]
    if alignment.get("baseline"):
        rows.append(row("baseline (all)", alignment["baseline"]))
    table = Table(f"Attention as word alignment: {alignment['method']}", ALIGNMENT_COLUMNS, rows, left=1)
    figures = "".join(_figure(_svg_image(f["svg"]), f["title"]) for f in alignment.get("figures", []))
    return f"<h2>Alignment quality</h2>{_table(table)}{figures}"


def _svg_image(svg: str) -> str:
    """An SVG read from a file (`align --json`'s figures), shown as an image: a browser runs no script or
    event handler it holds, which it would inline."""
    encoded = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img alt="" src="data:image/svg+xml;base64,{encoded}">'


def render_html(
    report: dict[str, Any],
    *,
    curve_svg: str = "",
    diagnostics_svg: str = "",
    examples: Sequence[dict[str, Any]] = (),
    heatmaps: Sequence[dict[str, str]] = (),
    alignment: dict[str, Any] | None = None,
    title: str = "BLEU by sentence length",
) -> str:
    """The page. curve_svg, diagnostics_svg: the length curve and the diagnostics by length as `<svg>`
    elements ("" when not bucketed); heatmaps: [{"title": str, "svg": str}]; alignment: see the module
    docstring (its section is left out if None)."""
    parts = [f"<h1>{escape(title)}</h1>"]
    parts.append(
        '<div class="notes">' + "".join(f"<p>{escape(line)}</p>" for line in notes(report)) + "</div>"
    )
    if curve_svg:
        caption = (
            "BLEU per length bucket, bands: 95% bootstrap intervals, black markers: significant differences"
        )
        parts.append(_figure(curve_svg, caption, "curve"))
    if diagnostics_svg:
        caption = (
            "Why long sentences fail: attention entropy, dropped and repeated source words, backward jumps, "
            "repeated n-grams and length ratio per bucket (docs/evaluation.md)"
        )
        parts.append(_figure(diagnostics_svg, caption, "diagnostics"))
    parts.append("<h2>Scores</h2>" + "".join(_table(table, "p<0.05") for table in tables(report)))
    if examples:
        parts.append(_examples(examples))
    if heatmaps:
        parts.append("<h2>Attention</h2>" + "".join(_figure(h["svg"], h["title"]) for h in heatmaps))
    if alignment is not None:
        parts.append(_alignment(alignment))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<title>{escape(title)}</title><link rel="icon" href="data:,"><style>{STYLE}</style></head>'
        f"<body>{''.join(parts)}</body></html>\n"
    )
