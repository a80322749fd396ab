"""Optimisers and learning-rate schedules named in the config.

Adam (default) and SGD use PyTorch's fused kernels, which accept a `found_inf` flag: a step whose loss or
gradient is not finite is skipped inside the kernel, so the guard needs no host-device synchronisation.
Adadelta (the paper's optimiser) has no fused kernel: there the skip reads the flag on the host (one
synchronisation per step), or, in an update captured in a CUDA graph, where nothing may be read back,
undoes the step on the device.

For a captured update (`capturable`: training/graphs.py) Adam and Adadelta are built with torch's
`capturable=True` (their step counts live on the GPU) and the learning rate is a device tensor that the
schedule writes before every update, since a Python number would be frozen into the graph. torch's SGD
has no capturable mode.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..config import TrainConfig
from .log import improves

FUSED = ("adam", "sgd")
CAPTURABLE = ("adam", "adadelta")


def build_optimizer(
    params: list[torch.nn.Parameter], cfg: TrainConfig, capturable: bool = False
) -> torch.optim.Optimizer:
    """The optimiser `cfg` names. capturable (CAPTURABLE optimisers only): one whose step a CUDA graph can
    hold, its rate a tensor on the parameters' device, and on a GPU in torch's capturable mode (which a
    CPU, where nothing is captured, does not have: there the same steps run eagerly, as tests run them)."""
    if capturable and cfg.optimizer not in CAPTURABLE:
        raise ValueError(f"optimizer {cfg.optimizer} cannot be captured in a CUDA graph")
    device = params[0].device
    lr = torch.tensor(cfg.learning_rate, device=device) if capturable else cfg.learning_rate
    capturable = capturable and device.type == "cuda"
    if cfg.optimizer == "adam":
        return torch.optim.Adam(
            params,
            lr=lr,
            betas=tuple(cfg.adam_betas),
            weight_decay=cfg.weight_decay,
            fused=True,
            capturable=capturable,
        )
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, fused=True
        )
    # Bahdanau et al. 2014: Adadelta with rho = 0.95, eps = 1e-6
    return torch.optim.Adadelta(
        params,
        lr=lr,
        rho=cfg.adadelta_rho,
        eps=cfg.adadelta_eps,
        weight_decay=cfg.weight_decay,
        capturable=capturable,
        foreach=True if capturable else None,  # torch's single-tensor step would read a tensor rate back
    )


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """A checkpoint's optimiser state (its moments and step counts), loaded into `optimizer` as this run
    built it: every setting of a group (weight decay, betas, rho, eps, whether it is capturable, the
    learning rate's form: a device tensor or a number) is this run's config's, not the checkpoint's, so
    a resumed run uses the settings its config.yaml records (the rate itself is the schedule's, set before
    every update). torch's `load_state_dict` alone would take them all from the checkpoint, and would
    replace a tensor rate by a copy, which the schedule would then write while a captured update reads
    the original: each group keeps its own rate object."""
    rates = [group["lr"] for group in optimizer.param_groups]
    groups = [
        {**group, "params": saved_group["params"]}
        for saved_group, group in zip(saved["param_groups"], optimizer.param_groups, strict=True)
    ]
    optimizer.load_state_dict({**saved, "param_groups": groups})
    for group, rate in zip(optimizer.param_groups, rates, strict=True):
        group["lr"] = rate


def warmup_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of the peak rate after `step` updates: linear warm-up, then constant or 1/sqrt(step)."""
    step = step + 1
    warm = cfg.warmup_steps
    if warm and step < warm:
        return step / warm
    if cfg.scheduler == "inverse_sqrt":
        return math.sqrt(max(warm, 1) / step)
    return 1.0


class Schedule:
    """Per-update warm-up / inverse-sqrt factor, times a plateau factor lowered at validations."""

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> None:
        self.optimizer, self.cfg = optimizer, cfg
        self.plateau_scale = 1.0
        self.best: float | None = None
        self.bad_validations = 0

    def set_step(self, step: int) -> float:
        """Set the rate for update number `step` (0-based) and return it (the plateau's decay only under
        `scheduler: plateau`: a run resumed under another schedule takes that schedule's rates)."""
        plateau = self.plateau_scale if self.cfg.scheduler == "plateau" else 1.0
        rate = max(
            self.cfg.learning_rate * warmup_factor(step, self.cfg) * plateau, self.cfg.min_learning_rate
        )
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):  # a captured step's: written in place, on the device
                group["lr"].fill_(rate)
            else:
                group["lr"] = rate
        return rate

    def validated(self, value: float) -> None:
        """reduce-on-plateau: after `plateau_patience` validations without improvement, decay the rate.

        `value` is the dev set's `ranking_metric`, the metric that also picks the best checkpoints.
        """
        if self.cfg.scheduler != "plateau":
            return
        if improves(self.cfg.ranking_metric, value, self.best):
            self.best, self.bad_validations = value, 0
            return
        self.bad_validations += 1
        if self.bad_validations > self.cfg.plateau_patience:
            self.plateau_scale *= self.cfg.plateau_factor
            self.bad_validations = 0

    def state_dict(self) -> dict:
        return {
            "plateau_scale": self.plateau_scale,
            "best": self.best,
            "bad_validations": self.bad_validations,
        }

    def load_state_dict(self, state: dict) -> None:
        self.plateau_scale = float(state["plateau_scale"])
        self.best = state["best"]
        self.bad_validations = int(state["bad_validations"])


def step_optimizer(
    optimizer: torch.optim.Optimizer, bad: torch.Tensor, fused: bool, on_device: bool = False
) -> None:
    """Apply the update unless `bad` (a 0-dim float tensor, 1.0 = non-finite loss or gradient).

    on_device: decide without reading `bad` back (an update captured in a CUDA graph), once the optimiser
    has its state; its first step, which creates the state, always reads it.
    """
    if fused:
        optimizer.found_inf = bad
        optimizer.step()
        del optimizer.found_inf  # a later step must not skip on this update's (a graph's) flag
    elif on_device and has_state(optimizer):
        _step_unless(optimizer, bad)
    elif not bool(bad):
        optimizer.step()


def has_state(optimizer: torch.optim.Optimizer) -> bool:
    """Whether every parameter with a gradient has its optimiser state (created by its first step)."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    return all(optimizer.state.get(p) for p in params)


@torch.no_grad()
def _step_unless(optimizer: torch.optim.Optimizer, bad: torch.Tensor) -> None:
    """The step, undone on the device where `bad`: the parameters and their state are copied before it
    and copied back where the update was not finite. Costs a copy of both; reads nothing back."""
    kept = [
        tensor
        for group in optimizer.param_groups
        for p in group["params"]
        for tensor in (p, *optimizer.state.get(p, {}).values())
        if isinstance(tensor, torch.Tensor)
    ]
    before = [tensor.clone() for tensor in kept]
    optimizer.step()
    skip = bad.bool()
    for tensor, old in zip(kept, before, strict=True):
        tensor.copy_(torch.where(skip, old, tensor))
