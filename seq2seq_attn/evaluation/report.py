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

SCORE_COLUMNS = ("system", "bucket", "count", "BLEU", "95% CI", "chrF", "BP", "ratio")
MOSES_COLUMN = "BLEU-moses"  # BLEU on Moses-tokenised text, as multi-bleu.perl computed it


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


def _number(value: float | None, digits: int) -> str:
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
    """BLEU, its interval, chrF, BP and length ratio per system and bucket ("all" first) of one subset;
    '*' marks a count below the minimum."""
    moses = report["signatures"]["bleu_moses"] is not None
    rows = []
    for label, row in subset_rows(report, subset["name"]):
        cells = [
            label,
            row["bucket"],
            f"{row['count']}{'*' if row['few'] else ''}",
            _number(row["bleu"], 2),
            _interval(row["ci_low"], row["ci_high"]),
            _number(row["chrf"], 2),
            _number(row["bp"], 3),
            _number(row["ratio"], 3),
        ]
        rows.append(cells + ([_number(row["bleu_moses"], 2)] if moses else []))
    title = (
        "" if subset["name"] == "all" else f"{subset['name']}: {subset['sentences']} {subset['definition']}"
    )
    return Table(title, SCORE_COLUMNS + ((MOSES_COLUMN,) if moses else ()), rows, left=2)


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
            _number(row["p_value"], 4),
            significance_mark(row),
        ]
        for comparison in report["comparisons"]
        for row in comparison["rows"]
        if row["subset"] == subset["name"]
    ]
    title = f"Paired differences ({subset['name']} sentences)"
    return Table(title, COMPARISON_COLUMNS, rows, left=3)


def tables(report: dict[str, Any]) -> list[Table]:
    """Scores per subset, then the paired differences per subset when there are two systems or more."""
    scores = [score_table(report, subset) for subset in report["subsets"]]
    if not report["comparisons"]:
        return scores
    return scores + [comparison_table(report, subset) for subset in report["subsets"]]


def notes(report: dict[str, Any]) -> list[str]:
    """The lines that say how the numbers were computed."""
    signatures = report["signatures"]
    lines = [f"BLEU signature: {signatures['bleu']}", f"chrF signature: {signatures['chrf']}"]
    if signatures["bleu_moses"]:
        lines.append(
            f"{MOSES_COLUMN}: BLEU of Moses-tokenised text with no further tokenisation and no smoothing "
            f"(the multi-bleu.perl setting), signature: {signatures['bleu_moses']}"
        )
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
    lines = [
        "| " + " | ".join(table.columns) + " |",
        "|" + "---|" * table.left + "--:|" * (len(table.columns) - table.left),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    return ([f"**{table.title}**", ""] if table.title else []) + lines


def render_text(report: dict[str, Any]) -> str:
    blocks = [_text_table(table) for table in tables(report)]
    return "\n".join([*notes(report), *(line for block in blocks for line in ["", *block])]) + "\n"


def render_markdown(report: dict[str, Any]) -> str:
    blocks = [_markdown_table(table) for table in tables(report)]
    lines = [line + "  " for line in notes(report)]
    return "\n".join([*lines, *(line for block in blocks for line in ["", *block])]) + "\n"


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
    "subset",
    "bleu_moses",
    "baseline",
    "delta",
    "delta_low",
    "delta_high",
    "p_value",
    "significant",
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
