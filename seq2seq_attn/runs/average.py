"""Checkpoint averaging: one set of weights, the mean of several checkpoints of one run.

`run_folder.average_latest` picks a run's last K checkpoints; `seq2seq average` and `translate --average K`
use it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UserError
from .checkpoint import load_checkpoint


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
