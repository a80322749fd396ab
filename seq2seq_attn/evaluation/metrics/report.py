"""The evaluation report (see `evaluate` and docs/evaluation.md) rendered as text, markdown, CSV or JSON.

Text and markdown show one table of scores per sentence subset (all sentences first, then e.g. "no UNK")
and, with two systems or more, one table of paired differences per subset. CSV holds every row of
every table in one long table: score lines first, then difference lines (those with a `baseline`).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...provenance import summary
from .diagnostics import DIAGNOSTICS


@dataclass(frozen=True)
class Metric:
    """One number of a report row, as sacrebleu computes it: the row's key (also its JSON and CSV field);
    which of the scorers (`by_length.Scorers`) computes it and the attribute of that scorer's result that
    holds it; its column in the text, markdown and HTML tables ("": JSON and CSV only) and digits there;
    `empty`, its value in a bucket without sentences. `interval`: the bootstrap interval (`ci_low`,
    `ci_high`) follows it. `optional`: computed only when asked for; its column shows only in reports
    that have its scorer, and `note` then says under the table how it was computed."""

    key: str
    scorer: str
    attribute: str
    header: str = ""
    digits: int = 2
    kind: type = float
    empty: Any = None
    interval: bool = False
    optional: bool = False
    note: str = ""


# The report's numbers, in the order of a row, its JSON and its tables: a new metric is one entry here
# (and its scorer in by_length.Scorers, when sacrebleu computes it in a new way).
METRICS = (
    Metric("bleu", "bleu", "score", "BLEU", 2, interval=True),
    Metric("chrf", "chrf", "score", "chrF", 2),
    Metric("bp", "bleu", "bp", "BP", 3),
    Metric("ratio", "bleu", "ratio", "ratio", 3),
    Metric("hyp_len", "bleu", "sys_len", kind=int, empty=0),
    Metric("ref_len", "bleu", "ref_len", kind=int, empty=0),
    # BLEU of words made by Moses scripts (by_length.TokenisedBleu), as multi-bleu.perl computed it
    Metric(
        "bleu_moses",
        "bleu_moses",
        "score",
        "BLEU-moses",
        2,
        optional=True,
        note="BLEU of Moses-tokenised text with no further tokenisation and no smoothing (the "
        "multi-bleu.perl setting)",
    ),
    Metric(
        "bleu_task",
        "bleu_task",
        "score",
        "BLEU-task",
        2,
        optional=True,
        note="a shared task's own BLEU: the hypotheses lowercased, punctuation-normalised and "
        "Moses-tokenised with escaping, against the task's processed references, with no further "
        "tokenisation and no smoothing",
    ),
)
INTERVAL = ("ci_low", "ci_high")  # the bootstrap interval's fields, after its metric's
INTERVAL_COLUMN = "95% CI"


def metric_fields(optional: bool) -> tuple[str, ...]:
    """The row fields of the required metrics, or of the optional ones, in order, intervals included."""
    return tuple(
        field
        for metric in METRICS
        if metric.optional == optional
        for field in (metric.key, *(INTERVAL if metric.interval else ()))
    )


def shown_metrics(report: dict[str, Any]) -> list[Metric]:
    """The metrics with a table column in this report: every required one, the optional ones it has."""
    signatures = report["signatures"]
    return [m for m in METRICS if m.header and (not m.optional or signatures.get(m.scorer) is not None)]


@dataclass(frozen=True)
class Table:
    """Formatted cells under a title ("" for the main table); the first `left` columns are names."""

    title: str
    columns: tuple[str, ...]
    rows: list[list[str]]
    left: int


def words_label(moses_lang: str | None) -> str:
    """How a report records its words: "moses:en" for Moses words of English, else "whitespace"."""
    return f"moses:{moses_lang}" if moses_lang else "whitespace"


def moses_lang_of(words: str | None) -> str | None:
    """A report's "words" back to the Moses language: "moses:en" -> "en"; "whitespace" -> None."""
    return words.removeprefix("moses:") if words and words.startswith("moses:") else None


def length_unit(report: dict[str, Any]) -> str:
    """What a report's bucket lengths count, for tables and axes: "words" or "Moses words (en)"."""
    lang = moses_lang_of(report.get("words"))
    return f"Moses words ({lang})" if lang else "words"


def number(value: float | None, digits: int) -> str:
    """A table cell: `value` to `digits` places, or "-" where the measure does not apply (None)."""
    return "-" if value is None else f"{value:.{digits}f}"


def _interval(low: float | None, high: float | None) -> str:
    return "-" if low is None else f"[{low:.2f}, {high:.2f}]"


def subset_rows(report: dict[str, Any], subset: str) -> list[tuple[str, dict[str, Any]]]:
    """(system label, row) of every system's rows in `subset`, systems in report order."""
    return [
        (system["label"], row)
        for system in report["systems"]
        for row in system["rows"]
        if row["subset"] == subset
    ]


def bucket_rows(system: dict[str, Any], subset: str = "all") -> dict[str, dict[str, Any]]:
    """{bucket label ("all" included): row} of one system's rows in `subset`."""
    return {row["bucket"]: row for row in system["rows"] if row["subset"] == subset}


def score_table(report: dict[str, Any], subset: dict[str, Any]) -> Table:
    """The metrics with a column (BLEU and its interval, chrF, BP, length ratio, ...) per system and
    bucket ("all" first) of one subset; '*' marks a count below the minimum."""
    shown = shown_metrics(report)
    columns = ["system", "bucket", "count"]
    for metric in shown:
        columns += [metric.header, *([INTERVAL_COLUMN] if metric.interval else [])]
    rows = []
    for label, row in subset_rows(report, subset["name"]):
        cells = [label, row["bucket"], f"{row['count']}{'*' if row['few'] else ''}"]
        for metric in shown:
            cells.append(number(row[metric.key], metric.digits))
            if metric.interval:
                cells.append(_interval(*(row[field] for field in INTERVAL)))
        rows.append(cells)
    title = (
        "" if subset["name"] == "all" else f"{subset['name']}: {subset['sentences']} {subset['definition']}"
    )
    return Table(title, tuple(columns), rows, left=2)


COMPARISON_COLUMNS = ("system", "baseline", "bucket", "count", "delta BLEU", "95% CI", "p-value", "p<0.05")


def significance_mark(row: dict[str, Any]) -> str:
    """'yes' where the difference is significant, 'no' where it is not, '-' where it was not tested."""
    return "-" if row["significant"] is None else ("yes" if row["significant"] else "no")


def comparison_table(report: dict[str, Any], subset: dict[str, Any]) -> Table:
    """BLEU(system) - BLEU(baseline) per pair and bucket of one subset, its paired interval and p-value."""
    rows = [
        [
            comparison["system"],
            comparison["baseline"],
            row["bucket"],
            str(row["count"]),
            "-" if row["delta"] is None else f"{row['delta']:+.2f}",
            _interval(row["ci_low"], row["ci_high"]),
            number(row["p_value"], 4),
            significance_mark(row),
        ]
        for comparison in report["comparisons"]
        for row in comparison["rows"]
        if row["subset"] == subset["name"]
    ]
    title = f"Paired differences ({subset['name']} sentences)"
    return Table(title, COMPARISON_COLUMNS, rows, left=3)


DIAGNOSTICS_TITLE = "Diagnostics (docs/evaluation.md: entropy, dropped, repeated, backward, n-grams)"


def diagnostics_table(report: dict[str, Any]) -> Table:
    """The diagnostics (diagnostics.py) per system and bucket ("all" first); '-' where a measure needs
    attention the system has not, or a bucket has nothing to count."""
    rows = [
        [system["label"], row["bucket"], str(row["count"])]
        + [number(row[diagnostic.key], diagnostic.digits) for diagnostic in DIAGNOSTICS]
        for system in report.get("diagnostics", [])
        for row in system["rows"]
    ]
    columns = ("system", "bucket", "count", *(diagnostic.header for diagnostic in DIAGNOSTICS))
    return Table(DIAGNOSTICS_TITLE, columns, rows, left=2)


def tables(report: dict[str, Any]) -> list[Table]:
    """Scores per subset, the paired differences per subset when there are two systems or more, then the
    diagnostics when the report has them."""
    found = [score_table(report, subset) for subset in report["subsets"]]
    if report["comparisons"]:
        found += [comparison_table(report, subset) for subset in report["subsets"]]
    if report.get("diagnostics"):
        found.append(diagnostics_table(report))
    return found


def notes(report: dict[str, Any]) -> list[str]:
    """The lines that say how the numbers were computed."""
    signatures = report["signatures"]
    lines = [f"BLEU signature: {signatures['bleu']}", f"chrF signature: {signatures['chrf']}"]
    for metric in shown_metrics(report):
        if metric.optional:
            lines.append(f"{metric.header}: {metric.note}, signature: {signatures[metric.scorer]}")
    if report.get("task_references"):
        lines.append(f"Task references: {report['task_references']}")
    if report["bucket_by"]:
        lines.append(
            f"Buckets: {report['bucket_by']} length in {length_unit(report)}, [low, high): a 10-word "
            "sentence is in 10-20 when edges are 0,10,20,..."
        )
    boot = report["bootstrap"]
    if boot["resamples"]:
        lines.append(
            f"95% CI: {boot['method']} bootstrap of BLEU, {boot['resamples']} resamples, seed {boot['seed']}."
        )
    if report["comparisons"] and boot["resamples"]:
        test = report["significance"]["test"]
        draws = f"{boot['resamples']} {'resamples' if test == 'paired-bs' else 'trials'}"
        lines.append(
            f"Paired differences: delta BLEU = system - baseline, 95% CI over the paired resamples, p-value "
            f"of sacrebleu's {test} test ({draws}); p<0.05 'yes' marks a significant difference."
        )
    if any(row["few"] for system in report["systems"] for row in system["rows"]):
        lines.append(f"* fewer than {report['min_bucket_size']} sentences: unreliable.")
    return lines + provenance_notes(report.get("provenance"))


def provenance_notes(found: dict[str, Any] | None) -> list[str]:
    """What made the report (`provenance.describe`) and, for each trained run, every sitting that trained
    it (the run folder's provenance.json)."""
    if found is None:
        return []
    lines = [f"Evaluated with {summary(found['evaluated'])}."]
    for label, runs in found["runs"].items():
        for run, sittings in runs.items():
            if not sittings:
                lines.append(f"{label} ({run}): trained before run folders recorded what trained them.")
            for sitting in sittings or []:
                lines.append(
                    f"{label} ({run}), trained from step {sitting['from_step']} with {summary(sitting)}."
                )
    return lines


def _text_table(table: Table) -> list[str]:
    widths = [
        max(len(row[i]) for row in [list(table.columns), *table.rows]) for i in range(len(table.columns))
    ]

    def line(row: Sequence[str]) -> str:
        cells = [
            cell.ljust(w) if i < table.left else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    lines = [line(table.columns), line(["-" * w for w in widths])] + [line(row) for row in table.rows]
    return ([table.title, ""] if table.title else []) + lines


def _markdown_table(table: Table) -> list[str]:
    def cells(values: Sequence[str]) -> str:  # a `|` in a label would end its cell
        return "| " + " | ".join(value.replace("|", "\\|") for value in values) + " |"

    lines = [cells(table.columns), "|" + "---|" * table.left + "--:|" * (len(table.columns) - table.left)]
    lines += [cells(row) for row in table.rows]
    return ([f"**{table.title}**", ""] if table.title else []) + lines


def render_text(report: dict[str, Any]) -> str:
    blocks = [_text_table(table) for table in tables(report)]
    return "\n".join([*notes(report), *(line for block in blocks for line in ["", *block])]) + "\n"


def render_markdown(report: dict[str, Any]) -> str:
    blocks = [_markdown_table(table) for table in tables(report)]
    lines = [line + "  " for line in notes(report)]
    return "\n".join([*lines, *(line for block in blocks for line in ["", *block])]) + "\n"


def csv_fields() -> tuple[str, ...]:
    """The CSV header: where a row sits, its metrics (the optional ones after `subset`), then the fields
    of a paired difference."""
    return (
        "system",
        "bucket",
        "low",
        "high",
        "count",
        *metric_fields(optional=False),
        "few",
        "subset",
        *metric_fields(optional=True),
        "baseline",
        "delta",
        "delta_low",
        "delta_high",
        "p_value",
        "significant",
        *(diagnostic.key for diagnostic in DIAGNOSTICS),
    )


def render_csv(report: dict[str, Any]) -> str:
    bounds = {bucket["label"]: bucket for bucket in report["buckets"]}
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=csv_fields(), lineterminator="\n")
    writer.writeheader()
    diagnosed = {  # (system, bucket) -> its diagnostics, written on the row of all sentences
        (system["label"], row["bucket"]): {d.key: row[d.key] for d in DIAGNOSTICS}
        for system in report.get("diagnostics", [])
        for row in system["rows"]
    }
    for system in report["systems"]:
        for row in system["rows"]:
            bucket = bounds.get(row["bucket"], {})
            extra = diagnosed.get((system["label"], row["bucket"]), {}) if row["subset"] == "all" else {}
            writer.writerow(
                {
                    **row,
                    **extra,
                    "system": system["label"],
                    "low": bucket.get("low"),
                    "high": bucket.get("high"),
                }
            )
    for comparison in report["comparisons"]:  # the paired differences, after the scores
        for row in comparison["rows"]:
            bucket = bounds.get(row["bucket"], {})
            writer.writerow(
                {
                    "system": comparison["system"],
                    "baseline": comparison["baseline"],
                    "subset": row["subset"],
                    "bucket": row["bucket"],
                    "low": bucket.get("low"),
                    "high": bucket.get("high"),
                    "count": row["count"],
                    "delta": row["delta"],
                    "delta_low": row["ci_low"],
                    "delta_high": row["ci_high"],
                    "p_value": row["p_value"],
                    "significant": row["significant"],
                }
            )
    return out.getvalue()


def render_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


RENDERERS = {"text": render_text, "json": render_json, "csv": render_csv, "markdown": render_markdown}


def render(report: dict[str, Any], fmt: str) -> str:
    """The report as text, json, csv or markdown."""
    return RENDERERS[fmt](report)
