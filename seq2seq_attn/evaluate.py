"""BLEU and chrF of one or more systems, overall and by sentence length (Bahdanau et al. 2014, Fig. 2).

This module computes the report (inputs, buckets, scores); `bootstrap` resamples the sentences and
`report` renders the result as text, markdown, CSV or JSON.

Scores always come from sacrebleu, which tokenises detokenised text itself, so they are comparable with
published numbers; the signatures reported with them say exactly how they were computed.

Length buckets. A sentence's length is its number of whitespace-separated words in the source (or in
the reference with bucket_by="reference"). Edges [0, 10, 20, ..., 60] define half-open buckets
[edge_i, edge_i+1): a 9-word sentence is in "0-10", a 10-word one in "10-20", and the last bucket
[60, inf) is labelled "60+". Empty buckets are kept (count 0, scores null); buckets with fewer than
min_bucket_size sentences are kept and flagged ("few": true), never hidden.

Confidence intervals. sacrebleu's per-sentence sufficient statistics (hypothesis and reference
lengths, n-gram matches and totals) are extracted once. A bootstrap resample of a bucket is then a
count-weighted sum of those rows, and corpus BLEU of all resamples is recomputed at once with numpy.
The 95% interval is the 2.5th-97.5th percentile of the resampled BLEU. Each bucket draws its resamples
from numpy's Generator seeded with (seed, bucket number: 0 for "all", 1.. for the buckets), and all
systems share them (a paired bootstrap), so a system's interval does not depend on which other systems
are in the report, and the same inputs and seed give byte-identical reports.

The report (returned by `evaluate`, saved as JSON; its layout is stable and versioned):

    {
      "format": "seq2seq-attn eval report", "version": 1,
      "signatures": {"bleu": "nrefs:1|case:mixed|eff:no|tok:13a|...", "chrf": "nrefs:1|..."},
      "references": "test.fr", "sources": "test.en" or null,
      "bucket_by": "source" | "reference" | null (not bucketed),
      "edges": [0, 10, 20, 30, 40, 50, 60] ([] when not bucketed),
      "buckets": [{"label": "0-10", "low": 0, "high": 10}, ..., {"label": "60+", "low": 60, "high": null}],
      "bootstrap": {"resamples": 1000, "seed": 12345, "confidence": 0.95, "method": "paired percentile"},
      "min_bucket_size": 30,
      "systems": [
        {"label": "RNNsearch-50", "hypotheses": "rnnsearch.txt" or null,
         "rows": [{"bucket": "all", "count": 3000, "bleu": 26.7, "ci_low": 26.1, "ci_high": 27.4,
                   "chrf": 55.2, "bp": 0.98, "ratio": 0.98, "hyp_len": 70510, "ref_len": 71950,
                   "few": false},
                  ... one row per bucket, in edge order, "bucket" being its label]}
      ]
    }

BLEU, chrF and the interval bounds are on sacrebleu's 0-100 scale; "ratio" is hypothesis/reference
length and "bp" the brevity penalty, both in sacrebleu tokens. Scores of an empty bucket are null, and
the interval bounds are null when resamples is 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

from .bootstrap import CONFIDENCE, confidence_intervals, sentence_stats
from .config import EvalConfig
from .errors import UserError
from .io import read_lines

REPORT_FORMAT = "seq2seq-attn eval report"
REPORT_VERSION = 1


@dataclass(frozen=True)
class System:
    """One system's output: a label for tables and legends, one hypothesis per reference line."""

    label: str
    hypotheses: list[str]
    path: str = ""  # where the hypotheses came from, for messages and the report ("" if not a file)


# ----------------------------------------------------------------------------------------------------------
# inputs


def read_text(path: str | Path) -> list[str]:
    return list(read_lines(path))


def default_label(path: str | Path) -> str:
    """The file name without its extension(s): runs/a/hyp.test.txt.gz -> hyp.test."""
    return Path(Path(path).name.removesuffix(".gz")).stem


def load_systems(paths: Sequence[str | Path], labels: Sequence[str] = ()) -> list[System]:
    """Read hypothesis files; labels pair with paths in order and default to the file stems."""
    if labels and len(labels) != len(paths):
        raise UserError(
            f"{len(labels)} --label for {len(paths)} --hyp: give one label per hypothesis file, or none"
        )
    labels = list(labels) or [default_label(path) for path in paths]
    return [System(label, read_text(path), str(path)) for label, path in zip(labels, paths, strict=True)]


def parse_edges(text: str) -> list[int]:
    """'0,10,20' -> [0, 10, 20] (then validated by `check_edges`)."""
    try:
        return check_edges([int(part) for part in text.split(",")])
    except ValueError:
        raise UserError(
            f"--buckets {text!r}: expected comma-separated whole numbers, e.g. 0,10,20,30"
        ) from None


def check_edges(edges: Sequence[int]) -> list[int]:
    edges = list(edges)
    if not edges or edges[0] != 0 or any(low >= high for low, high in pairwise(edges)):
        raise UserError(
            f"bucket edges {edges}: expected strictly increasing word counts starting at 0, e.g. 0,10,20 "
            "(--buckets / eval.buckets)"
        )
    return edges


def _check_aligned(name: str, count: int, other: str, other_count: int) -> None:
    if count != other_count:
        raise UserError(
            f"{name} has {count} lines but {other} has {other_count}: hypotheses, references and sources "
            "must be line-aligned"
        )


def _check_inputs(
    systems: Sequence[System],
    references: Sequence[str],
    sources: Sequence[str] | None,
    references_path: str,
    sources_path: str,
) -> None:
    ref_name = references_path or "the references"
    if not references:
        raise UserError(f"{ref_name}: no lines to evaluate")
    if not systems:
        raise UserError("no system to evaluate: give at least one --hyp FILE")
    for system in systems:
        _check_aligned(
            system.path or f"system {system.label!r}", len(system.hypotheses), ref_name, len(references)
        )
    if sources is not None:
        _check_aligned(sources_path or "the sources", len(sources), ref_name, len(references))
    labels = [system.label for system in systems]
    for label in labels:
        if labels.count(label) > 1:
            raise UserError(
                f"system label {label!r} is used {labels.count(label)} times: name each with --label"
            )


# ----------------------------------------------------------------------------------------------------------
# buckets


def bucket_index(lengths: np.ndarray, edges: Sequence[int]) -> np.ndarray:
    """Bucket i of each length, edges[i] <= length < edges[i+1]; the last bucket is open-ended."""
    return np.searchsorted(np.asarray(edges), lengths, side="right") - 1


def bucket_labels(edges: Sequence[int]) -> list[dict[str, Any]]:
    """[0, 10, 60] -> 0-10, 10-60, 60+ ("10-60" holds 10 to 59 words)."""
    highs = [*edges[1:], None]
    return [
        {"label": f"{low}-{high}" if high is not None else f"{low}+", "low": low, "high": high}
        for low, high in zip(edges, highs, strict=True)
    ]


def word_counts(lines: Sequence[str]) -> np.ndarray:
    return np.array([len(line.split()) for line in lines], dtype=np.int64)


# ----------------------------------------------------------------------------------------------------------
# scores


def score_row(
    bucket: str,
    bleu: BLEU,
    chrf: CHRF,
    bleu_stats: np.ndarray,
    chrf_stats: np.ndarray,
    interval: tuple[float | None, float | None],
    min_bucket_size: int,
) -> dict[str, Any]:
    """One report row: sacrebleu's corpus scores of exactly these sentences."""
    count = len(bleu_stats)
    row: dict[str, Any] = {
        "bucket": bucket,
        "count": count,
        "bleu": None,
        "ci_low": interval[0],
        "ci_high": interval[1],
        "chrf": None,
        "bp": None,
        "ratio": None,
        "hyp_len": 0,
        "ref_len": 0,
        "few": count < min_bucket_size,
    }
    if count:
        score = bleu._compute_score_from_stats(bleu_stats.sum(axis=0).tolist())
        row.update(
            bleu=float(score.score),
            chrf=float(chrf._compute_score_from_stats(chrf_stats.sum(axis=0).tolist()).score),
            bp=float(score.bp),
            ratio=float(score.ratio),
            hyp_len=int(score.sys_len),
            ref_len=int(score.ref_len),
        )
    return row


def evaluate(
    systems: Sequence[System],
    references: Sequence[str],
    sources: Sequence[str] | None = None,
    *,
    by_length: bool = False,
    config: EvalConfig | None = None,
    references_path: str = "",
    sources_path: str = "",
) -> dict[str, Any]:
    """Score every system overall and, with `by_length`, per length bucket; returns the report (see top)."""
    config = config or EvalConfig()
    _check_inputs(systems, references, sources, references_path, sources_path)
    groups = [("all", np.arange(len(references)))]
    edges: list[int] = []
    if by_length:
        edges = check_edges(config.buckets)
        if config.bucket_by == "source" and sources is None:
            raise UserError(
                "bucketing by source length needs the sources: give --src SRC (or --bucket-by reference)"
            )
        lengths = word_counts(sources if config.bucket_by == "source" else references)
        index = bucket_index(lengths, edges)
        groups += [
            (bucket["label"], np.flatnonzero(index == i)) for i, bucket in enumerate(bucket_labels(edges))
        ]

    bleu, chrf = BLEU(references=[list(references)]), CHRF(references=[list(references)])
    bleu_stats = [sentence_stats(bleu, system.hypotheses) for system in systems]  # each (sentences, 10)
    chrf_stats = [sentence_stats(chrf, system.hypotheses) for system in systems]  # each (sentences, 18)
    rows: list[list[dict[str, Any]]] = [[] for _ in systems]
    for number, (label, members) in enumerate(groups):
        intervals = confidence_intervals(
            [stats[members] for stats in bleu_stats], config.bootstrap, (config.seed, number)
        )
        for i, interval in enumerate(intervals):
            rows[i].append(
                score_row(
                    label,
                    bleu,
                    chrf,
                    bleu_stats[i][members],
                    chrf_stats[i][members],
                    interval,
                    config.min_bucket_size,
                )
            )
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "signatures": {"bleu": bleu.get_signature().format(), "chrf": chrf.get_signature().format()},
        "references": references_path or None,
        "sources": sources_path or None,
        "bucket_by": config.bucket_by if by_length else None,
        "edges": edges,
        "buckets": bucket_labels(edges) if edges else [],
        "bootstrap": {
            "resamples": config.bootstrap,
            "seed": config.seed,
            "confidence": CONFIDENCE,
            "method": "paired percentile",
        },
        "min_bucket_size": config.min_bucket_size,
        "systems": [
            {"label": system.label, "hypotheses": system.path or None, "rows": system_rows}
            for system, system_rows in zip(systems, rows, strict=True)
        ],
    }


# ----------------------------------------------------------------------------------------------------------
# saved reports


def check_report(report: Any, name: str) -> dict[str, Any]:
    if not isinstance(report, dict) or report.get("format") != REPORT_FORMAT:
        raise UserError(f"{name}: not a report saved by `seq2seq eval --format json`")
    if report.get("version") != REPORT_VERSION:
        raise UserError(
            f"{name}: report version {report.get('version')}, this seq2seq-attn reads {REPORT_VERSION}"
        )
    return report


def merge_reports(named: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """One report holding the systems of several saved ones, to draw them together; buckets must agree."""
    first_name, first = named[0][0], check_report(named[0][1], named[0][0])
    merged = {**first, "systems": list(first["systems"])}
    for name, report in named[1:]:
        check_report(report, name)
        if (report["edges"], report["bucket_by"]) != (first["edges"], first["bucket_by"]):
            raise UserError(
                f"{name} has buckets {report['edges']} by {report['bucket_by']} but {first_name} has "
                f"{first['edges']} by {first['bucket_by']}: evaluate them with the same buckets"
            )
        merged["systems"] += report["systems"]
    labels = [system["label"] for system in merged["systems"]]
    for label in labels:
        if labels.count(label) > 1:
            raise UserError(
                f"system label {label!r} appears in more than one report: relabel with `seq2seq eval --label`"
            )
    return merged
