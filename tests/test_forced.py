"""The teacher-forced pass that scoring, alignment and the shortlist learner share (decoding/forced.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from seq2seq_attn.decoding.forced import by_source_length, by_tokens, forced_pass
from seq2seq_attn.decoding.search import evaluating
from seq2seq_attn.runs.run_folder import load_trained
from seq2seq_attn.vocab.pieces import BOS_ID, EOS_ID

SRC = [[5, 6, 7, 8, 9], [5], [10, 11], [12, 13, 14]]
TGT = [[4, 5], [6, 7, 8, 9, 10, 11], [12], []]


def test_batch_plans_cover_every_pair_once_in_their_order():
    lengths = [len(s) + len(t) + 2 for s, t in zip(SRC, TGT, strict=True)]
    batches = by_tokens(lengths, batch_tokens=20)
    assert sorted(i for batch in batches for i in batch) == [0, 1, 2, 3]
    assert [i for batch in batches for i in batch] == sorted(range(4), key=lambda i: -lengths[i])
    assert all(lengths[batch[0]] * len(batch) <= 20 for batch in batches if len(batch) > 1)
    assert by_tokens(lengths, batch_tokens=10_000, batch_sentences=3) == [[0, 1, 2], [3]]  # ties: stable
    assert by_source_length(SRC, size=2) == [[1, 2], [3, 0]]


def test_one_pass_gives_log_probs_and_attention_the_same_in_any_batching(tiny_run_dir: Path):
    model, _, _ = load_trained(tiny_run_dir)
    together = forced_pass(model, SRC, TGT, "cpu", [[0, 1, 2, 3]], log_probs=True, attention=True)
    alone = [
        forced_pass(model, [s], [t], "cpu", [[0]], log_probs=True, attention=True)[0]
        for s, t in zip(SRC, TGT, strict=True)
    ]
    for i, (pair, single) in enumerate(zip(together, alone, strict=True)):
        assert len(pair.log_probs) == len(TGT[i]) + 1  # EOS last
        assert all(value <= 0 for value in pair.log_probs)
        assert pair.attention.shape == (len(TGT[i]) + 1, len(SRC[i]) + 1)
        assert pair.attention.sum(axis=1) == pytest.approx(np.ones(len(TGT[i]) + 1), abs=1e-5)
        assert pair.log_probs == pytest.approx(single.log_probs, abs=1e-5)
        assert np.allclose(pair.attention, single.attention, atol=1e-6)


def test_the_log_probs_are_the_models_own_distribution_at_each_forced_step(tiny_run_dir: Path):
    model, _, _ = load_trained(tiny_run_dir)
    (pair,) = forced_pass(model, [SRC[0]], [TGT[0]], "cpu", [[0]], log_probs=True)
    assert pair.attention is None
    src = torch.tensor([SRC[0] + [EOS_ID]])  # EOS appended, as collate does
    tgt_in = torch.tensor([[BOS_ID] + TGT[0]])
    with torch.no_grad(), evaluating(model):
        expected = torch.log_softmax(model(src, torch.tensor([src.shape[1]]), tgt_in), dim=-1)[0]
    wanted = TGT[0] + [EOS_ID]
    assert pair.log_probs == pytest.approx([expected[i, y].item() for i, y in enumerate(wanted)], abs=1e-5)
    assert math.fsum(pair.log_probs) < 0


def test_the_pass_leaves_the_models_mode_as_it_found_it(tiny_run_dir: Path):
    model, _, _ = load_trained(tiny_run_dir)
    model.train()
    done: list[int] = []
    forced_pass(model, SRC, TGT, "cpu", by_source_length(SRC, size=3), log_probs=True, done=done.append)
    assert model.training and done == [3, 1]
    model.eval()
    forced_pass(model, SRC, TGT, "cpu", [[0, 1, 2, 3]], attention=True)
    assert not model.training
