"""One training update, as `seq2seq train` runs it and `benchmarks/bench_step.py` times it.

    forward (bf16 autocast where `train.precision` says) -> the summed token loss -> divided by
    `train.loss_norm`'s divisor -> backward -> the gradient norm, clipped to `train.clip_norm` -> the
    optimiser's step, skipped when the loss or the gradient is not finite

The learning rate is the schedule's (optim.Schedule.set_step, before each update). Nothing here waits for
the GPU: the summed loss, the skip flag and the gradient norm before clipping come back as device tensors,
which log.Window reads once per log line. graphs.py captures the same update in CUDA graphs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..config import TrainConfig
from ..vocab.batching import Batch
from .distributed import on_any_rank
from .loss import batch_loss, loss_divisor
from .optim import FUSED, step_optimizer

# What an update returns: its summed token loss, 1.0 when it was skipped (else 0.0), and the gradient
# norm before clipping, all 0-dim device tensors.
Outcome = tuple[Tensor, Tensor, Tensor]


@dataclass(eq=False)
class Update:
    """The update of `model`'s parameters by `optimizer`, its forward pass run by `net` (the model, or
    its DDP wrapper, which averages the gradients of `world_size` processes)."""

    model: nn.Module
    net: nn.Module
    optimizer: torch.optim.Optimizer
    cfg: TrainConfig
    device: torch.device
    bf16: bool
    world_size: int = 1

    def __post_init__(self) -> None:
        self.fused = self.cfg.optimizer in FUSED
        self.max_norm = self.cfg.clip_norm if self.cfg.clip_norm > 0 else math.inf

    def __call__(self, batch: Batch) -> Outcome:
        """One update on `batch`, which is on the host."""
        self.optimizer.zero_grad(set_to_none=True)
        return self.apply(batch.to(self.device), loss_divisor(batch, self.cfg.loss_norm, self.world_size))

    def apply(self, batch: Batch, divisor: float | Tensor, static: bool = False) -> Outcome:
        """Forward, backward, clipping and the guarded step on `batch` (on the device), the gradients
        zeroed beforehand. static: `batch` is a CUDA graph's fixed-shape buffer and `divisor` a device
        tensor; nothing may be read back (see `batch_loss` and `step_optimizer`)."""
        self.net.train()
        loss_sum = batch_loss(self.net, batch, self.bf16, self.cfg.label_smoothing, static)
        (loss_sum / divisor).backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
        bad = on_any_rank((~(torch.isfinite(loss_sum) & torch.isfinite(norm))).float())
        step_optimizer(self.optimizer, bad, self.fused, on_device=static)
        return loss_sum.detach(), bad, norm.detach()
