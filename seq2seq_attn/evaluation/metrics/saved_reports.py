"""Reports saved as JSON by `seq2seq eval --format json`: checked on reading (their format and version), and
merged to draw the systems of several together (`seq2seq plot curve`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import UserError
from .by_length import REPORT_FORMAT, REPORT_VERSION
from .report import length_unit


def check_report(report: Any, name: str) -> dict[str, Any]:
    if not isinstance(report, dict) or report.get("format") != REPORT_FORMAT:
        raise UserError(f"{name}: not a report saved by `seq2seq eval --format json`")
    if report.get("version") != REPORT_VERSION:
        raise UserError(
            f"{name}: report version {report.get('version')}, this seq2seq-attn reads {REPORT_VERSION}"
        )
    return report


def bucketing(report: dict[str, Any]) -> str:
    """How a report's sentences were bucketed, e.g. "[0, 10, 20] by source, in words"."""
    return f"{report['edges']} by {report['bucket_by']}, in {length_unit(report)}"


def merge_reports(named: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """One report holding the systems of several saved ones, to draw them together; buckets must agree."""
    first_name, first = named[0][0], check_report(named[0][1], named[0][0])
    merged = {**first, "systems": list(first["systems"]), "comparisons": list(first["comparisons"])}
    merged["diagnostics"] = list(first.get("diagnostics", []))
    for name, report in named[1:]:
        check_report(report, name)
        if bucketing(report) != bucketing(first):
            raise UserError(
                f"{name} has buckets {bucketing(report)} but {first_name} has {bucketing(first)}: "
                "evaluate them with the same buckets"
            )
        merged["systems"] += report["systems"]
        merged["comparisons"] += report["comparisons"]
        merged["diagnostics"] += report.get("diagnostics", [])
    labels = [system["label"] for system in merged["systems"]]
    for label in labels:
        if labels.count(label) > 1:
            raise UserError(
                f"system label {label!r} appears in more than one report: give the systems distinct labels"
            )
    return merged
