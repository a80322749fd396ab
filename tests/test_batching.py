"""Bucketed batches: budget respected, low padding, deterministic, resumable, sharded without overlap."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from seq2seq_attn.training.batches import Joining, TrainingBatches, length_order, plan_epoch, shard
from seq2seq_attn.training.graphs import PaddedShapes
from seq2seq_attn.vocab.batching import collate


class Side:
    """A stand-in for one side of the token cache: lengths + indexable id arrays."""

    def __init__(self, lengths: np.ndarray, offset: int) -> None:
        self.lengths = lengths
        self.seqs = [np.arange(n, dtype=np.int32) % 50 + 4 + offset for n in lengths]

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.seqs[i]


class Cache:
    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        # skewed lengths: most short, a long tail, as in real corpora
        src = np.clip(rng.lognormal(2.5, 0.7, n).astype(np.int32), 1, 120)
        tgt = np.clip((src * rng.uniform(0.8, 1.3, n)).astype(np.int32), 1, 150)
        self.src, self.tgt = Side(src, 0), Side(tgt, 1)


def padding_ratio(cache: Cache, batches: list[np.ndarray]) -> float:
    real = padded = 0
    for b in batches:
        s, t = cache.src.lengths[b] + 1, cache.tgt.lengths[b] + 1
        real += int(s.sum() + t.sum())
        padded += len(b) * int(s.max() + t.max())
    return 1 - real / padded


def test_token_budget_and_low_padding_on_skewed_lengths():
    cache = Cache(5000)
    idx = np.arange(5000)
    batches, _ = plan_epoch(cache.src.lengths, cache.tgt.lengths, idx, "tokens", 2000, 50, seed=1, epoch=0)
    for b in batches:
        width = int(cache.src.lengths[b].max() + cache.tgt.lengths[b].max()) + 2
        assert width * len(b) <= 2000 or len(b) == 1
    assert sorted(np.concatenate(batches).tolist()) == idx.tolist()  # every example exactly once
    assert padding_ratio(cache, batches) < 0.15  # stated bound: under 15% padded positions
    # without sorting (pool of one batch) padding is far higher: the bucketing is what keeps it low
    unsorted, _ = plan_epoch(cache.src.lengths, cache.tgt.lengths, idx, "sentences", 64, 1, seed=1, epoch=0)
    assert padding_ratio(cache, unsorted) > 0.3


def test_pairs_sort_by_their_longer_side_then_their_total():
    src, tgt = np.array([5, 2, 9, 3, 4, 3]), np.array([1, 7, 2, 4, 4, 3])
    # longer sides 5 7 9 4 4 3; the two of 4 by total: (3, 4) = 7 before (4, 4) = 8
    assert length_order(src, tgt).tolist() == [5, 3, 4, 0, 1, 2]
    ties = np.array([2, 2, 2])  # stable: equal pairs keep their (shuffled) order
    assert length_order(ties, ties).tolist() == [0, 1, 2]


def test_both_sides_keep_little_padding():
    """Sorted by the source alone, the target side (where the decoder spends an update) keeps the padding
    that the source/target length ratio spreads; sorted by the longer side, both sides stay low."""
    cache = Cache(6400)
    src, tgt = cache.src.lengths, cache.tgt.lengths
    batches, _ = plan_epoch(src, tgt, np.arange(6400), "sentences", 64, 100, seed=1, epoch=0)

    def padding(side: np.ndarray, plan: list[np.ndarray]) -> float:
        return 1 - sum(int(side[b].sum()) + len(b) for b in plan) / sum(
            len(b) * int(side[b].max() + 1) for b in plan
        )

    by_source = np.argsort(src, kind="stable")
    source_only = [by_source[i : i + 64] for i in range(0, 6400, 64)]
    assert padding(tgt, batches) < 0.12 and padding(src, batches) < 0.12
    assert padding(tgt, source_only) > 2 * padding(tgt, batches)
    assert padding_ratio(cache, batches) < padding_ratio(cache, source_only)


def test_sentence_batches_and_max_len_filter():
    cache = Cache(1000)
    stream = TrainingBatches(cache, "sentences", 80, max_len=30, bucket_pool=10, seed=3)
    batch = next(iter(stream))
    assert batch.src.shape[0] == 80
    seen = np.concatenate(stream._epoch_plan())
    assert (cache.src.lengths[seen] <= 30).all() and (cache.tgt.lengths[seen] <= 30).all()
    assert len(seen) == int(((cache.src.lengths <= 30) & (cache.tgt.lengths <= 30)).sum())


def test_plan_is_deterministic_per_seed_and_epoch():
    cache = Cache(2000)
    idx = np.arange(2000)

    def plan(seed: int, epoch: int) -> list[np.ndarray]:
        return plan_epoch(cache.src.lengths, cache.tgt.lengths, idx, "tokens", 1500, 20, seed, epoch)[0]

    same = [a.tolist() for a in plan(1, 0)] == [b.tolist() for b in plan(1, 0)]
    assert same
    assert [a.tolist() for a in plan(1, 0)] != [b.tolist() for b in plan(1, 1)]
    assert [a.tolist() for a in plan(1, 0)] != [b.tolist() for b in plan(2, 0)]


def test_collate_adds_eos_bos_and_pads():
    batch = collate([np.array([5, 6]), np.array([7])], [np.array([8, 9, 10]), np.array([11])])
    assert batch.src.tolist() == [[5, 6, 3], [7, 3, 0]]
    assert batch.src_lengths.tolist() == [3, 2]
    assert batch.tgt_in.tolist() == [[2, 8, 9, 10], [2, 11, 0, 0]]
    assert batch.tgt_out.tolist() == [[8, 9, 10, 3], [11, 3, 0, 0]]
    assert batch.n_tokens == 6
    assert batch.n_padded == 2 * (3 + 4)


def test_stream_resumes_at_the_same_batch_across_epochs():
    cache = Cache(600)
    make = lambda: TrainingBatches(cache, "tokens", 800, max_len=200, bucket_pool=5, seed=7)  # noqa: E731
    full = make()
    reference = [b.src.tolist() for b in itertools.islice(iter(full), len(full) + 7)]  # crosses an epoch
    first = make()
    head = [b.src.tolist() for b in itertools.islice(iter(first), len(first) - 3)]
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    tail = [b.src.tolist() for b in itertools.islice(iter(resumed), 10)]
    assert head + tail == reference


def test_a_resume_under_other_batching_settings_starts_the_next_epoch(capsys):
    """The saved (epoch, index) is a place in the plan of the settings that made it: under another batch
    size it pointed into another plan, skipping or repeating pairs of the epoch. The stream says so and
    starts the next epoch; under the same settings it takes up the saved place."""
    cache = Cache(600)
    make = lambda size: TrainingBatches(cache, "tokens", size, max_len=200, bucket_pool=5, seed=7)  # noqa: E731
    first = make(800)
    list(itertools.islice(iter(first), 3))
    resumed = make(2000)
    resumed.load_state_dict(first.state_dict())
    assert "training goes on from the start of epoch 1" in capsys.readouterr().err
    fresh = make(2000)
    fresh.load_state_dict({"epoch": 1, "index": 0})
    assert next(iter(resumed)).src.tolist() == next(iter(fresh)).src.tolist()
    again = make(800)
    again.load_state_dict(first.state_dict())
    assert (again.epoch, again.index) == (0, 3) and capsys.readouterr().err == ""


@pytest.mark.parametrize("world_size", [2, 3])
def test_shards_do_not_overlap_and_have_equal_length(world_size):
    batches = [np.array([i]) for i in range(10)]
    shards = [shard(batches, r, world_size) for r in range(world_size)]
    assert len({len(s) for s in shards}) == 1
    flat = [int(b[0]) for s in shards for b in s]
    assert len(flat) == len(set(flat)) == 10 - 10 % world_size


def test_joined_pairs_fit_max_len_and_use_every_pair_once():
    cache = Cache(3000)
    idx = np.arange(3000)[(cache.src.lengths <= 60) & (cache.tgt.lengths <= 60)]
    joining = Joining(share=0.5, most=3, max_len=60)
    batches, examples = plan_epoch(
        cache.src.lengths, cache.tgt.lengths, idx, "tokens", 3000, 20, 1, 0, joining
    )
    sizes = [len(pairs) for pairs in examples]
    assert set(sizes) == {1, 2, 3} and 0.2 < sizes.count(1) / len(sizes) < 0.8
    assert sorted(np.concatenate(examples).tolist()) == sorted(idx.tolist())  # each pair once
    for pairs in examples:
        assert cache.src.lengths[pairs].sum() <= 60 and cache.tgt.lengths[pairs].sum() <= 60
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(examples)))  # each example once
    again, same = plan_epoch(cache.src.lengths, cache.tgt.lengths, idx, "tokens", 3000, 20, 1, 0, joining)
    assert [a.tolist() for a in again] == [b.tolist() for b in batches]
    assert [a.tolist() for a in same] == [b.tolist() for b in examples]
    plain, none = plan_epoch(cache.src.lengths, cache.tgt.lengths, idx, "tokens", 3000, 20, 1, 0)
    assert none is None and plain != batches


def test_a_joined_example_is_its_pairs_one_after_another():
    cache = Cache(400)
    stream = TrainingBatches(cache, "sentences", 400, max_len=80, bucket_pool=1, seed=2, concat_share=1.0)
    batch = next(iter(stream))
    examples = stream._examples
    assert sum(len(pairs) >= 2 for pairs in examples) > 0.8 * len(examples)  # share 1: joined unless too long
    plan = stream._epoch_plan()[0]
    first = examples[plan[0]]
    src = np.concatenate([cache.src[i] for i in first])
    assert batch.src[0, : len(src)].tolist() == src.tolist() and batch.src[0, len(src)] == 3  # then EOS
    assert int(batch.src_lengths[0]) == len(src) + 1


def test_a_stream_with_joined_pairs_resumes_at_the_same_batch():
    cache = Cache(600)
    make = lambda: TrainingBatches(  # noqa: E731
        cache, "tokens", 800, max_len=200, bucket_pool=5, seed=7, concat_share=0.3, concat_max=3
    )
    full = make()
    reference = [b.src.tolist() for b in itertools.islice(iter(full), len(full) + 7)]  # crosses an epoch
    first = make()
    head = [b.src.tolist() for b in itertools.islice(iter(first), len(first) - 3)]
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    tail = [b.src.tolist() for b in itertools.islice(iter(resumed), 10)]
    assert head + tail == reference


@pytest.mark.parametrize(("batch_type", "size"), [("tokens", 2000), ("sentences", 64)])
def test_batches_padded_for_cuda_graphs_are_the_same_batches_in_fewer_shapes(batch_type, size):
    """With `pad_to` (train.cuda_graphs) an epoch holds the batches it holds without, each padded with
    empty sentences and padding positions to one of few shapes."""
    cache = Cache(5000)
    shapes = PaddedShapes(size if batch_type == "sentences" else None, 61)
    plain = TrainingBatches(cache, batch_type, size, max_len=60, bucket_pool=10, seed=3)
    padded = TrainingBatches(cache, batch_type, size, max_len=60, bucket_pool=10, seed=3, pad_to=shapes)
    seen, padded_seen = set(), set()
    for a, b in itertools.islice(zip(plain, padded, strict=True), len(plain)):
        rows, src_len, tgt_len = a.src.size(0), a.src.size(1), a.tgt_in.size(1)
        assert (b.src.size(0), b.src.size(1), b.tgt_in.size(1)) == shapes(rows, src_len, tgt_len)
        assert (b.n_sentences, b.n_tokens) == (rows, a.n_tokens)
        assert torch.equal(b.src[:rows, :src_len], a.src) and torch.equal(b.src_lengths[:rows], a.src_lengths)
        for name in ("tgt_in", "tgt_out"):
            assert torch.equal(getattr(b, name)[:rows, :tgt_len], getattr(a, name))
        assert (b.src[:rows, src_len:] == 0).all() and (b.tgt_out[:, tgt_len:] == 0).all()
        seen.add((rows, src_len, tgt_len))
        padded_seen.add(tuple(b.src.shape) + (b.tgt_in.size(1),))
    assert len(padded_seen) < len(seen) * 0.6
