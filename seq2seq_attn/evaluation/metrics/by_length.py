"""BLEU and chrF of one or more systems, overall and by sentence length (Bahdanau et al. 2014, Fig. 2).

This module computes the report: the systems (inputs.py) scored on every sentence and, by length, on each
bucket (buckets.py); `bootstrap` resamples the sentences and `report` renders the result as text,
markdown, CSV or JSON.

Scores always come from sacrebleu, which tokenises detokenised text itself, so they are comparable with
published numbers; the signatures reported with them say exactly how they were computed.

Subsets. Every sentence is scored ("all"), and each extra subset gets the same rows: Table 1 of
Bahdanau et al. also scores the sentences without unknown words ("no UNK": every source and reference
word in the shortlist of the word-vocabulary runs, see `shortlist_subset`).

Confidence intervals. The 95% interval is the 2.5th-97.5th percentile of BLEU over bootstrap
resamples of the sentences (see `bootstrap`). Each bucket of each subset draws its resamples from
numpy's Generator seeded with (seed, subset number, bucket number: 0 for "all", 1.. for the buckets),
and all systems share them (a paired bootstrap), so a system's interval does not depend on which other
systems are in the report, and the same inputs and seed give byte-identical reports.

Paired differences. With two systems or more, each pair (or each system against a baseline) is compared
on every bucket of every subset: the BLEU difference, its interval over the same paired resamples, and
the p-value of sacrebleu's paired bootstrap (paired-bs, from those resamples) or approximate
randomization test (paired-ar), as `bootstrap` computes them.

The report (returned by `evaluate`, saved as JSON) has a stable, versioned layout: docs/evaluation.md;
saved_reports.py reads it back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Score

from ...config import EvalConfig
from ...data import moses
from ...errors import UserError, setting
from ...vocab.pieces import UNK_SURFACE
from .bleu import bleu_metric, chrf_metric, tokenised_bleu
from .bootstrap import (
    ALPHA,
    CONFIDENCE,
    bootstrap_bleu,
    degenerate,
    paired_bootstrap_p,
    percentile_interval,
    randomization_p,
    sentence_stats,
)
from .buckets import bucket_index, bucket_labels, check_edges, word_counts, words_unit
from .diagnostics import bucket_row, sentence_counts
from .inputs import System, check_aligned, check_labels, check_lines
from .report import INTERVAL, METRICS, words_label

if TYPE_CHECKING:
    from ...vocab.pieces import Vocab

REPORT_FORMAT = "seq2seq-attn eval report"
REPORT_VERSION = 2


# ----------------------------------------------------------------------------------------------------------
# sentence subsets


@dataclass(frozen=True)
class Subset:
    """A named set of sentences scored as its own rows (overall and by length), e.g. Table 1's "no UNK"."""

    name: str
    definition: str  # for readers of the report: which sentences are in it
    members: np.ndarray  # (sentences in the subset,) ascending sentence ids
    # system label -> its hypotheses for this subset's rows, one per reference line (only the members'
    # are read), when they differ from the system's own: Table 1's no-UNK search
    outputs: dict[str, list[str]] = dataclasses.field(default_factory=dict)


NO_UNK = "no UNK"


def shortlist_subset(
    vocabs: Sequence[tuple[str, Vocab]], sources: Sequence[str], references: Sequence[str]
) -> Subset:
    """Table 1's "no UNK" sentences: every source word and every reference word is in the shortlist of
    each of the word-vocabulary runs `vocabs` ((run label, its vocabulary) pairs), so that all systems are
    scored on the same sentences."""
    covered = np.ones(len(references), dtype=bool)
    for _, vocab in vocabs:
        for ids_of_lines in (vocab.encode_src(sources), vocab.encode_tgt(references)):
            covered &= np.array([vocab.unk_id not in ids for ids in ids_of_lines], dtype=bool)
    names = ", ".join(label for label, _ in vocabs)
    definition = f"sentences whose source and reference words are all in the shortlist of {names}"
    return Subset(NO_UNK, definition, np.flatnonzero(covered))


# ----------------------------------------------------------------------------------------------------------
# scores


@dataclass(frozen=True)
class TokenisedBleu:
    """A BLEU of words that a Moses pipeline made (`bleu.tokenised_bleu`), beside sacrebleu's: `scorer`,
    its entry in `report.METRICS` ("bleu_moses": the paper's Moses-tokenised BLEU; "bleu_task": a shared
    task's, against its official processed references). The hypotheses always go through `words`; the
    references too, unless `references` gives them as the task processed them (line-aligned with the
    report's references, read from `references_path`)."""

    scorer: str
    words: moses.Pipeline
    references: Sequence[str] | None = None
    references_path: str = ""


class Scorers:
    """sacrebleu's metrics with the references cached: BLEU and chrF as sacrebleu computes them by default
    (case-insensitive with `lowercase`), and each `TokenisedBleu` asked for (the paper's multi-bleu.perl
    setting, a shared task's metric)."""

    def __init__(
        self, references: Sequence[str], tokenised: Sequence[TokenisedBleu] = (), lowercase: bool = False
    ) -> None:
        self.tokenised = {spec.scorer: spec for spec in tokenised}
        self.metrics: dict[str, BLEU | CHRF] = {
            "bleu": bleu_metric(references, lowercase),
            "chrf": chrf_metric(references, lowercase),
        }
        for spec in tokenised:
            words = spec.words(references) if spec.references is None else spec.references
            self.metrics[spec.scorer] = tokenised_bleu(words)

    def stats(self, hypotheses: Sequence[str]) -> dict[str, np.ndarray]:
        """Per-sentence sufficient statistics of each metric, (sentences, k) each. A tokenised BLEU keeps
        a word model's <unk> one word, as multi-bleu.perl counted the authors' UNK (Moses would make it
        three)."""
        return {
            name: sentence_stats(
                metric,
                self.tokenised[name].words(hypotheses, keep=(UNK_SURFACE,))
                if name in self.tokenised
                else hypotheses,
            )
            for name, metric in self.metrics.items()
        }

    def score(self, name: str, stats: np.ndarray) -> Score:
        """sacrebleu's corpus score from summed statistics rows."""
        return self.metrics[name]._compute_score_from_stats(stats.sum(axis=0).tolist())

    def signatures(self) -> dict[str, str | None]:
        """How each score was computed, the Moses steps first for a tokenised BLEU; null for an optional
        metric not asked for."""
        found = {name: metric.get_signature().format() for name, metric in self.metrics.items()}
        for name, spec in self.tokenised.items():
            found[name] = f"{spec.words.describe()}|{found[name]}"
        return {scorer: found.get(scorer) for scorer in dict.fromkeys(m.scorer for m in METRICS)}


def score_row(
    subset: str,
    bucket: str,
    scorers: Scorers,
    stats: dict[str, np.ndarray],
    interval: tuple[float | None, float | None],
    min_bucket_size: int,
) -> dict[str, Any]:
    """One report row: sacrebleu's corpus scores of exactly these sentences (`stats`: their rows), one
    field per metric of the report's table (`report.METRICS`)."""
    count = len(stats["bleu"])
    row: dict[str, Any] = {"subset": subset, "bucket": bucket, "count": count}
    for metric in METRICS:
        row[metric.key] = metric.empty
        if metric.interval:
            row.update(zip(INTERVAL, interval, strict=True))
    row["few"] = count < min_bucket_size
    if count:
        scores = {name: scorers.score(name, rows) for name, rows in stats.items()}
        for metric in METRICS:
            if metric.scorer in scores:
                row[metric.key] = metric.kind(getattr(scores[metric.scorer], metric.attribute))
    return row


def groups(subset: Subset, buckets: np.ndarray | None, labels: Sequence[str]) -> list[tuple[str, np.ndarray]]:
    """("all", the subset's sentences), then (bucket label, its sentences in the subset) per bucket.

    buckets: (sentences,) bucket number of every sentence, None when not bucketed.
    """
    members = subset.members
    if buckets is None:
        return [("all", members)]
    return [("all", members)] + [(label, members[buckets[members] == i]) for i, label in enumerate(labels)]


# ----------------------------------------------------------------------------------------------------------
# paired comparisons


def comparison_pairs(labels: Sequence[str], baseline: str | None) -> list[tuple[int, int]]:
    """(system, baseline) index pairs: each system against `baseline` (`eval.baseline`), or every pair in
    report order."""
    if baseline is None:
        return [(i, j) for i in range(len(labels)) for j in range(i + 1, len(labels))]
    if baseline not in labels:
        raise UserError(
            f"{setting('eval.baseline')} {baseline!r}: no system has that label (labels: {', '.join(labels)})"
        )
    base = labels.index(baseline)
    return [(i, base) for i in range(len(labels)) if i != base]


def comparison_row(
    row: dict[str, Any],
    baseline_row: dict[str, Any],
    differences: np.ndarray | None,
    p: float | None,
) -> dict[str, Any]:
    """BLEU(system) - BLEU(baseline) on one bucket, its interval over the paired resamples, the p-value.

    differences: (resamples,) the difference on each paired resample, None without resamples.
    """
    delta = None if row["bleu"] is None else row["bleu"] - baseline_row["bleu"]
    interval = percentile_interval(differences) if differences is not None else (None, None)
    return {
        "subset": row["subset"],
        "bucket": row["bucket"],
        "count": row["count"],
        "delta": delta,
        "ci_low": interval[0],
        "ci_high": interval[1],
        "p_value": p,
        "significant": None if p is None else p < ALPHA,
    }


def compare(
    pairs: Sequence[tuple[int, int]],
    rows: Sequence[dict[str, Any]],
    stats: Sequence[np.ndarray],
    resampled: list[np.ndarray] | None,
    config: EvalConfig,
    seed: tuple[int, ...],
) -> list[dict[str, Any]]:
    """One comparison row per pair on one group of sentences; p = 1 where the test is `degenerate`.

    rows: each system's score row of the group; stats: each system's (sentences, 10) BLEU statistics of
    the group; resampled: each system's BLEU on the group's shared resamples (None without resamples).
    """
    compared = []
    for i, j in pairs:
        differences = p = None
        if resampled is not None:
            differences = resampled[i] - resampled[j]
            delta = rows[i]["bleu"] - rows[j]["bleu"]
            if degenerate(delta, len(stats[i])):
                p = 1.0
            elif config.significance == "paired-bs":
                p = paired_bootstrap_p(differences, delta)
            else:  # the randomization trials draw from their own stream of the group's seed
                p = randomization_p(stats[i], stats[j], delta, config.bootstrap, (*seed, 1))
        compared.append(comparison_row(rows[i], rows[j], differences, p))
    return compared


def evaluate(
    systems: Sequence[System],
    references: Sequence[str],
    sources: Sequence[str] | None = None,
    *,
    by_length: bool = False,
    config: EvalConfig | None = None,
    references_path: str = "",
    sources_path: str = "",
    subsets: Sequence[Subset] = (),
    tokenised: Sequence[TokenisedBleu] = (),
) -> dict[str, Any]:
    """Score every system on all sentences and on each of `subsets`, overall and, with `by_length`, per
    length bucket, and compare each pair of systems (or each with `config.baseline`) on the same
    sentences; returns the report (see top). `tokenised`: the tokenised BLEUs to report beside
    sacrebleu's. `config.words_lang` is the bucketed side's language, for `eval.words: moses`;
    `config.lowercase` makes sacrebleu's BLEU and chrF case-insensitive (their signatures say case:lc)."""
    config = config or EvalConfig()
    baseline = config.baseline or None
    if not systems:
        raise UserError("no system to evaluate")
    check_lines(systems, references, sources, references_path, sources_path)
    check_labels([system.label for system in systems])
    for spec in tokenised:
        if spec.references is not None:
            check_aligned(
                spec.references_path or "the task's references",
                len(spec.references),
                references_path or "the references",
                len(references),
            )
    edges: list[int] = []
    buckets = None
    moses_words = words_unit(config, config.words_lang) if by_length else None
    if by_length:
        edges = check_edges(config.buckets)
        if config.bucket_by == "source" and sources is None:
            raise UserError("bucketing by source length (eval.bucket_by: source) needs the sources")
        lengths = word_counts(sources if config.bucket_by == "source" else references, moses_words)
        buckets = bucket_index(lengths, edges)
    labels = [bucket["label"] for bucket in bucket_labels(edges)] if edges else []
    every = Subset("all", "every sentence", np.arange(len(references)))

    pairs = comparison_pairs([system.label for system in systems], baseline)

    scorers = Scorers(references, tokenised, config.lowercase)
    stats = [scorers.stats(system.hypotheses) for system in systems]  # per system: {metric: (sentences, k)}
    by_subset = [  # the stats each subset's rows read: a system's own, or its outputs for that subset
        [
            scorers.stats(subset.outputs[system.label]) if system.label in subset.outputs else own
            for system, own in zip(systems, stats, strict=True)
        ]
        for subset in [every, *subsets]
    ]
    rows, comparisons = score_groups(by_subset, [every, *subsets], buckets, labels, pairs, scorers, config)
    groups = [("all", np.arange(len(references)))]
    if buckets is not None:
        groups += [(label, np.flatnonzero(buckets == i)) for i, label in enumerate(labels)]
    task_references = next((spec.references_path for spec in tokenised if spec.references is not None), "")
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "signatures": scorers.signatures(),
        "references": references_path or None,
        "task_references": task_references or None,
        "sources": sources_path or None,
        "bucket_by": config.bucket_by if by_length else None,
        "words": words_label(moses_words) if by_length else None,
        "edges": edges,
        "buckets": bucket_labels(edges) if edges else [],
        "subsets": [
            {"name": subset.name, "definition": subset.definition, "sentences": len(subset.members)}
            for subset in [every, *subsets]
        ],
        "bootstrap": {
            "resamples": config.bootstrap,
            "seed": config.seed,
            "confidence": CONFIDENCE,
            "method": "paired percentile",
        },
        "min_bucket_size": config.min_bucket_size,
        "systems": [
            {
                "label": system.label,
                "hypotheses": system.path or None,
                "sources_cut": system.sources_cut,
                "rows": system_rows,
            }
            for system, system_rows in zip(systems, rows, strict=True)
        ],
        "significance": {"test": config.significance, "alpha": ALPHA, "baseline": baseline},
        "comparisons": [
            {"system": systems[i].label, "baseline": systems[j].label, "rows": compared}
            for (i, j), compared in zip(pairs, comparisons, strict=True)
        ],
        "diagnostics": [
            {"label": system.label, "rows": diagnostics_rows(system, references, groups)}
            for system in systems
        ],
    }


def diagnostics_rows(
    system: System, references: Sequence[str], groups: Sequence[tuple[str, np.ndarray]]
) -> list[dict[str, Any]]:
    """The diagnostics of one system (diagnostics.py) for each (bucket label, its sentences)."""
    attention = system.attention or [None] * len(references)
    counts = [
        sentence_counts(hypothesis, reference, read)
        for hypothesis, reference, read in zip(system.hypotheses, references, attention, strict=True)
    ]
    has_attention = system.attention is not None
    return [bucket_row(label, [counts[i] for i in members], has_attention) for label, members in groups]


def score_groups(
    by_subset: list[list[dict[str, np.ndarray]]],
    subsets: Sequence[Subset],
    buckets: np.ndarray | None,
    labels: Sequence[str],
    pairs: list[tuple[int, int]],
    scorers: Scorers,
    config: EvalConfig,
) -> tuple[list[list[dict[str, Any]]], list[list[dict[str, Any]]]]:
    """The score rows of each system and the rows of each compared pair, for every group (all sentences,
    then each bucket) of every subset; each group draws its own seeded, paired resamples (see top).
    by_subset[k][i]: system i's sentence statistics for the rows of subset k."""
    rows: list[list[dict[str, Any]]] = [[] for _ in by_subset[0]]
    comparisons: list[list[dict[str, Any]]] = [[] for _ in pairs]
    for subset_number, (subset, stats) in enumerate(zip(subsets, by_subset, strict=True)):
        for number, (label, members) in enumerate(groups(subset, buckets, labels)):
            seed = (config.seed, subset_number, number)
            bleu_stats = [system_stats["bleu"][members] for system_stats in stats]  # each (members, 10)
            resampled = None
            if config.bootstrap and len(members):
                resampled = bootstrap_bleu(bleu_stats, config.bootstrap, seed)
            group_rows = []
            for i, system_stats in enumerate(stats):
                interval = percentile_interval(resampled[i]) if resampled else (None, None)
                sliced = {name: values[members] for name, values in system_stats.items()}
                group_rows.append(
                    score_row(subset.name, label, scorers, sliced, interval, config.min_bucket_size)
                )
                rows[i].append(group_rows[-1])
            for k, row in enumerate(compare(pairs, group_rows, bleu_stats, resampled, config, seed)):
                comparisons[k].append(row)
    return rows, comparisons
