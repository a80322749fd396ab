"""Bootstrap resampling of corpus BLEU from sacrebleu's per-sentence sufficient statistics.

sacrebleu's per-sentence statistics (hypothesis and reference lengths, n-gram matches and totals) are
extracted once. A resample of a set of sentences is then a count-weighted sum of those rows, and corpus
BLEU of all resamples is recomputed at once with numpy, instead of once per resample in Python. The
paired significance tests of sacrebleu (`--paired-bs`, `--paired-ar`) are computed the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

CONFIDENCE = 0.95
MAX_DRAWS = 1 << 22  # sentence draws held in memory at once by the bootstrap (~32 MiB of int64)


def sentence_stats(metric: BLEU | CHRF, hypotheses: Sequence[str]) -> np.ndarray:
    """Per-sentence sufficient statistics, (sentences, k), against the references cached in `metric`.

    `_extract_corpus_statistics` is the hook sacrebleu's own significance tests use for this. The tests
    check that summed rows reproduce `corpus_bleu` and `corpus_chrf`, so a change in sacrebleu fails a
    test rather than silently changing scores. BLEU's row is [hyp_len, ref_len, matches_1..4, totals_1..4].
    """
    return np.asarray(metric._extract_corpus_statistics(list(hypotheses), None), dtype=np.int64)


def bleu_scores(stats: np.ndarray, max_order: int = 4) -> np.ndarray:
    """Corpus BLEU of each row of summed BLEU statistics (rows, 2 + 2*max_order), as sacrebleu's default.

    BLEU = BP * exp(mean_n log p_n), BP = min(1, exp(1 - r/c)) (Papineni et al. 2002). Smoothing is
    sacrebleu's default "exp" (NIST mteval-v13a): the k-th order with no match gets p_n = 1 / (2^k total_n).
    """
    hyp_len, ref_len = stats[:, 0], stats[:, 1]  # (rows,)
    matches, totals = stats[:, 2 : 2 + max_order], stats[:, 2 + max_order :]  # (rows, max_order)
    with np.errstate(divide="ignore", invalid="ignore"):
        brevity = np.where(hyp_len >= ref_len, 1.0, np.exp(1 - ref_len / hyp_len))  # exp(-inf) = 0 if c = 0
        unmatched = matches == 0
        halvings = np.cumsum(unmatched, axis=1)
        precision = np.where(unmatched, 100.0 / (2.0**halvings * totals), 100.0 * matches / totals)
        score = brevity * np.exp(np.log(precision).sum(axis=1) / max_order)
    defined = (totals > 0).all(axis=1) & (~unmatched).any(axis=1)  # sacrebleu scores 0 otherwise
    return np.where(defined, score, 0.0)


def bootstrap_bleu(stats: Sequence[np.ndarray], resamples: int, seed: Sequence[int]) -> list[np.ndarray]:
    """BLEU of each system on the same `resamples` resamples, with replacement, of the sentences.

    stats: one (sentences, 10) BLEU statistics array per system, rows aligned across systems.
    """
    count = len(stats[0])
    rng = np.random.default_rng(list(seed))
    chunk = max(1, MAX_DRAWS // count)
    scores: list[list[np.ndarray]] = [[] for _ in stats]
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        draws = rng.integers(0, count, size=(size, count))  # (size, sentences): drawn sentence ids
        flat = (draws + count * np.arange(size)[:, None]).ravel()
        times = np.bincount(flat, minlength=size * count).reshape(size, count).astype(np.float64)
        for system_scores, system_stats in zip(scores, stats, strict=True):
            system_scores.append(bleu_scores(times @ system_stats))  # (size, 10) summed -> (size,)
    return [np.concatenate(system_scores) for system_scores in scores]


def percentile_interval(scores: np.ndarray) -> tuple[float, float]:
    """The central CONFIDENCE share of resampled scores: its (low, high) percentiles."""
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(scores, [tail, 100 - tail])
    return float(low), float(high)


# ----------------------------------------------------------------------------------------------------------
# paired significance tests, as sacrebleu's `--paired-bs` and `--paired-ar`

ALPHA = 0.05  # a difference with a p-value below this is marked significant


def p_value(null: np.ndarray, observed: float) -> float:
    """(#{null statistic > observed} + 1) / (n + 1), sacrebleu's (and multeval's) estimate."""
    return (int(np.count_nonzero(null > observed)) + 1) / (len(null) + 1)


def degenerate(observed: float, sentences: int) -> bool:
    """True where the paired tests cannot show a difference, whose p-value is then 1: none was observed
    (both systems write the same in a bucket), or there is one sentence (every resample is that sentence).

    Their nulls do not vary, so no null statistic exceeds the observation and sacrebleu's estimate would be
    its smallest, 1 / (n + 1): "significant". A null without spread from many sentences is no such case:
    each of them shows the same difference, and the estimate stands.
    """
    return observed == 0 or sentences < 2


def paired_bootstrap_p(differences: np.ndarray, observed: float) -> float:
    """sacrebleu's paired-bs p-value: resampled |BLEU(a) - BLEU(b)|, centred on its mean, is the null.

    differences: BLEU(a) - BLEU(b) on each paired resample (the same sentences for both systems);
    observed: the difference on the real data.
    """
    absolute = np.abs(differences)
    return p_value(absolute - absolute.mean(), abs(observed))


def randomization_p(stats_a: np.ndarray, stats_b: np.ndarray, observed: float, trials: int, seed) -> float:
    """sacrebleu's paired-ar p-value: each trial swaps each sentence's two outputs with probability 1/2.

    stats_a, stats_b: (sentences, 10) BLEU statistics of the two systems, rows aligned.
    """
    count = len(stats_a)
    rng = np.random.default_rng(list(seed))
    chunk = max(1, MAX_DRAWS // count)
    total_a, total_b = stats_a.sum(axis=0), stats_b.sum(axis=0)
    null = []
    for start in range(0, trials, chunk):
        swap = rng.integers(0, 2, size=(min(chunk, trials - start), count)).astype(np.float64)  # (size, n)
        # a trial's totals: A's statistics with the swapped rows' B - A added, and B's with them removed
        moved = swap @ (stats_b - stats_a)  # (size, 10); integer counts: exact in float64
        shuffled_a = bleu_scores(total_a + moved)  # (size,)
        shuffled_b = bleu_scores(total_b - moved)
        null.append(np.abs(shuffled_a - shuffled_b))
    return p_value(np.concatenate(null), abs(observed))
