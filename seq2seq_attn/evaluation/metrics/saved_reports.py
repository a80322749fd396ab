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


def reference_lengths(report: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(bucket, sentences, reference words) of the first system's rows of all sentences: what a report
    records of its references, the same for two reports of one test set bucketed alike.

    The references' path does not tell: one file has other names from other folders (the committed
    Multi30k val reports name their references in three ways), and one name can hold other files.
    """
    rows = report["systems"][0]["rows"]
    return [(row["bucket"], row["count"], row["ref_len"]) for row in rows if row["subset"] == "all"]


def check_comparable(first_name: str, first: dict[str, Any], name: str, report: dict[str, Any]) -> None:
    """A report drawn with `first` must be bucketed alike, scored against the same references and with the
    same BLEU (the curve's score): otherwise its curve is not comparable, e.g. case-insensitive against
    case-sensitive BLEU, or another test set."""
    if bucketing(report) != bucketing(first):
        raise UserError(
            f"{name} has buckets {bucketing(report)} but {first_name} has {bucketing(first)}: "
            "evaluate them with the same buckets"
        )
    if reference_lengths(report) != reference_lengths(first):
        raise UserError(
            f"{name} was scored against other references than {first_name} ({report['references']} and "
            f"{first['references']} differ in sentences or reference words per bucket): "
            "evaluate them against the same references"
        )
    signature, first_signature = report["signatures"]["bleu"], first["signatures"]["bleu"]
    if signature != first_signature:
        raise UserError(
            f"{name} has BLEU signature {signature} but {first_name} has {first_signature}: "
            "evaluate them with the same BLEU settings (eval.lowercase)"
        )


def merge_reports(named: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """One report holding the systems of several saved ones, to draw them together; they must be
    comparable (`check_comparable`)."""
    first_name, first = named[0][0], check_report(named[0][1], named[0][0])
    merged = {**first, "systems": list(first["systems"]), "comparisons": list(first["comparisons"])}
    merged["diagnostics"] = list(first.get("diagnostics", []))
    for name, report in named[1:]:
        check_report(report, name)
        check_comparable(first_name, first, name, report)
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
