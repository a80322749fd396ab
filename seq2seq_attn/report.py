"""The evaluation report (see `evaluate`) rendered as text, markdown, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

COLUMNS = ("system", "bucket", "count", "BLEU", "95% CI", "chrF", "BP", "ratio")


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    """Formatted cells, one list per system and bucket ("all" first); '*' marks a count below the minimum."""
    cells = []
    for system in report["systems"]:
        for row in system["rows"]:
            interval = "-" if row["ci_low"] is None else f"[{row['ci_low']:.2f}, {row['ci_high']:.2f}]"
            cells.append(
                [
                    system["label"],
                    row["bucket"],
                    f"{row['count']}{'*' if row['few'] else ''}",
                    _number(row["bleu"], 2),
                    interval,
                    _number(row["chrf"], 2),
                    _number(row["bp"], 3),
                    _number(row["ratio"], 3),
                ]
            )
    return cells


def notes(report: dict[str, Any]) -> list[str]:
    """The lines that say how the numbers were computed."""
    lines = [
        f"BLEU signature: {report['signatures']['bleu']}",
        f"chrF signature: {report['signatures']['chrf']}",
    ]
    if report["bucket_by"]:
        lines.append(
            f"Buckets: {report['bucket_by']} length in words, [low, high): a 10-word sentence is in "
            "10-20 when edges are 0,10,20,..."
        )
    boot = report["bootstrap"]
    if boot["resamples"]:
        lines.append(
            f"95% CI: {boot['method']} bootstrap of BLEU, {boot['resamples']} resamples, seed {boot['seed']}."
        )
    if any(row["few"] for system in report["systems"] for row in system["rows"]):
        lines.append(f"* fewer than {report['min_bucket_size']} sentences: unreliable.")
    return lines


def render_text(report: dict[str, Any]) -> str:
    cells = table_rows(report)
    widths = [max(len(row[i]) for row in [list(COLUMNS), *cells]) for i in range(len(COLUMNS))]

    def line(row: Sequence[str]) -> str:
        cells = [
            cell.ljust(w) if i < 2 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    table = [line(COLUMNS), line(["-" * w for w in widths])] + [line(row) for row in cells]
    return "\n".join([*notes(report), "", *table]) + "\n"


def render_markdown(report: dict[str, Any]) -> str:
    table = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * 2 + "--:|" * (len(COLUMNS) - 2)]
    table += ["| " + " | ".join(row) + " |" for row in table_rows(report)]
    return "\n".join([line + "  " for line in notes(report)] + ["", *table]) + "\n"


CSV_FIELDS = (
    "system",
    "bucket",
    "low",
    "high",
    "count",
    "bleu",
    "ci_low",
    "ci_high",
    "chrf",
    "bp",
    "ratio",
    "hyp_len",
    "ref_len",
    "few",
)


def render_csv(report: dict[str, Any]) -> str:
    bounds = {bucket["label"]: bucket for bucket in report["buckets"]}
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for system in report["systems"]:
        for row in system["rows"]:
            bucket = bounds.get(row["bucket"], {})
            writer.writerow(
                {**row, "system": system["label"], "low": bucket.get("low"), "high": bucket.get("high")}
            )
    return out.getvalue()


def render_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


RENDERERS = {"text": render_text, "json": render_json, "csv": render_csv, "markdown": render_markdown}


def render(report: dict[str, Any], fmt: str) -> str:
    """The report as text, json, csv or markdown."""
    return RENDERERS[fmt](report)
