"""Length-bucketed training batches over the memory-mapped token cache.

Why buckets: an RNN pays for every padded position, so sentences of similar length go together. We
shuffle the corpus, cut it into pools of `bucket_pool` batches, sort each pool by length, cut the pool
into batches (a token budget counts padded source + target positions, or a fixed number of sentences),
and shuffle the batches. Everything is a pure function of (seed, epoch), so the position in the data is
just (epoch, batch index): a resumed or sharded (DDP) run sees exactly the batches it would have seen (a
run resumed under other batching settings starts the next epoch).

Joined pairs (`train.concat_share`): walking the epoch's shuffled order, each position starts, with
probability `concat_share`, an example that joins the next 2 to `concat_max` pairs (their sources one
after another, and their targets) as long as both sides fit `max_len`; otherwise an example of one pair.
The draws come from their own generator seeded with (seed, epoch, JOIN_STREAM), so a run without joined
pairs gets the batches it always had, and a resumed run the same joined examples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..console import warn
from ..vocab.batching import Batch, Shape, collate


def usable_indices(src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_len: int) -> np.ndarray:
    """Training pairs whose both sides fit `max_len` tokens (the paper trains on <= 30 / <= 50 words)."""
    keep = (src_lengths <= max_len) & (tgt_lengths <= max_len) & (src_lengths > 0)
    return np.flatnonzero(keep)


JOIN_STREAM = 1  # the joined pairs' generator is seeded with (seed, epoch, JOIN_STREAM)


@dataclass(frozen=True)
class Joining:
    """`train.concat_share` and `train.concat_max`, and the `max_len` both sides of a joined example fit."""

    share: float = 0.0
    most: int = 3
    max_len: int = 0


def plan_epoch(
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    indices: np.ndarray,
    batch_type: str,
    batch_size: int,
    bucket_pool: int,
    seed: int,
    epoch: int,
    joining: Joining = Joining(),
) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """The epoch's batches, deterministic in (seed, epoch): arrays of example indices, and with joined
    pairs the examples (arrays of pair indices) those indices name; without, None: an example is a pair."""
    rng = np.random.default_rng([seed, epoch])
    order = indices[rng.permutation(len(indices))]
    examples = None
    if joining.share:
        examples = join_pairs(order, src_lengths, tgt_lengths, joining, [seed, epoch, JOIN_STREAM])
        src_lengths = np.array([src_lengths[pairs].sum() for pairs in examples], dtype=np.int64)
        tgt_lengths = np.array([tgt_lengths[pairs].sum() for pairs in examples], dtype=np.int64)
        order = np.arange(len(examples))
    mean_cost = float(np.mean(src_lengths[order] + tgt_lengths[order] + 2)) if len(order) else 1.0
    per_batch = batch_size if batch_type == "sentences" else max(1, int(batch_size / mean_cost))
    pool_size = per_batch * bucket_pool
    batches: list[np.ndarray] = []
    for start in range(0, len(order), pool_size):
        pool = order[start : start + pool_size]
        pool = pool[length_order(src_lengths[pool], tgt_lengths[pool])]
        batches.extend(cut_batches(pool, src_lengths, tgt_lengths, batch_type, batch_size))
    rng.shuffle(batches)
    return batches, examples


def join_pairs(
    order: np.ndarray, src_lengths: np.ndarray, tgt_lengths: np.ndarray, joining: Joining, seed: list[int]
) -> list[np.ndarray]:
    """The epoch's examples, each one pair or consecutive pairs of `order` joined (module docstring)."""
    rng = np.random.default_rng(seed)
    examples: list[np.ndarray] = []
    start = 0
    while start < len(order):
        end = start + 1
        if rng.random() < joining.share:
            wanted = int(rng.integers(2, joining.most + 1))
            src, tgt = int(src_lengths[order[start]]), int(tgt_lengths[order[start]])
            while end < min(start + wanted, len(order)):
                src, tgt = src + int(src_lengths[order[end]]), tgt + int(tgt_lengths[order[end]])
                if src > joining.max_len or tgt > joining.max_len:
                    break
                end += 1
        examples.append(order[start:end])
        start = end
    return examples


def length_order(src_lengths: np.ndarray, tgt_lengths: np.ndarray) -> np.ndarray:
    """The order that sorts pairs by their longer side, then by their total length; stable, so ties keep
    the order they came in (shuffled, in training).

    Why the longer side: the decoder's time loop runs once per target position of the batch's longest
    target and the encoder once per source position, padding included. Sorted by the source alone, about
    a quarter of the target positions of en-fr batches are padding, where the decoder spends most of an
    update; sorted by the longer side, both sides' padding stays small (docs/performance.md).
    """
    return np.lexsort((src_lengths + tgt_lengths, np.maximum(src_lengths, tgt_lengths)))


def cut_batches(
    pool: np.ndarray, src_lengths: np.ndarray, tgt_lengths: np.ndarray, batch_type: str, batch_size: int
) -> list[np.ndarray]:
    """Cut a length-sorted pool into batches under the size budget (one pass)."""
    if batch_type == "sentences":
        return [pool[i : i + batch_size] for i in range(0, len(pool), batch_size)]
    batches, start, src_max, tgt_max = [], 0, 0, 0
    for i, example in enumerate(pool):
        src_len, tgt_len = int(src_lengths[example]) + 1, int(tgt_lengths[example]) + 1  # + EOS / BOS
        width = max(src_max, src_len) + max(tgt_max, tgt_len)  # padded positions per row if added
        if i > start and width * (i - start + 1) > batch_size:
            batches.append(pool[start:i])
            start, src_max, tgt_max = i, 0, 0
        src_max, tgt_max = max(src_max, src_len), max(tgt_max, tgt_len)
    if start < len(pool):
        batches.append(pool[start:])
    return batches


def shard(batches: list[np.ndarray], rank: int, world_size: int) -> list[np.ndarray]:
    """Rank `rank`'s share under DDP: every world_size-th batch, truncated so all ranks step together."""
    usable = len(batches) - len(batches) % world_size
    return batches[rank:usable:world_size]


class TrainingBatches:
    """Endless, resumable iterator of training batches; its position is (epoch, index within epoch)."""

    def __init__(
        self,
        cache,
        batch_type: str,
        batch_size: int,
        max_len: int,
        bucket_pool: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        pin: bool = False,
        concat_share: float = 0.0,
        concat_max: int = 3,
        pad_to: Callable[[int, int, int], Shape] | None = None,
    ) -> None:
        """pad_to: each batch padded to the shape it gives (`collate`), for updates in CUDA graphs."""
        self.cache = cache
        self.pad_to = pad_to
        self.settings = (batch_type, batch_size, bucket_pool, seed)
        self.joining = Joining(concat_share, concat_max, max_len)
        self.rank, self.world_size, self.pin = rank, world_size, pin
        self.src_lengths = np.asarray(cache.src.lengths)
        self.tgt_lengths = np.asarray(cache.tgt.lengths)
        self.indices = usable_indices(self.src_lengths, self.tgt_lengths, max_len)
        self.epoch, self.index = 0, 0
        self._plan: list[np.ndarray] | None = None
        self._examples: list[np.ndarray] | None = None  # the epoch's joined examples (None: pairs)

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return len(self._epoch_plan())

    @property
    def epochs_done(self) -> int:
        """Whole epochs drawn: the current one counts once its last batch is out (the stream moves on to the
        next epoch only when the next batch is drawn)."""
        return self.epoch + (self.index >= len(self))

    def state_dict(self) -> dict[str, Any]:
        """The position in the data, and the settings that planned its epoch."""
        return {"epoch": self.epoch, "index": self.index, "planned_by": self._planned_by()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Back to a saved position. Under other batching settings (batch size or type, max_len, the pool,
        the seed, joined pairs) the saved epoch's plan is not this one, and its position in this one would
        skip or repeat pairs: the stream moves on to the next epoch, with a warning."""
        self.epoch, self.index, self._plan = int(state["epoch"]), int(state["index"]), None
        planned_by = state.get("planned_by")  # (absent from checkpoints older than it)
        if planned_by is not None and list(planned_by) != self._planned_by() and self.index:
            warn(
                f"the batching settings changed since the checkpoint, which was {self.index} batches into "
                f"epoch {self.epoch}: training goes on from the start of epoch {self.epoch + 1}"
            )
            self.epoch, self.index = self.epoch + 1, 0

    def _planned_by(self) -> list:
        return [*self.settings, *dataclasses.astuple(self.joining)]

    def _epoch_plan(self) -> list[np.ndarray]:
        if self._plan is None:
            batch_type, batch_size, pool, seed = self.settings
            plan, self._examples = plan_epoch(
                self.src_lengths,
                self.tgt_lengths,
                self.indices,
                batch_type,
                batch_size,
                pool,
                seed,
                self.epoch,
                self.joining,
            )
            self._plan = shard(plan, self.rank, self.world_size)
        return self._plan

    def __iter__(self) -> Iterator[Batch]:
        while True:
            plan = self._epoch_plan()
            if not plan:
                return
            if self.index >= len(plan):
                self.epoch, self.index, self._plan = self.epoch + 1, 0, None
                continue
            examples = plan[self.index]
            self.index += 1
            yield collate(*self.sides(examples), pin=self.pin, pad_to=self.pad_to)

    def sides(self, examples: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The source and target ids of the batch's examples (a joined example's pairs concatenated)."""
        if self._examples is None:
            return [self.cache.src[i] for i in examples], [self.cache.tgt[i] for i in examples]
        joined = [self._examples[i] for i in examples]
        return (
            [np.concatenate([self.cache.src[i] for i in pairs]) for pairs in joined],
            [np.concatenate([self.cache.tgt[i] for i in pairs]) for pairs in joined],
        )
