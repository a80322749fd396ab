"""The training update captured in CUDA graphs (`train.cuda_graphs`): one graph per batch shape, captured
once, replayed for every later batch of that shape.

Why: on a GPU an update of these models is bound by launching kernels, not by arithmetic. The decoder's
time loop runs a few dozen small kernels per target word, forward and backward, and the CPU's launching of
them sets the update's time (docs/gpu.md). A replayed graph launches them all with one call.
`torch.cuda.graph` is used directly: torch.compile breaks its graph at the library RNNs and its CUDA-graph
trees add a fixed cost to every call.

The shapes. A graph replays fixed shapes, so the training batches come padded (on the host, by `collate`)
to one of a small fixed set, `PaddedShapes`:
- sentences: `train.batch_size` with `batch_type: sentences` (a pool's last, smaller batch is padded up);
  with `tokens`, the batch's own count rounded up to one of 8 sizes per doubling (at most 1/8 more rows);
- source and target length (EOS / BOS included): rounded up to a multiple of 8 (`graph_length`), at most
  `train.max_len + 1`, the longest a batch can be.
So a run of `max_len` 50 captures at most 7 x 7 graphs per sentence count. The batches are those the run
makes without graphs, the same sentences in the same order; only their padding grows. The rows added are
empty sentences whose targets are all padding, so that padding changes no loss and no gradient (to float
rounding: tests/test_graphs.py).

What a captured update must not do, and what it does instead:
- read a value back from the GPU: the loss projects every row of the shape, padding weighted 0, instead of
  the rows the host counted (`loss.batch_loss`, `static`); Adadelta undoes a non-finite step on the device
  rather than skipping it on the host's word (`optim.step_optimizer`);
- take numbers that change from batch to batch: the batch is copied into the shape's own device buffers,
  the loss divisor (`loss.loss_divisor`) into a device scalar and the learning rate into the optimiser's
  rate tensor (`optim.Schedule`), all before each replay;
- allocate gradients: they are zeroed in place inside the graph, never set to None, so that every graph
  writes the same gradient tensors;
- create the optimiser's state: the first batch of each shape runs eagerly, on the stream the capture then
  uses (its warm-up), and a shape is captured only once the optimiser has stepped.

Where no graph is used (`auto` leaves them off, `on` is an error): on a CPU; under DDP, whose gradient
all-reduce would have to be captured with them (NCCL capture and DDP's own warm-up rules); with SGD, for
which torch has no capturable step. The compiled attention (`train.compile`) is compiled during a shape's
eager first update and captured with the rest. All graphs share one memory pool: they run one at a time,
and each keeps alive only its outputs, which the training log reads before the next replay.
"""

from __future__ import annotations

import dataclasses
import warnings

import torch
from torch import Tensor

from ..config import TrainConfig
from ..model.device import captures
from ..vocab.batching import Batch, Shape, graph_length, graph_rows
from .loss import loss_divisor
from .optim import CAPTURABLE, has_state
from .step import Outcome, Update

BATCH_TENSORS = ("src", "src_lengths", "tgt_in", "tgt_out")


def uses_cuda_graphs(cfg: TrainConfig, device: torch.device, distributed: bool) -> bool:
    """Whether this run captures its updates (`train.cuda_graphs`); `on` where it cannot is an error."""
    return captures(cfg.cuda_graphs, "train.cuda_graphs", _obstacle(cfg, device, distributed))


def _obstacle(cfg: TrainConfig, device: torch.device, distributed: bool) -> str | None:
    if device.type != "cuda":
        return f"training runs on the {device.type}, not on a CUDA device"
    if distributed:
        return "training runs under DDP (torchrun), whose gradient all-reduce is not captured"
    if cfg.optimizer not in CAPTURABLE:
        return f"train.optimizer {cfg.optimizer} has no capturable step in torch (use adam or adadelta)"
    return None


@dataclasses.dataclass(frozen=True)
class PaddedShapes:
    """The fixed set of shapes (sentences, source length, target length) that batches are padded to
    (module docstring). sentences: every batch's (None: rounded, `graph_rows`); longest: the longest
    either side can be (None: no bound)."""

    sentences: int | None = None
    longest: int | None = None

    @classmethod
    def of(cls, cfg: TrainConfig) -> PaddedShapes:
        return cls(cfg.batch_size if cfg.batch_type == "sentences" else None, cfg.max_len + 1)

    def __call__(self, rows: int, src_len: int, tgt_len: int) -> Shape:
        """The shape a batch of `rows` sentences, sides `src_len` and `tgt_len` long, is padded to."""
        return (self.sentences or graph_rows(rows, 8), self._length(src_len), self._length(tgt_len))

    def _length(self, length: int) -> int:
        padded = graph_length(length)
        return min(padded, self.longest) if self.longest else padded


@dataclasses.dataclass(eq=False)
class _Slot:
    """One shape's device buffers, and once captured its graph and the outcome tensors it writes."""

    batch: Batch  # its tensors are the buffers; its counts, the first batch's, are not read
    divisor: Tensor  # 0-dim
    graph: torch.cuda.CUDAGraph | None = None
    outcome: Outcome | None = None


class CapturedUpdate:
    """`update`, replayed from one CUDA graph per batch shape. Its batches must come padded to the shapes
    of a `PaddedShapes` (a new shape costs an eager update and a capture) and its optimiser must be built
    `capturable` (optim.build_optimizer). On a CPU, which has no graphs, every update runs eagerly on the
    same buffers, so tests can compare it with `update` anywhere."""

    def __init__(self, update: Update) -> None:
        self.update = update
        self.device = update.device
        self.capture = self.device.type == "cuda"
        self.stream = torch.cuda.Stream(self.device) if self.capture else None  # warm-ups and captures
        self.pool = None  # the graphs' shared memory pool, from the first capture
        self.slots: dict[Shape, _Slot] = {}

    def __len__(self) -> int:
        """Graphs captured so far."""
        return sum(slot.graph is not None for slot in self.slots.values())

    def __call__(self, batch: Batch) -> Outcome:
        """One update on `batch` (on the host, padded to its shape)."""
        slot = self._load(batch)
        if slot.graph is not None:
            slot.graph.replay()
            return slot.outcome
        outcome = self._eager(slot)  # this batch's update, and the warm-up of the shape's capture
        if self.capture and has_state(self.update.optimizer):
            self._capture(slot)
        return outcome

    def _load(self, batch: Batch) -> _Slot:
        """The shape's buffers, holding `batch`, and the divisor of its loss."""
        shape = (batch.src.size(0), batch.src.size(1), batch.tgt_in.size(1))
        slot = self.slots.get(shape)
        if slot is None:
            buffers = {name: getattr(batch, name).to(self.device, copy=True) for name in BATCH_TENSORS}
            slot = self.slots[shape] = _Slot(
                dataclasses.replace(batch, **buffers), torch.zeros((), device=self.device)
            )
        else:
            for name in BATCH_TENSORS:
                getattr(slot.batch, name).copy_(getattr(batch, name), non_blocking=True)
        cfg = self.update.cfg
        slot.divisor.fill_(loss_divisor(batch, cfg.loss_norm, self.update.world_size))
        return slot

    def _step(self, slot: _Slot) -> Outcome:
        """What a graph holds: the gradients zeroed in place, then the update on the shape's buffers."""
        self.update.optimizer.zero_grad(set_to_none=False)
        return self.update.apply(slot.batch, slot.divisor, static=True)

    def _eager(self, slot: _Slot) -> Outcome:
        if not self.capture:
            return self._step(slot)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream), warnings.catch_warnings():
            # torch warns when a capturable optimiser steps uncaptured: a warm-up does, once per shape
            warnings.filterwarnings("ignore", message=".*capturable=True.*")
            outcome = self._step(slot)
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        return outcome

    def _capture(self, slot: _Slot) -> None:
        """Record the shape's update into a graph (which runs nothing now: this batch's update is done)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
            slot.outcome = self._step(slot)
        self.pool = self.pool or graph.pool()
        slot.graph = graph
