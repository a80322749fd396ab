"""Optimisers and learning-rate schedules named in the config.

Adam (default) and SGD use PyTorch's fused kernels, which accept a `found_inf` flag: a step whose loss or
gradient is not finite is skipped inside the kernel, so the guard needs no host-device synchronisation.
Adadelta (the paper's optimiser) has no fused kernel; there the skip costs one synchronisation per step.
"""

from __future__ import annotations

import math

import torch

from ..config import TrainConfig
from .log import improves

FUSED = ("adam", "sgd")


def build_optimizer(params: list[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam":
        return torch.optim.Adam(
            params,
            lr=cfg.learning_rate,
            betas=tuple(cfg.adam_betas),
            weight_decay=cfg.weight_decay,
            fused=True,
        )
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=cfg.learning_rate, momentum=cfg.momentum, weight_decay=cfg.weight_decay, fused=True
        )
    # Bahdanau et al. 2014: Adadelta with rho = 0.95, eps = 1e-6
    return torch.optim.Adadelta(
        params,
        lr=cfg.learning_rate,
        rho=cfg.adadelta_rho,
        eps=cfg.adadelta_eps,
        weight_decay=cfg.weight_decay,
    )


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
        """Set the rate for update number `step` (0-based) and return it."""
        rate = max(
            self.cfg.learning_rate * warmup_factor(step, self.cfg) * self.plateau_scale,
            self.cfg.min_learning_rate,
        )
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        return rate

    def validated(self, value: float) -> None:
        """reduce-on-plateau: after `plateau_patience` validations without improvement, decay the rate.

        `value` is the dev set's `train.early_stop_metric`, the metric that also picks the best checkpoints.
        """
        if self.cfg.scheduler != "plateau":
            return
        if improves(self.cfg.early_stop_metric, value, self.best):
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


def step_optimizer(optimizer: torch.optim.Optimizer, bad: torch.Tensor, fused: bool) -> None:
    """Apply the update unless `bad` (a 0-dim float tensor, 1.0 = non-finite loss or gradient)."""
    if fused:
        optimizer.found_inf = bad
        optimizer.step()
    elif not bool(bad):
        optimizer.step()
