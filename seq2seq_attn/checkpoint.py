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
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from .errors import UserError
from .io import TEMP_SUFFIX, atomic_write, fsync_dir

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


def load_trained(path: str | Path, device: str | torch.device = "cpu", which: str = BEST):
    """Rebuild a trained model for inference from a run directory or a checkpoint file.

    Returns (model in eval mode on `device`, vocabulary, config). The vocabulary is the run's own copy
    (`<run>/vocab`), and its fingerprint must match the one the checkpoint was trained with.
    """
    from .config import from_dict
    from .model import build_model
    from .vocab import Vocab

    file = resolve_checkpoint(path, which)
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
