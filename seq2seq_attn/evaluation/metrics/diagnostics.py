"""Why long sentences fail: what a system's own attention and output say, bucket by source length.

BLEU by length shows that a system fails on long sentences; these measures say how. Each is defined once
here and in docs/evaluation.md ("Diagnostics"), with how to read it. From the search's own attention
(the best hypothesis of each sentence, `Translation.hypotheses[0].attention`: no second pass), at the
level of whitespace words (`word_attention`, which `seq2seq align` uses too):

- `entropy`: the attention's entropy at each output word, H_t = -sum_w a_tw log a_tw, divided by
  log(n) for n source words (0: one word attended; 1: all alike), averaged over the output words;
- `dropped`: the share of source words whose coverage c_w = sum_t a_tw (the attention all output
  words paid it) is below DROPPED_BELOW: words the translation likely left out;
- `repeated`: the share of source words with c_w above REPEATED_ABOVE: attended again and again;
- `backward`: the share of output words whose most attended source word lies left of the previous
  output word's: how often attention jumps back (some jumps are reordering, many are repetition);

and from the output alone, for every system:

- `repeated_ngrams`: the share of an output's word n-grams (n = NGRAM) that occurred earlier in it;
- `length_ratio`: output words / reference words.

Per bucket the shares are pooled over the bucket's words (or n-grams), entropy is the mean over its
sentences, and the length ratio is the ratio of the sums, so a long sentence weighs as its words do.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...vocab.pieces import word_of_piece

DROPPED_BELOW = 0.5  # a source word whose coverage is below this was likely left untranslated
REPEATED_ABOVE = 2.0  # ... above this, translated more than once
NGRAM = 3  # the n of the repeated n-gram rate


def merge_matrix(counts: Sequence[int], mean: bool) -> np.ndarray:
    """(words, pieces): row w is 1 on the pieces of word w (1/its piece count with `mean`), 0 elsewhere."""
    owner = np.repeat(np.arange(len(counts)), counts)  # (pieces,): the word of each piece
    matrix = np.zeros((len(counts), len(owner)))
    matrix[owner, np.arange(len(owner))] = 1.0
    if mean:
        matrix /= np.maximum(matrix.sum(axis=1, keepdims=True), 1.0)
    return matrix


def word_attention(weights: np.ndarray, src_counts: Sequence[int], tgt_counts: Sequence[int]) -> np.ndarray:
    """Piece attention (target pieces [+ </s>], source pieces [+ </s>]) -> (target words, source words),
    given each word's number of pieces.

    Source side, the SUM over a word's pieces: alpha_t is a probability distribution over source
    positions, so the probability that step t attends to word w is the sum over w's pieces (the max would
    rank a word attended through several pieces below a one-piece word holding a smaller share). Target
    side, the MEAN over a word's pieces: each target piece has its own distribution over the source and
    their mean is one again, so a threshold means the same for a word of one piece and of five. The
    weight on the source </s> and the row that predicts the target </s> belong to no word: they are
    dropped (a row may then sum to less than 1)."""
    src = merge_matrix(src_counts, mean=False)  # (src words, src pieces)
    tgt = merge_matrix(tgt_counts, mean=True)  # (tgt words, tgt pieces)
    return tgt @ weights[: tgt.shape[1], : src.shape[1]] @ src.T


@dataclass(frozen=True)
class Diagnostic:
    """One measure of the diagnostics table: its key (JSON and CSV field), its table column and digits,
    and whether it needs attention (systems given as `--hyp` files have none)."""

    key: str
    header: str
    digits: int
    attention: bool


DIAGNOSTICS = (
    Diagnostic("entropy", "entropy", 3, True),
    Diagnostic("dropped", "dropped", 3, True),
    Diagnostic("repeated", "repeated", 3, True),
    Diagnostic("backward", "backward", 3, True),
    Diagnostic("repeated_ngrams", f"rep. {NGRAM}-grams", 3, False),
    Diagnostic("length_ratio", "len. ratio", 3, False),
)


@dataclass(frozen=True)
class SentenceAttention:
    """What the search attended for one sentence's best hypothesis: weights (target pieces + EOS, source
    pieces + EOS) and the pieces that label them (without EOS)."""

    weights: np.ndarray
    src_pieces: Sequence[str]
    tgt_pieces: Sequence[str]


@dataclass(frozen=True)
class SentenceCounts:
    """One sentence's counts, which a bucket sums (None: the system has no attention)."""

    entropy: float | None  # mean normalised entropy over the output words
    source_words: int
    dropped: int | None
    repeated: int | None
    steps: int  # output words after the first: where a backward jump can happen
    backward: int | None
    ngrams: int
    repeated_ngrams: int
    output_words: int
    reference_words: int


def piece_counts(pieces: Sequence[str]) -> list[int]:
    """The number of pieces of each word: a word starts at a piece that begins with `▁` (or the first)."""
    return list(collections.Counter(word_of_piece(pieces)).values())


def attention_counts(word_weights: np.ndarray) -> tuple[float | None, int, int, int]:
    """(mean normalised entropy, dropped words, repeated words, backward jumps) of one sentence's word
    attention (target words, source words). An empty output attended to nothing: every source word is
    dropped, and it has no entropy (None: left out of the bucket's mean)."""
    steps, words = word_weights.shape
    if steps == 0 or words == 0:
        return None, words, 0, 0
    rows = word_weights / np.maximum(word_weights.sum(axis=1, keepdims=True), 1e-12)
    plogp = np.where(rows > 0, rows * np.log(np.where(rows > 0, rows, 1.0)), 0.0)
    entropy = float((-plogp.sum(axis=1)).mean() / np.log(words)) if words > 1 else 0.0
    coverage = word_weights.sum(axis=0)  # (source words,)
    attended = word_weights.argmax(axis=1)  # (target words,)
    backward = int((np.diff(attended) < 0).sum())
    return entropy, int((coverage < DROPPED_BELOW).sum()), int((coverage > REPEATED_ABOVE).sum()), backward


def ngram_counts(words: Sequence[str], n: int = NGRAM) -> tuple[int, int]:
    """(n-grams, those that occurred earlier in the same output)."""
    seen: set[tuple[str, ...]] = set()
    repeats = 0
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    for gram in grams:
        repeats += gram in seen
        seen.add(gram)
    return len(grams), repeats


def sentence_counts(
    hypothesis: str, reference: str, attention: SentenceAttention | None = None
) -> SentenceCounts:
    """The counts of one sentence; without `attention` (a system without it, or an empty line) the
    attention measures are None."""
    words = hypothesis.split()
    grams, repeats = ngram_counts(words)
    entropy = dropped = repeated = backward = None
    source_words = steps = 0
    if attention is not None:
        src_counts, tgt_counts = piece_counts(attention.src_pieces), piece_counts(attention.tgt_pieces)
        source_words, steps = len(src_counts), max(len(tgt_counts) - 1, 0)
        weights = word_attention(attention.weights, src_counts, tgt_counts)
        entropy, dropped, repeated, backward = attention_counts(weights)
    return SentenceCounts(
        entropy,
        source_words,
        dropped,
        repeated,
        steps,
        backward,
        grams,
        repeats,
        len(words),
        len(reference.split()),
    )


def bucket_row(bucket: str, counts: Sequence[SentenceCounts], attention: bool) -> dict[str, Any]:
    """One row of the diagnostics table: the bucket's sentences pooled (module docstring); the attention
    measures of a system with `attention` (sentences without it, empty lines, are left out of them)."""
    attended = [c for c in counts if c.dropped is not None] if attention else []
    words = sum(c.source_words for c in attended)
    steps = sum(c.steps for c in attended)
    entropies = [c.entropy for c in attended if c.entropy is not None]
    row: dict[str, Any] = {"bucket": bucket, "count": len(counts)}
    row["entropy"] = float(np.mean(entropies)) if entropies else None
    row["dropped"] = _share(sum(c.dropped for c in attended), words) if attended else None
    row["repeated"] = _share(sum(c.repeated for c in attended), words) if attended else None
    row["backward"] = _share(sum(c.backward for c in attended), steps) if attended else None
    row["repeated_ngrams"] = _share(sum(c.repeated_ngrams for c in counts), sum(c.ngrams for c in counts))
    row["length_ratio"] = _share(sum(c.output_words for c in counts), sum(c.reference_words for c in counts))
    return row


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None
