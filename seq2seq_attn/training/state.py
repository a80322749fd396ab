"""The training state: what a training checkpoint holds, and resuming from it.

A training checkpoint holds everything the next update depends on: weights, optimiser, schedule, the RNG
states and data position of every rank, the counters in `Progress`, the resolved config and the
vocabulary's fingerprint. So a run killed at any point and resumed reaches step N with the same parameters
as an uninterrupted run (CPU, same thread count). It is written as any checkpoint is
(runs/checkpoint.py), into the run folder (runs/run_folder.py).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import Config, TrainConfig, from_dict, to_dict
from ..config.loader import path_keys, settle_locations
from ..errors import UserError
from ..runs.checkpoint import load_checkpoint
from ..runs.run_folder import LATEST, checkpoint_dir, moved_with_run
from .batches import TrainingBatches
from .distributed import Ranks
from .log import improves, rank_value
from .optim import Schedule, load_optimizer_state

FORMAT = 1
RESUME_CRITICAL = ("data", "vocab", "model")  # config sections that fix what a checkpoint means
TRAINING_STATE = ("config", "model", "optimizer", "schedule", "data", "rng", "progress")  # read by `restore`


@dataclass
class Progress:
    """Counters that survive a resume."""

    step: int = 0
    elapsed: float = 0.0  # training seconds before this process started
    history: list[dict[str, Any]] = field(default_factory=list)  # one dict per validation
    kept: list[dict[str, Any]] = field(default_factory=list)  # best-K: {"step", "metric"}, best first
    bad_validations: int = 0
    skipped_updates: int = 0
    bad_run: int = 0  # consecutive skipped updates when the checkpoint was written (train.max_nonfinite)

    def validated(self, result: dict[str, float], metric: str, keep: int) -> tuple[bool, list[int]]:
        """Record the validation `result` of this step, judged by `metric`, and rank it among the best `keep`.

        Returns whether this step entered the best `keep` and the steps that fell out of them.
        """
        previous = [entry[metric] for entry in self.history]
        best = min(previous, key=lambda value: rank_value(metric, value), default=None)
        self.bad_validations = 0 if improves(metric, result[metric], best) else self.bad_validations + 1
        self.history.append({"step": self.step, **result})
        candidate = {"step": self.step, "metric": result[metric]}
        ranked = sorted(self.kept + [candidate], key=lambda k: (rank_value(metric, k["metric"]), k["step"]))
        survivors = ranked[:keep]
        dropped = [k["step"] for k in self.kept if k not in survivors]
        self.kept = survivors
        return candidate in survivors, dropped


def resume_point(config: Config, required: bool) -> dict[str, Any] | None:
    """The run's `latest.pt`, checked to fit `config`; None when the run is new. Checked before the data
    and vocabulary are prepared, so that a resume refused writes nothing (`check_inputs` then checks
    the vocabulary they make)."""
    latest = checkpoint_dir(config.run_dir) / LATEST
    if latest.is_file():
        state = load_checkpoint(latest)
        missing = [key for key in TRAINING_STATE if key not in state]
        if missing:
            raise UserError(
                f"{latest}: cannot resume: not a training checkpoint (no {', '.join(missing)}; an average "
                "or a copied model has none); train into a new run directory"
            )
        _check_resumable(state, config, latest)
        return state
    if required:
        raise UserError(f"{config.run_dir}: cannot resume: the run has no checkpoint ({latest})")
    return None


def check_inputs(state: dict[str, Any], config: Config, vocab_fingerprint: str, dev_fingerprint: str) -> None:
    """Refuse to resume `state` (latest.pt) with another vocabulary, or another dev set, than it was
    trained and ranked with (their files' content; a checkpoint older than the dev set's record has none)."""
    latest = checkpoint_dir(config.run_dir) / LATEST
    if state.get("vocab_fingerprint") != vocab_fingerprint:
        raise UserError(
            f"{latest}: cannot resume: the vocabulary changed since this checkpoint was written (train into "
            "a new run directory)"
        )
    if state.get("dev_fingerprint", dev_fingerprint) != dev_fingerprint:
        raise UserError(
            f"{latest}: cannot resume: the dev set's text changed since this checkpoint was written, and its "
            "best checkpoints and plateau were measured on the old one (train into a new run directory)"
        )


def _check_resumable(state: dict[str, Any], config: Config, path: Path) -> None:
    saved_config = from_dict(state["config"], where=f"{path} (config)")
    settle_locations(saved_config)  # a checkpoint that left the data folder to its default ('') names it
    old = _flatten({k: to_dict(saved_config)[k] for k in RESUME_CRITICAL})
    new = _flatten({k: to_dict(config)[k] for k in RESUME_CRITICAL})
    moved = {key for key in path_keys() if _moved_along(old.get(key), new.get(key), saved_config, config)}
    changed = sorted(k for k in (old.keys() | new.keys()) - moved if old.get(k) != new.get(k))
    if changed:
        first = changed[0]
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        raise UserError(
            f"{path}: cannot resume: config changed: {first} was {old.get(first)!r}, now "
            f"{new.get(first)!r}{more} (train into a new run directory)"
        )
    saved = _state_terms(saved_config.train)
    now = _state_terms(config.train)
    for setting, was in saved.items():
        if now.get(setting) != was:
            raise UserError(
                f"{path}: cannot resume: {setting} was {was!r}, now {now[setting]!r}: the saved state was "
                "built under it (set it back, or train into a new run directory)"
            )


def _moved_along(was: str | None, now: str | None, saved: Config, config: Config) -> bool:
    """Whether the file or folder a path key names moved with the run folder: the same path relative to
    it, so a project folder (config, data and run) moved or copied elsewhere resumes there."""
    return bool(was and now) and moved_with_run(was, saved.run_dir, config.run_dir) == Path(
        os.path.normpath(now)
    )


def _state_terms(train: TrainConfig) -> dict[str, Any]:
    """The train settings a checkpoint's state is only meaningful under: the optimiser (the form of its
    moments), and the dev metric that ranked the best checkpoints and drove the plateau schedule with the
    dev set and search it was measured on (their saved values are of those; `valid_bleu` off ranks by the
    loss, which no beam changes)."""
    terms: dict[str, Any] = {
        "train.optimizer": train.optimizer,
        "the ranking metric (train.early_stop_metric, the loss when train.valid_bleu is off)": (
            train.ranking_metric
        ),
        "train.valid_max_sentences": train.valid_max_sentences,
    }
    if train.ranking_metric != "loss":
        terms["train.valid_beam"] = train.valid_beam
    return terms


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Python's, numpy's, torch's and CUDA's generators, as plain data and tensors."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [kind, keys.tolist(), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def gather_rank_states(ranks: Ranks, stream: TrainingBatches) -> dict[str, list]:
    """Every rank's RNG state and data position, in rank order (a collective under DDP)."""
    return {"rng": ranks.gather(rng_state()), "data": ranks.gather(stream.state_dict())}


def training_state(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: Schedule,
    rank_states: dict[str, list],
    progress: Progress,
    elapsed: float,
    config: Config,
    vocab_fingerprint: str,
    dev_fingerprint: str,
) -> dict[str, Any]:
    """The checkpoint of a training run after `elapsed` seconds of training."""
    return {
        "format": FORMAT,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
        **rank_states,
        "progress": {**vars(progress), "elapsed": elapsed},
        "step": progress.step,
        "config": to_dict(config),
        "vocab_fingerprint": vocab_fingerprint,
        "dev_fingerprint": dev_fingerprint,
    }


def restore(
    state: dict[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: Schedule,
    stream: TrainingBatches,
    ranks: Ranks,
) -> Progress:
    """Put this rank back where `state` was written; returns the run's counters."""
    model.load_state_dict(state["model"])
    load_optimizer_state(optimizer, state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    if len(state["data"]) != ranks.world_size:
        raise UserError(f"cannot resume a run of {len(state['data'])} processes with {ranks.world_size}")
    stream.load_state_dict(state["data"][ranks.rank])
    set_rng_state(state["rng"][ranks.rank])
    return Progress(**state["progress"])
