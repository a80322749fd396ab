"""Beam search: greedy is beam 1, beam >= greedy, n-best, batch invariance, lengths, n-grams, stopping."""

from __future__ import annotations

import dataclasses
import inspect
import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import SEARCH_FAMILIES as FAMILIES
from helpers import SEARCH_VOCAB as VOCAB
from helpers import ScriptedModel, assert_search_is_batch_invariant, random_model, random_sources, tiny_config
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from seq2seq_attn.config import DecodeConfig, from_dict, override
from seq2seq_attn.decoding import search as search_module
from seq2seq_attn.decoding.ensemble import Ensemble
from seq2seq_attn.decoding.int8 import quantized
from seq2seq_attn.decoding.search import (
    COVERAGE_FLOOR,
    Rows,
    SearchModel,
    coverage_penalty,
    length_penalty,
    max_output_length,
    min_output_length,
    pad_sources,
    score_bound,
    translate_ids,
)
from seq2seq_attn.decoding.shortlist import Shortlisted
from seq2seq_attn.errors import UserError
from seq2seq_attn.model import build_model
from seq2seq_attn.model.recurrent import RecurrentStack
from seq2seq_attn.runs.shortlist_table import LexicalTable
from seq2seq_attn.vocab.pieces import BOS_ID, EOS_ID, PAD_ID, UNK_ID

PENALTIES = ["none", "average", "gnmt"]


def decode(**settings: object) -> DecodeConfig:
    return dataclasses.replace(DecodeConfig(), **settings)


@pytest.fixture(scope="module")
def copy_model() -> nn.Module:
    """A tiny model trained to copy its source (peaked distributions, like a trained system).

    Luong without input feeding trains fastest: its decoder has no Python time loop.
    """
    torch.manual_seed(0)
    fast = {
        "decoder": "luong",
        "attention": "general",
        "input_feeding": False,
        "hidden_size": 32,
        "decoder_hidden_size": 32,
    }
    model = build_model(tiny_config(model=fast).model, VOCAB, VOCAB)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    rng = random.Random(1)
    for _ in range(150):
        batch = [[rng.randrange(4, 14) for _ in range(rng.randint(1, 6))] for _ in range(32)]
        width = max(map(len, batch)) + 1
        src = torch.tensor([s + [EOS_ID] + [PAD_ID] * (width - len(s) - 1) for s in batch])
        tgt_in = torch.tensor([[BOS_ID] + s + [PAD_ID] * (width - len(s) - 1) for s in batch])
        tgt_out = torch.tensor([s + [EOS_ID] + [PAD_ID] * (width - len(s) - 1) for s in batch])
        logits = model(src, torch.tensor([len(s) + 1 for s in batch]), tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def copy_sources(n: int, seed: int = 2) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, 14) for _ in range(rng.randint(1, 6))] for _ in range(n)]


@torch.no_grad()
def reference_greedy(model: nn.Module, ids: list[int], max_len: int) -> tuple[list[int], float]:
    """Greedy decoding written independently of search.py: argmax over model.step until EOS or max_len."""
    enc = model.encode(torch.tensor([ids + [EOS_ID]]), torch.tensor([len(ids) + 1]))
    state, token, out, total = model.init_state(enc), BOS_ID, [], 0.0
    for step in range(max_len + 1):
        log_probs, state, _ = model.step(enc, state, torch.tensor([token]))
        log_probs = log_probs[0].clone()
        log_probs[[PAD_ID, BOS_ID]] = float("-inf")
        token = EOS_ID if step == max_len else int(log_probs.argmax())
        total += float(log_probs[token])
        if token == EOS_ID:
            return out, total
        out.append(token)
    raise AssertionError("unreachable: EOS is forced at max_len")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f["decoder"] + "-" + f["attention"])
@pytest.mark.parametrize("penalty", PENALTIES)
def test_beam_one_is_greedy(family: dict, penalty: str) -> None:
    model = random_model(1, **family)
    srcs = random_sources(12, seed=3)
    cfg = decode(beam_size=1, length_penalty=penalty, max_len_a=1.0, max_len_b=4)
    results = translate_ids(model, srcs, cfg, "cpu")
    for ids, (hyp,) in zip(srcs, results, strict=True):
        tokens, log_prob = reference_greedy(model, ids, int(1.0 * len(ids) + 4))
        assert hyp.tokens == tokens
        assert hyp.log_prob == pytest.approx(log_prob, rel=1e-5)
        assert hyp.score == pytest.approx(
            log_prob / length_penalty(len(tokens) + 1, penalty, cfg.alpha), rel=1e-5
        )


@pytest.mark.parametrize("penalty", PENALTIES)
def test_beam_is_never_worse_than_greedy_and_nbest_is_sorted_and_distinct(
    copy_model: nn.Module, penalty: str
):
    srcs = copy_sources(40)
    greedy = translate_ids(copy_model, srcs, decode(beam_size=1, length_penalty=penalty), "cpu")
    beam = translate_ids(copy_model, srcs, decode(beam_size=4, nbest=4, length_penalty=penalty), "cpu")
    copied = sum(g[0].tokens == s for g, s in zip(greedy, srcs, strict=True))
    assert copied >= 20  # the model did learn to copy
    for (g,), nbest in zip(greedy, beam, strict=True):
        # beam search runs 4 rows per sentence where greedy runs 1: fp32 products of other shapes round
        # differently, so the same hypothesis may score up to ~1e-5 (relative) lower than greedy's
        assert nbest[0].score >= g.score - 1e-4 * abs(g.score)
        scores = [h.score for h in nbest]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in nbest}) == len(nbest) == 4


@pytest.mark.parametrize("family", FAMILIES[:2], ids=lambda f: f["decoder"])
def test_translation_does_not_depend_on_batch_size_or_neighbours(family: dict) -> None:
    assert_search_is_batch_invariant(random_model(2, **family), "cpu")


@pytest.mark.parametrize(("precision", "dtype"), [("bf16", torch.bfloat16), ("auto", torch.float32)])
def test_precision_runs_the_search_in_bf16_when_asked(copy_model, precision: str, dtype) -> None:
    """decode.precision=bf16 runs the model under bf16 autocast (auto is fp32 on CPU); nearly all of the
    copy task's translations survive the lower precision, with scores close to fp32's."""
    seen: list[torch.dtype] = []
    hook = copy_model.decoder.output.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    srcs = copy_sources(12)
    try:
        searched = translate_ids(copy_model, srcs, decode(beam_size=3, precision=precision), "cpu")
    finally:
        hook.remove()
    assert set(seen) == {dtype}
    exact = translate_ids(copy_model, srcs, decode(beam_size=3, precision="fp32"), "cpu")
    same = [low[0] for low, full in zip(searched, exact, strict=True) if low[0].tokens == full[0].tokens]
    assert len(same) >= 10  # bf16 keeps 8 bits of mantissa: a rare near-tie may go the other way
    for low, full in zip(searched, exact, strict=True):
        if low[0].tokens == full[0].tokens:
            # logits of magnitude ~10-20 keep about 3 significant digits in bf16: a token that is not
            # near-certain may move its log-probability by several hundredths
            assert low[0].score == pytest.approx(full[0].score, abs=0.1)


@pytest.mark.parametrize(("min_len", "max_len_a", "max_len_b"), [(0, 0.0, 3), (4, 0.5, 2), (9, 0.0, 5)])
def test_output_lengths_respect_min_and_max(min_len: int, max_len_a: float, max_len_b: int) -> None:
    model = random_model(4)
    srcs = random_sources(10, seed=7)
    cfg = decode(beam_size=3, nbest=3, min_len=min_len, max_len_a=max_len_a, max_len_b=max_len_b)
    for ids, nbest in zip(srcs, translate_ids(model, srcs, cfg, "cpu"), strict=True):
        longest = int(max_len_a * len(ids) + max_len_b)
        for hyp in nbest:
            assert min(min_len, longest) <= len(hyp.tokens) <= longest  # the maximum wins over the minimum
            assert not {PAD_ID, BOS_ID, EOS_ID} & set(hyp.tokens)


def test_minimum_length_relative_to_the_source() -> None:
    """decode.min_len_a: no EOS before ceil(a * source length) tokens (GroundHog's rule with a = 0.5, with
    its bound of 3n + 2 tokens), unless the maximum is shorter."""
    model = random_model(4)
    with torch.no_grad():
        model.decoder.output.bias[EOS_ID] += 4.0  # a model that likes to stop early
    srcs = random_sources(12, seed=9, longest=16)
    shortest = lambda cfg: [  # noqa: E731
        (len(ids), min(len(h.tokens) for h in nbest))
        for ids, nbest in zip(srcs, translate_ids(model, srcs, cfg, "cpu"), strict=True)
    ]
    groundhog = {"beam_size": 3, "nbest": 3, "max_len_a": 3.0, "max_len_b": 2, "length_penalty": "none"}
    assert any(got < math.ceil(1.5 * n) for n, got in shortest(decode(**groundhog)))  # the test can fail
    for a in (0.5, 1.5):
        assert all(got >= math.ceil(a * n) for n, got in shortest(decode(**groundhog, min_len_a=a)))
    capped = decode(beam_size=2, min_len=1, min_len_a=2.0, max_len_a=1.0, max_len_b=1)
    assert all(got == n + 1 for n, got in shortest(capped))  # the maximum wins


@pytest.mark.parametrize(
    ("setting", "src_len", "expected"),
    [("min_len_a", 50, 55), ("min_len_a", 100, 110), ("max_len_a", 100, 29 + 1), ("max_len_a", 7, 2 + 1)],
)
def test_length_rules_take_the_rate_as_the_decimal_written(setting: str, src_len: int, expected: int) -> None:
    """1.1 * 50 is 55.00000000000001 in floats and 0.29 * 100 + 1 is 29.999999999999996: the bounds are
    ceil(1.1 * 50) = 55 and floor(0.29 * 100) + 1 = 30, not a token off."""
    rate = {"min_len_a": 1.1, "max_len_a": 0.29}[setting]
    cfg = decode(**{setting: rate, "max_len_b": 1})
    bound = min_output_length if setting == "min_len_a" else max_output_length
    assert bound(src_len, cfg) == expected


def ngrams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_repeat_ngram_blocks_repeats(n: int) -> None:
    model = random_model(5)
    srcs = random_sources(10, seed=8)
    forced_long = {"beam_size": 3, "nbest": 3, "min_len": 100, "max_len_a": 2.0, "max_len_b": 6}
    repeated = lambda results: sum(  # noqa: E731
        len(set(ngrams(h.tokens, n))) < len(ngrams(h.tokens, n)) for nbest in results for h in nbest
    )
    assert repeated(translate_ids(model, srcs, decode(**forced_long), "cpu")) > 0  # the test can fail
    assert repeated(translate_ids(model, srcs, decode(**forced_long, no_repeat_ngram=n), "cpu")) == 0


class CountingModel(nn.Module):
    """Wraps a model and records how many state rows and encoder rows each decoder step gets."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.rows, self.encoder_rows = inner, [], []

    def encode(self, src, src_lengths):
        return self.inner.encode(src, src_lengths)

    def init_state(self, enc):
        return self.inner.init_state(enc)

    def step(self, enc, state, y_prev):
        self.rows.append(len(y_prev))
        self.encoder_rows.append(len(enc.annotations))
        return self.inner.step(enc, state, y_prev)


def test_finished_sentences_leave_the_batch() -> None:
    counting = CountingModel(random_model(6))
    srcs = [[5] * n for n in (1, 3, 4, 8)]
    k, cfg = 3, decode(beam_size=3, min_len=100, max_len_a=1.0, max_len_b=1)  # every sentence runs to a*len+b
    translate_ids(counting, srcs, cfg, "cpu")
    max_lens = [len(s) + 1 for s in srcs]
    assert counting.rows == [k * sum(m >= step for m in max_lens) for step in range(max(max_lens) + 1)]
    # the beams of a sentence share its one encoder row (attention reads it for all k)
    assert counting.encoder_rows == [rows // k for rows in counting.rows]


class EncodeCounter(CountingModel):
    """Records the sentences of every search batch (one `encode` call each)."""

    def encode(self, src, src_lengths):
        self.encoder_rows.append(len(src))
        return self.inner.encode(src, src_lengths)

    def step(self, enc, state, y_prev):
        return self.inner.step(enc, state, y_prev)


@pytest.mark.parametrize(
    ("batch_tokens", "batch_sentences", "batches"),
    [(10**6, 3, [3, 3, 3, 1]), (10**6, 0, [10]), (4 * 3, 0, [1, 1, 2, 3, 3]), (4 * 3, 2, [1, 1, 2, 2, 2, 2])],
)
def test_search_batches_obey_both_the_token_and_the_sentence_limit(
    batch_tokens: int, batch_sentences: int, batches: list[int]
) -> None:
    """Sentences of 10, 9, 5, 5, 3 x 3 and 2 x 3 pieces (+ EOS), longest first; a batch may hold
    sentences x longest <= batch_tokens and at most batch_sentences of them (0: any number)."""
    counting = EncodeCounter(random_model(6))
    srcs = [[5] * n for n in (10, 9, 5, 5, 3, 3, 3, 2, 2, 2)]
    cfg = decode(
        beam_size=1, max_len_a=0.0, max_len_b=1, batch_tokens=batch_tokens, batch_sentences=batch_sentences
    )
    translate_ids(counting, srcs, cfg, "cpu")
    assert counting.encoder_rows == batches


def test_search_stops_once_no_open_hypothesis_can_win() -> None:
    # EOS is the likely first token; everything else is so unlikely that no continuation can catch up.
    model = ScriptedModel([{EOS_ID: 0.9, 5: 0.05}])
    cfg = decode(beam_size=3, length_penalty="gnmt", max_len_a=0.0, max_len_b=50)
    (best,) = translate_ids(model, [[7, 8]], cfg, "cpu")[0]
    assert best.tokens == []
    assert model.steps <= 3  # not 51


# Step 0: EOS 0.5 vs token 5 0.45 (EOS is the step's best candidate); then 5 is near certain until EOS is,
# at step 6. With per-token averaging the longer "5 5 5 5 5 5" scores better than the empty translation.
EARLY_EOS_SCRIPT = [{EOS_ID: 0.5, 5: 0.45}] + [{5: 0.999}] * 5 + [{EOS_ID: 0.999}]


@pytest.mark.parametrize(("penalty", "expected"), [("none", []), ("average", [5] * 6)])
def test_search_keeps_going_while_a_longer_hypothesis_can_still_win(
    penalty: str, expected: list[int]
) -> None:
    # Without normalisation the empty hypothesis wins at once; per-token averaging prefers "5 5 5 5 5 5".
    cfg = decode(beam_size=2, length_penalty=penalty, max_len_a=0.0, max_len_b=20)
    (best,) = translate_ids(ScriptedModel(EARLY_EOS_SCRIPT), [[7]], cfg, "cpu")[0]
    assert best.tokens == expected


def test_the_coverage_penalty_ranks_as_its_formula_says() -> None:
    """Wu et al. 2016, eq. 14: score = log p / lp + beta * sum_j log(min(c_j, 1)). The early EOS attends the
    first of three source pieces only; "5 5 5 5 5 5" attends all three. Without the penalty the early EOS
    wins (no length normalisation); with it, the hypothesis that covers the source does."""
    attend = [0, 1, 2, 0, 1, 2, 0]  # step t attends source piece attend[t] (one-hot)
    source = [7, 8, 9]
    cfg = decode(beam_size=2, nbest=2, length_penalty="none", max_len_a=0.0, max_len_b=20)
    plain = translate_ids(ScriptedModel(EARLY_EOS_SCRIPT, attend), [source], cfg, "cpu")[0]
    assert [h.tokens for h in plain] == [[], [5] * 6]
    beta = 0.2
    covered = translate_ids(
        ScriptedModel(EARLY_EOS_SCRIPT, attend),
        [source],
        dataclasses.replace(cfg, coverage_penalty=beta),
        "cpu",
    )[0]
    assert [h.tokens for h in covered] == [[5] * 6, []]
    by_tokens = {len(h.tokens): h for h in covered}
    # the early EOS: coverage (1, 0, 0) -> two pieces at the floor; the long one: (3, 2, 2) -> all capped at 1
    assert by_tokens[0].score == pytest.approx(by_tokens[0].log_prob + beta * 2 * math.log(COVERAGE_FLOOR))
    assert by_tokens[6].score == pytest.approx(by_tokens[6].log_prob)
    assert sorted(h.log_prob for h in covered) == pytest.approx(sorted(h.log_prob for h in plain))


def test_the_coverage_penalty_of_a_coverage():
    coverage = torch.tensor([0.5, 2.0, 0.0, 9.0])  # the last: the source EOS, not counted
    assert coverage_penalty(coverage, 3, 0.0) == 0.0
    expected = 0.3 * (math.log(0.5) + math.log(1.0) + math.log(COVERAGE_FLOOR))
    assert coverage_penalty(coverage, 3, 0.3) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("stopping", "nbest", "expected", "steps"),
    [
        ("bound", 1, [[5] * 6], 7),  # goes on while the open "5 ..." can still win
        ("top", 1, [[]], 1),  # OpenNMT-py's rule: the best candidate of step 0 is EOS, so it stops there
        ("top", 2, [[5] * 6, []], 7),  # ... but not before nbest hypotheses have ended
    ],
)
def test_stopping_rule_top_ends_a_sentence_when_its_best_candidate_ends(
    stopping: str, nbest: int, expected: list[list[int]], steps: int
) -> None:
    model = ScriptedModel(EARLY_EOS_SCRIPT)
    cfg = decode(beam_size=2, nbest=nbest, length_penalty="average", max_len_a=0.0, max_len_b=20)
    hyps = translate_ids(model, [[7]], dataclasses.replace(cfg, stopping=stopping), "cpu")[0]
    assert [h.tokens for h in hyps] == expected
    assert model.steps == steps


def test_both_stopping_rules_are_batch_invariant(copy_model) -> None:
    """Each stopping rule stops a sentence from its own rows only: alone and in a batch, the same n-best.
    (Which rule searches fewer rows depends on the model's numbers, so on a random model it depends on
    the CPU's rounding; the scripted test above pins the rules' behaviour.)"""
    srcs = random_sources(12, seed=5)
    for stopping in ("bound", "top"):
        cfg = decode(beam_size=4, stopping=stopping)
        together = translate_ids(copy_model, srcs, cfg, "cpu")
        alone = [translate_ids(copy_model, [s], cfg, "cpu")[0] for s in srcs]
        assert [h[0].tokens for h in together] == [h[0].tokens for h in alone]


@given(
    log_p=st.floats(-50, 0),
    drop=st.floats(0, 50),
    length=st.integers(0, 30),
    extra=st.integers(1, 30),
    max_len=st.integers(0, 60),
    penalty=st.sampled_from(PENALTIES),
    alpha=st.floats(0, 2),
    coverage=st.lists(st.floats(0, 5), min_size=1, max_size=8),
    beta=st.floats(0, 2),
)
def test_score_bound_is_an_upper_bound_on_every_completion(
    log_p, drop, length, extra, max_len, penalty, alpha, coverage, beta
):
    """Any completion (log p falls by `drop`, length grows by `extra`, within max_len, with any coverage)
    scores <= the bound: the coverage penalty is never above 0."""
    final_length = min(length + extra, max_len + 1)
    cfg = decode(length_penalty=penalty, alpha=alpha, coverage_penalty=beta)
    cp = coverage_penalty(torch.tensor(coverage), len(coverage), beta)
    completion = (log_p - drop) / length_penalty(final_length, penalty, alpha) + cp
    assert completion <= score_bound(log_p, max_len, cfg) + 1e-9


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"beam_size": 0}, "`decode.beam_size` must be a number >= 1, got 0"),
        ({"nbest": 3, "beam_size": 2}, "`decode.nbest` = 3 exceeds `decode.beam_size` = 2"),
        ({"max_len_b": 0}, "`decode.max_len_b` must be a number >= 1"),
        ({"min_len_a": -0.5}, "`decode.min_len_a` must be a number >= 0"),
    ],
)
def test_impossible_settings_are_refused_by_the_schema(settings: dict, message: str) -> None:
    """Search trusts its settings: the config schema refuses impossible ones, read from a file or given
    as command-line options (`config.override`)."""
    with pytest.raises(UserError, match=message):
        from_dict({"decode": settings})
    with pytest.raises(UserError, match=message):
        override(DecodeConfig(), settings, "decode.")


# ----------------------------------------------------------------------------------------------------------
# the authors' rules for a sentence with no translation (GroundHog's sample.py)

# 5 and 6 always outrank EOS, which a beam reaches only with a third slot: from beam 4 on (at step 0)
THIRD_EOS = [{5: 0.5, 6: 0.3, EOS_ID: 0.15}]


def searched(monkeypatch) -> list[tuple[int, bool, int]]:
    """Records (beam size, no_unk, sentences) of every search `translate_ids` runs."""
    calls: list[tuple[int, bool, int]] = []
    original = search_module.beam_search

    def spy(model, src, src_lengths, cfg, with_attention=False):
        calls.append((cfg.beam_size, cfg.no_unk, src.size(0)))
        return original(model, src, src_lengths, cfg, with_attention)

    monkeypatch.setattr(search_module, "beam_search", spy)
    return calls


def test_force_eos_ends_every_sentence_at_its_maximum_length(monkeypatch) -> None:
    calls = searched(monkeypatch)
    cfg = decode(beam_size=1, length_penalty="none", max_len_a=1.0, max_len_b=2)
    (best,) = translate_ids(ScriptedModel(THIRD_EOS), [[7, 8]], cfg, "cpu")[0]
    assert best.tokens == [5, 5, 5, 5]  # 1 * 2 + 2 tokens, then the forced EOS
    assert calls == [(1, False, 1)]


def test_retry_drops_unfinished_hypotheses_and_doubles_the_beam(monkeypatch) -> None:
    calls = searched(monkeypatch)
    cfg = decode(beam_size=1, length_penalty="none", max_len_a=1.0, max_len_b=2, at_max_len="retry")
    (best,) = translate_ids(ScriptedModel(THIRD_EOS), [[7, 8]], cfg, "cpu")[0]
    assert calls == [(1, False, 1), (2, False, 1), (4, False, 1)]  # beams 1 and 2 never take EOS
    assert best.tokens == [] and best.log_prob == pytest.approx(math.log(0.15))  # a real end, not forced


def test_retry_gives_up_at_a_beam_of_500_with_an_empty_translation(monkeypatch) -> None:
    calls = searched(monkeypatch)
    cfg = decode(beam_size=1, max_len_a=0.0, max_len_b=2, at_max_len="retry")
    (best,) = translate_ids(ScriptedModel([{5: 0.5, EOS_ID: 0.0}]), [[7]], cfg, "cpu")[0]
    assert [beam for beam, _, _ in calls] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert best.tokens == [] and best.score == -math.inf


def test_only_the_sentence_that_found_nothing_is_searched_again(monkeypatch) -> None:
    """[7] may have 2 tokens and ends only with beam 4; [7, 8, 9] may have 4, and EOS is certain at step 3.
    Batched, only the first goes on to beams 2 and 4, and both get what they get alone."""
    script = THIRD_EOS * 3 + [{EOS_ID: 0.9}]
    cfg = decode(beam_size=1, length_penalty="none", max_len_a=1.0, max_len_b=1, at_max_len="retry")
    calls = searched(monkeypatch)
    together = translate_ids(ScriptedModel(script), [[7], [7, 8, 9]], cfg, "cpu")
    assert calls == [(1, False, 2), (2, False, 1), (4, False, 1)]
    alone = [translate_ids(ScriptedModel(script), [src], cfg, "cpu")[0] for src in ([7], [7, 8, 9])]
    assert [[h.tokens for h in hyps] for hyps in together] == [[h.tokens for h in hyps] for hyps in alone]
    assert [hyps[0].tokens for hyps in together] == [[], [5, 5, 5]]


def test_no_unk_never_generates_unk_and_falls_back_to_allowing_it(monkeypatch) -> None:
    likes_unk = [{UNK_ID: 0.6, 5: 0.2, EOS_ID: 0.15}]
    cfg = decode(beam_size=1, length_penalty="none", max_len_a=0.0, max_len_b=3)
    (allowed,) = translate_ids(ScriptedModel(likes_unk), [[7]], cfg, "cpu")[0]
    (forbidden,) = translate_ids(
        ScriptedModel(likes_unk), [[7]], dataclasses.replace(cfg, no_unk=True), "cpu"
    )[0]
    assert allowed.tokens == [UNK_ID] * 3 and forbidden.tokens == [5] * 3
    calls = searched(monkeypatch)
    never_ends = dataclasses.replace(cfg, no_unk=True, at_max_len="retry")
    translate_ids(ScriptedModel([{UNK_ID: 0.6, EOS_ID: 0.0}]), [[7]], never_ends, "cpu")
    assert calls[:3] == [(1, True, 1), (1, False, 1), (2, False, 1)]  # <unk> allowed at the same beam first


@pytest.mark.parametrize("vocab", [7, 64, 200, 4000])
@pytest.mark.parametrize("k", [1, 2, 5])
def test_top_candidates_are_those_of_a_full_topk_bit_for_bit(vocab: int, k: int):
    """The blockwise selection returns what `topk` over every sum log_p + log p(token) returns: the same
    continuations in the same order with the same float values, also with empty slots, forbidden tokens
    and rows where only EOS is allowed (the maximum length)."""
    generator = torch.Generator().manual_seed(vocab * 10 + k)
    sentences = 6
    step_log_probs = torch.log_softmax(4 * torch.randn(sentences * k, vocab, generator=generator), dim=1)
    step_log_probs[:, : min(3, vocab)] = float("-inf")  # forbidden tokens
    step_log_probs[1, :] = float("-inf")  # a row forced to end: only EOS left
    step_log_probs[1, min(EOS_ID, vocab - 1)] = -0.5
    log_p = -torch.rand(sentences, k, generator=generator) * 10
    log_p[0, 1:] = float("-inf")  # the first step: one open slot
    full = (log_p.view(-1, 1) + step_log_probs).view(sentences, k * vocab).topk(k, dim=1)

    values, row, token = search_module.top_candidates(step_log_probs, log_p, k)
    index = (row - torch.arange(sentences).unsqueeze(1) * k) * vocab + token  # slot * V + token

    assert torch.equal(values, full.values)
    finite = values > float("-inf")
    assert torch.equal(index[finite], full.indices[finite])


def _search_with_matmul_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every decoder compute W E y + b by the matrix product, as training does."""
    monkeypatch.setattr(
        RecurrentStack, "static_gates", lambda self, embed, ids, embedded: self.project_static(embedded)
    )


@pytest.mark.parametrize("family", FAMILIES[:2], ids=["rnnsearch", "luong"])
def test_search_reads_the_input_gates_from_a_table_with_the_same_result(family, monkeypatch):
    """In search the decoder looks W E y + b up in a table of every target piece's row: the translations
    and their scores are those of the matrix product, and a change of the weights rebuilds the table."""
    model = random_model(seed=3, **family)
    sources = random_sources(8, seed=5)
    settings = DecodeConfig(beam_size=3, nbest=3)

    def searches() -> list[list[tuple[list[int], float]]]:
        found = translate_ids(model, sources, settings, "cpu")
        return [[(h.tokens, h.score) for h in hyps] for hyps in found]

    def same(a, b) -> bool:
        return all(
            [tokens for tokens, _ in x] == [tokens for tokens, _ in y]
            and [s for _, s in x] == pytest.approx([s for _, s in y], abs=1e-5)
            for x, y in zip(a, b, strict=True)
        )

    with_table = searches()
    _, table = model.decoder.rnn._gate_table
    assert table.shape == (VOCAB, model.decoder.rnn.rnn.weight_ih_l0.size(0))
    with torch.no_grad():
        model.decoder.embed.weight.mul_(3.0)  # a new model: the table must follow
    changed = searches()
    assert model.decoder.rnn._gate_table[1] is not table
    with monkeypatch.context() as patch:
        _search_with_matmul_gates(patch)
        changed_by_matmul = searches()
        with torch.no_grad():
            model.decoder.embed.weight.div_(3.0)
        by_matmul = searches()
    assert same(with_table, by_matmul) and same(changed, changed_by_matmul)
    assert not same(with_table, changed)


def _search_models() -> dict[str, nn.Module]:
    """Every class search calls, and their int8 copies: one model of each family, an ensemble of them, a
    shortlisted model, each as built and as `decode.precision: int8` copies it."""
    models = {"-".join(map(str, f.values())): random_model(**f) for f in FAMILIES}
    first = next(iter(models.values()))
    table = LexicalTable(
        np.tile(np.arange(4, 12, dtype=np.int32), (VOCAB, 1)), np.arange(4, 8, dtype=np.int32)
    )
    models["ensemble"] = Ensemble(list(models.values()))
    models["shortlisted"] = Shortlisted(first, table)
    models |= {
        f"int8 {name}": quantized(model) for name, model in list(models.items()) if name != "shortlisted"
    }
    models["int8 shortlisted"] = Shortlisted(quantized(first), table)
    return models


@pytest.mark.parametrize("name", list(_search_models()))
def test_every_model_search_calls_answers_the_search_model_interface(name):
    model = _search_models()[name]
    assert isinstance(model, SearchModel)
    for method in ("encode", "init_state", "step"):
        expected = list(inspect.signature(getattr(SearchModel, method)).parameters)[1:]
        assert list(inspect.signature(getattr(model, method)).parameters) == expected, method
    sources = random_sources(3, seed=1)
    src, lengths = pad_sources([sources], "cpu")
    with torch.no_grad():
        enc = model.encode(src, lengths)
        state = model.init_state(enc)
        assert isinstance(enc, Rows) and isinstance(state, Rows)
        log_probs, state, weights = model.step(enc, state, torch.full((3,), BOS_ID))
    assert log_probs.shape == (3, VOCAB) and weights.shape == (3, src.size(-1))
    assert isinstance(state, Rows) and torch.isfinite(log_probs.logsumexp(-1)).all()
    assert state.index_select(torch.tensor([2, 0])) is not None
