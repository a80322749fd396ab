"""Where this process sits in a DDP job, and the few things its ranks must agree on.

Under `torchrun`, each rank trains on its own shard of every epoch's batches and DDP all-reduces the
gradients; rank 0 alone validates, logs and writes checkpoints. Beyond the gradients, the ranks agree on
when to stop (the wall-clock budget, early stopping, a signal) and on skipping an update, take rank 0's
schedule, and hand rank 0 their RNG states and data positions for the checkpoint. Every collective is
entered by every rank in the same order, or the ranks wait for each other forever. In a single process
each helper here is the identity or does nothing, so the training loop reads the same either way.
"""

from __future__ import annotations

import gc
import os
import signal
from dataclasses import dataclass
from types import FrameType
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class Ranks:
    """This process's place in a DDP job; `is_distributed` is False for a plain process (no process group),
    True under a launcher even with one process, so that `torchrun --nproc_per_node=1` runs the DDP code."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    is_distributed: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.is_distributed:
            dist.barrier()

    def gather(self, item: T) -> list[T]:
        """Every rank's `item`, in rank order, on every rank."""
        if not self.is_distributed:
            return [item]
        items: list[Any] = [None] * self.world_size
        dist.all_gather_object(items, item)
        return items

    def from_main(self, value: T) -> T:
        """Rank 0's `value`, on every rank."""
        if not self.is_distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def on_any_rank(flag: torch.Tensor) -> torch.Tensor:
    """`flag` (a 0-dim float tensor, 1.0 or 0.0) made 1.0 on every rank where it is 1.0 on any, in place and
    without waiting for the device (an all-reduce queued on it); in a single process, `flag` as it is.

    What an update's skip flag needs: a loss that is not finite on one rank, beside gradients that stay
    finite (a constant's gradient is 0), would skip that rank's step alone; its weights would part from
    the others', and its count of non-finite updates would end it alone, the others waiting forever."""
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return flag


def init_ranks(device: str) -> Ranks:
    """Join the process group a launcher (`torchrun`) describes in the environment (nccl on CUDA, gloo on
    CPUs), even a group of one process."""
    if "WORLD_SIZE" not in os.environ:
        return Ranks()
    world_size, local_rank = int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0"))
    ranks = Ranks(int(os.environ["RANK"]), world_size, local_rank, is_distributed=True)
    if not dist.is_initialized():
        use_cuda = device != "cpu" and torch.cuda.is_available()
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return ranks


def backend() -> str:
    """The process group's backend (nccl, gloo), for the log."""
    return dist.get_backend()


def shutdown() -> None:
    """End a DDP job cleanly: every rank leaves the group together, with nothing in flight.

    Only after a run that finished on every rank: after an error or a signal, a rank that waited here for
    the others could wait forever, so the process just exits and torchrun stops the rest.
    """
    gc.collect()  # the DDP wrapper and its reducer, which hold the group, must be gone before it is
    dist.barrier()
    dist.destroy_process_group()


class StopSignals:
    """SIGINT and SIGTERM noted instead of acted on, so training stops between two updates, with a checkpoint.

    A single process stops after the update in which a signal arrived. Under DDP the ranks must stop
    after the same update, or one would enter the checkpoint's gathers while another enters the next
    update's all-reduce and both would wait forever; a signal may reach them between two updates (or only
    one of them). So they compare their flags every `every` updates, where the loop synchronises anyway,
    and all stop when any rank was signalled.
    """

    def __init__(self, ranks: Ranks, every: int) -> None:
        self.ranks, self.every = ranks, every
        self.received: int | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        self.previous = {sig: signal.signal(sig, self._note) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _note(self, signum: int, frame: FrameType | None) -> None:  # noqa: ARG002
        self.received = signum

    def agreed(self, step: int) -> int | None:
        """After update `step`: the signal that stops the run, the same on every rank, or None."""
        if not self.ranks.is_distributed:
            return self.received
        if step % self.every:
            return None
        flags = self.ranks.gather(self.received)
        return next((flag for flag in flags if flag is not None), None)
