"""Checkpoints: atomic, safe to load, and self-describing.

A checkpoint is one `torch.save` file holding tensors and plain Python data only (no pickled classes), so
it is always loaded with `torch.load(weights_only=True)`: a crafted file carrying a pickle payload is
refused and its payload never runs. It is written to a temporary file, fsynced and renamed over the
target, so a kill at any instant leaves the previous checkpoint intact.

Run-directory layout (`runs/<name>/`):
    config.yaml            the fully resolved config the run was started with
    vocab/                 copies of the sentencepiece models (the run is self-contained)
    checkpoints/step-N.pt  best-K checkpoints by the validation metric, plus `latest.pt`
    checkpoints/best.pt    a symbolic link to the best one
    metrics.jsonl          every logged value, one JSON object per line
    train.log              the log lines

A training checkpoint holds everything the next update depends on: weights, optimiser, schedule, the RNG
states and data position of every rank, the counters in `Progress`, the resolved config and the
vocabulary's fingerprint. So a run killed at any point and resumed reaches step N with the same parameters
as an uninterrupted run (CPU, same thread count).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import random
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import console
from .batching import BatchStream
from .config import Config, from_dict, to_dict
from .distributed import Ranks
from .errors import UserError
from .io import TEMP_SUFFIX, atomic_write, fsync_dir
from .metrics import improves, rank_value
from .model import build_model
from .optim import Schedule
from .vocab import Vocab

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest.pt"
BEST = "best.pt"
RELIST_ATTEMPTS = 5  # listings of a run's checkpoints, when a training run prunes one while we load it


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write `payload` atomically (temp file + flush + fsync + rename)."""
    with atomic_write(path, "wb") as handle:
        torch.save(payload, handle)


class CheckpointNotFound(UserError):
    """No checkpoint file at that path (a training run may have just removed it: see `average_latest`)."""


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint safely; a missing, truncated, corrupt or unsafe file is a one-line UserError.

    The file is opened once and read through that handle, so a training run that replaces or removes it
    meanwhile (a newer `best.pt`, best-K pruning) cannot make us read parts of two files.
    """
    path = Path(path)
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the `with` below
    except (FileNotFoundError, IsADirectoryError):
        raise CheckpointNotFound(f"{path}: checkpoint not found") from None
    with handle:
        if not zipfile.is_zipfile(handle):  # every checkpoint we write is a torch zip archive
            raise UserError(f"{path}: corrupt or truncated checkpoint (not a torch zip archive)")
        handle.seek(0)
        try:
            payload = torch.load(handle, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as err:
            raise UserError(
                f"{path}: refused to load checkpoint: it holds more than tensors and plain data "
                f"({_unsafe_reason(str(err))}); load only checkpoints written by seq2seq-attn"
            ) from None
        except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as err:
            raise UserError(
                f"{path}: corrupt or truncated checkpoint ({' '.join(str(err).split())[:160]})"
            ) from None
    if not (isinstance(payload, dict) and isinstance(payload.get("model"), dict)):
        raise UserError(f"{path}: not a seq2seq-attn checkpoint (no model weights inside)")
    if not isinstance(payload.get("config"), dict):
        raise UserError(f"{path}: not a seq2seq-attn checkpoint (no config inside)")
    return payload


def _unsafe_reason(message: str) -> str:
    """What torch's weights-only unpickler refused, from its long multi-line message."""
    if match := re.search(r"Unsupported global: GLOBAL (\S+)", message):
        return f"it references the Python object {match[1]}"
    if match := re.search(r"WeightsUnpickler error:\s*(\S.*)", message):
        return match[1].strip()[:120]
    return "unsafe content"


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR


def resolve_checkpoint(path: str | Path, which: str = BEST) -> Path:
    """A checkpoint file given a run directory (its `best.pt`, else `latest.pt`) or a file."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.exists():
        raise UserError(f"{path}: no such run directory or checkpoint")
    folder = checkpoint_dir(path)
    for name in (which, LATEST):
        candidate = folder / name
        if candidate.is_file():
            return candidate
    raise UserError(f"{path}: run directory has no checkpoint (expected {folder}/{which} or {LATEST})")


def point_best(folder: Path, target: Path) -> None:
    """Atomically make `best.pt` a relative symbolic link to `target`."""
    tmp = folder / f".{BEST}.link{TEMP_SUFFIX}"  # (a stale one is removed when training restarts)
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(target.name, tmp)
    os.replace(tmp, folder / BEST)
    fsync_dir(folder)


def run_dir_of(checkpoint: Path) -> Path:
    """`runs/x/checkpoints/step-N.pt` -> `runs/x`."""
    return checkpoint.resolve().parent.parent


def load_trained(path: str | Path, device: str | torch.device = "cpu", which: str = BEST, average: int = 0):
    """Rebuild a trained model for inference from a run directory or a checkpoint file.

    Returns (model in eval mode on `device`, vocabulary, config). The vocabulary is the run's own copy
    (`<run>/vocab`), and its fingerprint must match the one the checkpoint was trained with. With
    `average` K > 0 the weights are the mean of the run's last K step-N.pt checkpoints, the checkpoint
    `seq2seq average RUN --last K` writes.
    """
    file = resolve_checkpoint(path, which)
    if average:
        payload, _ = average_latest(run_dir_of(file), average)
        console.info(f"averaged {', '.join(payload['averaged_from'])}")
    else:
        payload = load_checkpoint(file)
    config = from_dict(payload["config"], where=f"{file} (config)")
    vocab_dir = run_dir_of(file) / "vocab"
    if not vocab_dir.is_dir():
        raise UserError(f"{file}: the run's vocabulary folder {vocab_dir} is missing")
    vocab = Vocab.load(vocab_dir)
    if payload.get("vocab_fingerprint") not in (None, vocab.fingerprint()):
        raise UserError(f"{file}: checkpoint was trained with a different vocabulary than {vocab_dir}")
    model = build_model(config.model, vocab.src_size, vocab.tgt_size)
    try:
        model.load_state_dict(payload["model"])
    except RuntimeError as err:
        first = " ".join(str(err).split())[:200]
        raise UserError(
            f"{file}: checkpoint does not fit the model described by its config ({first})"
        ) from None
    return model.to(device).eval(), vocab, config


# ----------------------------------------------------------------------------------------------------------
# training state: what a checkpoint holds, and resuming from it

FORMAT = 1
RESUME_CRITICAL = ("data", "vocab", "model")  # config sections that fix what a checkpoint means


@dataclass
class Progress:
    """Counters that survive a resume."""

    step: int = 0
    elapsed: float = 0.0  # training seconds before this process started
    history: list[dict[str, Any]] = field(default_factory=list)  # one dict per validation
    kept: list[dict[str, Any]] = field(default_factory=list)  # best-K: {"step", "metric"}, best first
    bad_validations: int = 0
    skipped_updates: int = 0

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


def resume_point(config: Config, vocab_fingerprint: str, required: bool) -> dict[str, Any] | None:
    """The run's `latest.pt`, checked to fit `config` and the vocabulary; None when the run is new."""
    latest = checkpoint_dir(config.run_dir) / LATEST
    if latest.is_file():
        state = load_checkpoint(latest)
        _check_resumable(state, config, vocab_fingerprint, latest)
        return state
    if required:
        raise UserError(f"{config.run_dir}: --resume given but the run has no checkpoint ({latest})")
    return None


def _check_resumable(state: dict[str, Any], config: Config, vocab_fingerprint: str, path: Path) -> None:
    if state.get("vocab_fingerprint") != vocab_fingerprint:
        raise UserError(
            f"{path}: cannot resume: the vocabulary changed since this checkpoint was written "
            "(train into a new run directory)"
        )
    old = _flatten({k: state["config"][k] for k in RESUME_CRITICAL})
    new = _flatten({k: to_dict(config)[k] for k in RESUME_CRITICAL})
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if changed:
        first = changed[0]
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        raise UserError(
            f"{path}: cannot resume: config changed: {first} was {old.get(first)!r}, now "
            f"{new.get(first)!r}{more} (train into a new run directory)"
        )


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


def gather_rank_states(ranks: Ranks, stream: BatchStream) -> dict[str, list]:
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
    }


def restore(
    state: dict[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: Schedule,
    stream: BatchStream,
    ranks: Ranks,
) -> Progress:
    """Put this rank back where `state` was written; returns the run's counters."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    if len(state["data"]) != ranks.world_size:
        raise UserError(f"cannot resume a run of {len(state['data'])} processes with {ranks.world_size}")
    stream.load_state_dict(state["data"][ranks.rank])
    set_rng_state(state["rng"][ranks.rank])
    return Progress(**state["progress"])


def save_validated(
    folder: Path, payload: dict[str, Any], kept: list[dict], entered: bool, dropped: list[int]
) -> None:
    """Write a validated step: its `step-N.pt` when it `entered` the best-K `kept`, `best.pt` pointing to
    the best of them, `latest.pt`, and only then remove the `dropped` steps' files (latest.pt no longer
    lists them)."""
    step = payload["step"]
    if entered:
        save_checkpoint(folder / f"step-{step}.pt", payload)
        point_best(folder, folder / f"step-{kept[0]['step']}.pt")
    save_checkpoint(folder / LATEST, payload)
    for old in dropped:
        (folder / f"step-{old}.pt").unlink(missing_ok=True)


# ----------------------------------------------------------------------------------------------------------
# averaging


def latest_checkpoints(run_dir: str | Path, k: int) -> list[Path]:
    """The `k` most recent `step-N.pt` checkpoints of a run (training keeps the best `train.keep_best`)."""
    if not Path(run_dir).is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    folder = checkpoint_dir(run_dir)
    by_step = {
        int(p.stem.removeprefix("step-")): p
        for p in folder.glob("step-*.pt")
        if p.stem.removeprefix("step-").isdigit()
    }
    if k < 1 or len(by_step) < k:
        raise UserError(
            f"{folder}: cannot average the last {k} checkpoints, the run has {len(by_step)} step-N.pt files"
        )
    return [by_step[step] for step in sorted(by_step)[-k:]]


def average_latest(run_dir: str | Path, k: int) -> tuple[dict[str, Any], list[Path]]:
    """The average of a run's `k` most recent `step-N.pt` checkpoints (see below), and their paths.

    A run still training may remove one of them (best-K pruning) between our listing and our loading
    it; then we list again.
    """
    attempts = RELIST_ATTEMPTS
    while True:
        paths = latest_checkpoints(run_dir, k)
        try:
            return average_checkpoints(paths), paths
        except CheckpointNotFound:
            attempts -= 1
            if not attempts:
                raise


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """One checkpoint whose weights are the element-wise mean of `paths`' (all of one model and vocabulary).

    Averaging the last few checkpoints of a run smooths out the noise of the final updates and usually
    gains a little BLEU at no training cost. Means are taken in float64; integer buffers come from the
    last checkpoint. Training state (optimiser, data position) is not carried over.
    """
    if not paths:
        raise UserError("no checkpoints to average")
    first = load_checkpoint(paths[0])
    sums = {name: t.double() if t.is_floating_point() else t for name, t in first["model"].items()}
    last, step = first, int(first.get("step", 0))
    for path in paths[1:]:
        last = load_checkpoint(path)
        _check_same_model(paths[0], first, path, last)
        step = max(step, int(last.get("step", 0)))
        for name, tensor in last["model"].items():
            sums[name] = sums[name] + tensor.double() if tensor.is_floating_point() else tensor
    model = {
        name: (total / len(paths)).to(first["model"][name].dtype) if total.is_floating_point() else total
        for name, total in sums.items()
    }
    return {
        "model": model,
        "config": last["config"],
        "vocab_fingerprint": last.get("vocab_fingerprint"),
        "step": step,
        "averaged_from": [Path(p).name for p in paths],
    }


def _check_same_model(first_path: Path, first: dict[str, Any], path: Path, payload: dict[str, Any]) -> None:
    if first.get("vocab_fingerprint") != payload.get("vocab_fingerprint"):
        raise UserError(f"{path}: cannot average with {first_path}: trained with a different vocabulary")
    if first["config"].get("model") != payload["config"].get("model"):
        raise UserError(f"{path}: cannot average with {first_path}: a different model configuration")
    shapes = lambda p: {name: tuple(t.shape) for name, t in p["model"].items()}  # noqa: E731
    if shapes(first) != shapes(payload):
        raise UserError(f"{path}: cannot average with {first_path}: different parameters")
