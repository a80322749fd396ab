"""The sentences behind the numbers: per length bucket, the sentences where the systems differ most, for
the HTML report (html_report.py) to show beside its tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .bleu import chrf_metric
from .bootstrap import sentence_stats
from .buckets import bucket_index, word_counts
from .inputs import System
from .report import moses_lang_of


def sentence_chrf(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool) -> np.ndarray:
    """sacrebleu's chrF of each sentence on its own, (sentences,); `lowercase`: case-insensitive."""
    metric = chrf_metric(references, lowercase)
    stats = sentence_stats(metric, hypotheses)  # (sentences, 18)
    return np.array([metric._compute_score_from_stats(row.tolist()).score for row in stats])


def differing_examples(
    report: dict[str, Any],
    systems: Sequence[System],
    references: Sequence[str],
    sources: Sequence[str] | None,
    per_bucket: int = 3,
    *,
    lowercase: bool,
) -> list[dict[str, Any]]:
    """For each bucket of `report` (or all sentences when not bucketed), the `per_bucket` sentences where
    the systems' sentence chrF differ most (with one system: where it is lowest).

    lowercase: the `eval.lowercase` the report was scored with (required: case-sensitive sentence chrF in
    a case-insensitive report would pick and score the examples by a difference the report ignores).

    Returns [{"bucket": label, "sentences": [{"line": 0-based line, "source": str or "", "reference": str,
    "outputs": [{"label": str, "text": str, "chrf": float}]}]}].
    """
    scores = [sentence_chrf(system.hypotheses, references, lowercase) for system in systems]
    chrf = np.stack(scores)  # (systems, n)
    spread = chrf.max(axis=0) - chrf.min(axis=0) if len(systems) > 1 else -chrf[0]  # (sentences,)
    groups: list[tuple[str, np.ndarray]] = [("all", np.arange(len(references)))]
    if report["edges"]:
        lines = sources if report["bucket_by"] == "source" else references
        lengths = word_counts(lines, moses_lang_of(report.get("words")))
        index = bucket_index(lengths, report["edges"])
        groups = [(b["label"], np.flatnonzero(index == i)) for i, b in enumerate(report["buckets"])]
    examples = []
    for label, members in groups:
        chosen = members[np.argsort(-spread[members], kind="stable")[:per_bucket]]
        sentences = [
            {
                "line": int(i),
                "source": sources[i] if sources is not None else "",
                "reference": references[i],
                "outputs": [
                    {"label": system.label, "text": system.hypotheses[i], "chrf": float(chrf[k, i])}
                    for k, system in enumerate(systems)
                ],
            }
            for i in chosen
        ]
        examples.append({"bucket": label, "sentences": sentences})
    return examples
