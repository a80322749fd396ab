"""The long-sentence diagnostics (evaluation/metrics/diagnostics.py) on hand-made attention matrices."""

from __future__ import annotations

import math

import numpy as np
import pytest

from seq2seq_attn.evaluation.metrics.diagnostics import (
    DROPPED_BELOW,
    REPEATED_ABOVE,
    SentenceAttention,
    attention_counts,
    bucket_row,
    ngram_counts,
    piece_counts,
    sentence_counts,
)


def test_words_are_counted_from_the_word_start_marker():
    assert piece_counts(["▁the", "▁new", "ton", "▁law"]) == [1, 2, 1]
    assert piece_counts(["ton", "▁law"]) == [1, 1]  # a line that starts inside a word
    assert piece_counts([]) == []


def test_a_diagonal_attention_is_sharp_covers_every_word_once_and_never_jumps_back():
    entropy, dropped, repeated, backward = attention_counts(np.eye(4))
    assert (entropy, dropped, repeated, backward) == (0.0, 0, 0, 0)


def test_uniform_attention_has_entropy_one():
    entropy, dropped, _, _ = attention_counts(np.full((3, 5), 1 / 5))
    assert entropy == pytest.approx(1.0)
    assert dropped == 0  # each word gets 3 x 1/5 = 0.6 of the attention in all: above DROPPED_BELOW
    entropy, dropped, _, _ = attention_counts(np.full((2, 5), 1 / 5))
    assert dropped == 5  # 2 x 1/5 = 0.4 each


def test_coverage_finds_dropped_and_repeated_words_and_backward_jumps():
    # four output words over four source words: word 2 is never attended, word 0 three times, and the
    # third output word jumps back from word 1 to word 0
    weights = np.zeros((4, 4))
    weights[[0, 1, 2, 3], [0, 1, 0, 0]] = 1.0
    weights[3] = [0.2, 0.0, 0.0, 0.8]
    entropy, dropped, repeated, backward = attention_counts(weights)
    coverage = weights.sum(axis=0)  # [2.2, 1.0, 0.0, 0.8]
    assert dropped == int((coverage < DROPPED_BELOW).sum()) == 1
    assert repeated == int((coverage > REPEATED_ABOVE).sum()) == 1
    assert backward == 1  # argmax 0, 1, 0, 3: one step to the left
    row_entropy = -(0.2 * math.log(0.2) + 0.8 * math.log(0.8)) / math.log(4)
    assert entropy == pytest.approx(row_entropy / 4)


def test_repeated_ngrams_count_the_repeats_only():
    assert ngram_counts(["a", "b", "c", "a", "b", "c"], 3) == (4, 1)  # (a b c) again
    assert ngram_counts(["a", "b", "c", "d"], 3) == (2, 0)
    assert ngram_counts(["a", "b"], 3) == (0, 0)


def test_a_sentence_merges_pieces_into_words_as_alignment_does():
    # source "▁a ▁bc d" (2 words, 3 pieces) + EOS; target "▁x y ▁z" (2 words, 3 pieces) + EOS
    attention = np.array(
        [
            [1.0, 0.0, 0.0, 0.0],  # x -> a
            [0.0, 1.0, 0.0, 0.0],  # y -> bc
            [0.0, 0.5, 0.5, 0.0],  # z -> bc d (one word)
            [0.0, 0.0, 0.0, 1.0],  # EOS row: dropped
        ]
    )
    read = SentenceAttention(attention, ["▁a", "▁bc", "d"], ["▁x", "y", "▁z"])
    counts = sentence_counts("xy z", "xy z w", read)
    # target word "xy" is the mean of rows x and y: a 0.5, bc 0.5; "z": bc 1.0 -> coverage a 0.5, bc 1.5
    assert (counts.source_words, counts.dropped, counts.repeated, counts.backward) == (2, 0, 0, 0)
    assert counts.entropy == pytest.approx(0.5)  # (1 + 0) / 2 over log 2
    assert (counts.output_words, counts.reference_words, counts.steps) == (2, 3, 1)
    no_attention = sentence_counts("a b c a b c", "a b c")
    assert no_attention.entropy is None and no_attention.repeated_ngrams == 1


def test_a_bucket_pools_words_and_leaves_attention_measures_empty_without_attention():
    attention = np.array([[1.0, 0.0], [0.0, 1.0]])  # one source word + EOS, one target word + EOS
    one = sentence_counts("x", "x y", SentenceAttention(attention, ["▁a"], ["▁x"]))
    row = bucket_row("0-10", [one, one], attention=True)
    assert row == {
        "bucket": "0-10",
        "count": 2,
        "entropy": 0.0,
        "dropped": 0.0,
        "repeated": 0.0,
        "backward": None,  # one-word outputs: no step to jump from
        "repeated_ngrams": None,  # no trigram
        "length_ratio": 0.5,
    }
    # an empty output attended to no source word: all dropped, and no entropy to average in
    empty = sentence_counts("", "x y", SentenceAttention(np.array([[0.5, 0.5]]), ["▁a"], []))
    both = bucket_row("0-10", [one, empty], attention=True)
    assert (both["entropy"], both["dropped"]) == (0.0, 0.5)
    hyp_only = bucket_row("all", [sentence_counts("x y z x y z", "x y z")], attention=False)
    assert hyp_only["entropy"] is None and hyp_only["dropped"] is None
    assert hyp_only["repeated_ngrams"] == 0.25 and hyp_only["length_ratio"] == 2.0
