"""The run folder: where a training run keeps its checkpoints, and loading a trained model from it.

Layout (`runs/<name>/`):
    config.yaml            the fully resolved config the run was started with
    vocab/                 copies of the sentencepiece models (the run is self-contained)
    checkpoints/step-N.pt  best-K checkpoints by the validation metric, plus `latest.pt`
    checkpoints/best.pt    a symbolic link to the best one
    metrics.jsonl          every logged value, one JSON object per line
    train.log              the log lines
    provenance.json        what trained it: code, machine, torch, threads, GPU; one entry per sitting
                           (the first start and every resume), with the step it started from

`--model` (and `load_trained`) names either a run folder, meaning its `best.pt` (else `latest.pt`), or a
checkpoint file inside a run's `checkpoints/`. Readers take no lock: a training run may prune a step-N.pt
while we list the folder, so averaging lists it again.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import console
from ..config import Config, from_dict
from ..errors import UserError
from ..io import TEMP_SUFFIX, fsync_dir, read_json, write_json
from ..model import build_model
from ..provenance import describe
from ..vocab.pieces import Vocab
from .average import average_checkpoints
from .checkpoint import CheckpointNotFound, load_checkpoint, save_checkpoint

CHECKPOINT_DIR = "checkpoints"
VOCAB_DIR = "vocab"  # the run's own copy of its sentencepiece models
LATEST = "latest.pt"
BEST = "best.pt"
PROVENANCE = "provenance.json"
RELIST_ATTEMPTS = 5  # listings of a run's checkpoints, when a training run prunes one while we load it


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR


def record_sitting(run_dir: Path, device: str | torch.device, step: int) -> None:
    """Add this sitting of training (from `step`, on `device`) to the run's provenance.json."""
    sittings = run_provenance(run_dir) or []
    write_json(run_dir / PROVENANCE, [*sittings, {"from_step": step, **describe(str(device))}])


def run_provenance(run_dir: Path) -> list[dict[str, Any]] | None:
    """The sittings that trained a run (`record_sitting`), oldest first, from a run folder or a model
    folder exported from one; None where none were recorded (a run from before runs recorded them)."""
    path = Path(run_dir) / PROVENANCE
    return read_json(path) if path.is_file() else None


def resolve_checkpoint(path: str | Path, which: str = BEST, average: int = 0) -> Path:
    """A checkpoint file given a run directory (its `best.pt`, else `latest.pt`) or a file. With `average`
    K > 0 (the mean of the run's last K step-N.pt files) a file is refused: it would not be among them."""
    path = Path(path)
    if path.is_file():
        if average:
            raise UserError(
                f"{path}: averaging takes a run's last {average} checkpoints: give the run folder, not a "
                "checkpoint file (or `seq2seq average FILE FILE ...` for the files of your choice)"
            )
        return path
    if not path.exists():
        raise UserError(f"{path}: no such run directory or checkpoint")
    folder = checkpoint_dir(path)
    for name in (which, LATEST):
        candidate = folder / name
        if candidate.is_file():
            return candidate
        if candidate.is_symlink():  # best.pt left pointing at a step-N.pt that is gone
            raise UserError(f"{candidate}: links to {os.readlink(candidate)}, which is missing")
    raise UserError(f"{path}: run directory has no checkpoint (expected {folder}/{which} or {LATEST})")


def step_file(folder: Path, step: int) -> Path:
    """The best-K checkpoint of update `step` in a run's checkpoint folder."""
    return folder / f"step-{step}.pt"


def _step_of(path: Path) -> int | None:
    """N for a best-K `step-N.pt`; None for any other name (an averaged `step-30-40-avg.pt`)."""
    number = path.name.removeprefix("step-").removesuffix(".pt")
    return int(number) if path.name == f"step-{number}.pt" and number.isdigit() else None


def step_files(folder: Path) -> dict[int, Path]:
    """A run's best-K `step-N.pt` files by step N; files of other names are not training's."""
    return {step: path for path in folder.glob("step-*.pt") if (step := _step_of(path)) is not None}


def written_by_training(path: Path) -> bool:
    """Whether `path` is a name training writes, replaces and removes in a run's checkpoint folder."""
    return path.parent.name == CHECKPOINT_DIR and (path.name in (LATEST, BEST) or _step_of(path) is not None)


def point_best(folder: Path, target: Path) -> None:
    """Atomically make `best.pt` a relative symbolic link to `target`."""
    tmp = folder / f".{BEST}.link{TEMP_SUFFIX}"  # (a stale one is removed when training restarts)
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(target.name, tmp)
    os.replace(tmp, folder / BEST)
    fsync_dir(folder)


def run_dir_of(checkpoint: Path) -> Path:
    """`runs/x/checkpoints/step-N.pt` -> `runs/x`: the run above the checkpoint as named (a checkpoints
    folder linked to a scratch disk stays in its run), else above the file it links to (a link to a run's
    checkpoint from elsewhere)."""
    named = Path(os.path.abspath(checkpoint)).parent.parent
    return named if (named / VOCAB_DIR).is_dir() else Path(checkpoint).resolve().parent.parent


def moved_with_run(path: str | Path, was_run: Path, run_dir: Path) -> Path:
    """Where `path`, a place named beside a run folder that was at `was_run`, is now that the run folder is
    at `run_dir`: the same place relative to it (a project folder moved or copied elsewhere)."""
    return Path(os.path.normpath(Path(run_dir) / os.path.relpath(path, was_run)))


def data_dir_of(config: Config, run_dir: Path) -> Path:
    """A trained run's prepared data folder: where its config names it, or where that is gone, where it
    moved with the run folder, now at `run_dir`."""
    return (
        config.data_dir
        if config.data_dir.is_dir()
        else moved_with_run(config.data_dir, config.run_dir, run_dir)
    )


def latest_checkpoints(run_dir: str | Path, k: int) -> list[Path]:
    """The `k` most recent `step-N.pt` checkpoints of a run (training keeps the best `train.keep_best`)."""
    if not Path(run_dir).is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    folder = checkpoint_dir(run_dir)
    by_step = step_files(folder)
    if k < 1 or len(by_step) < k:
        raise UserError(
            f"{folder}: cannot average the last {k} checkpoints, the run has {len(by_step)} step-N.pt files"
        )
    return [by_step[step] for step in sorted(by_step)[-k:]]


def average_latest(run_dir: str | Path, k: int) -> tuple[dict[str, Any], list[Path]]:
    """A run's `k` most recent `step-N.pt` checkpoints averaged (`average_checkpoints`), and their paths.

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


def load_trained(path: str | Path, device: str | torch.device = "cpu", which: str = BEST, average: int = 0):
    """Rebuild a trained model for inference from a run directory or a checkpoint file.

    Returns (model in eval mode on `device`, vocabulary, config). The vocabulary is the run's own copy
    (`<run>/vocab`), and its fingerprint must match the one the checkpoint was trained with. With
    `average` K > 0 the weights are the mean of the run's last K step-N.pt checkpoints, the checkpoint
    `seq2seq average RUN --last K` writes.
    """
    file = resolve_checkpoint(path, which, average)
    return rebuild(file, checkpoint_payload(file, average), run_dir_of(file) / VOCAB_DIR, device)


def checkpoint_payload(file: Path, average: int = 0) -> dict[str, Any]:
    """What checkpoint `file` holds; with `average` K > 0, the mean of its run's last K step-N.pt files."""
    if not average:
        return load_checkpoint(file)
    payload, _ = average_latest(run_dir_of(file), average)
    console.info(f"averaged {', '.join(payload['averaged_from'])}")
    return payload


def averaged_weights(average: int) -> str:
    """How messages name the weights of `average` K > 0 checkpoints averaged ("" for none)."""
    return f"the mean of its last {average} checkpoints" if average else ""


def rebuild(
    file: Path,
    payload: dict[str, Any],
    vocab_dir: Path,
    device: str | torch.device = "cpu",
    config_file: Path | None = None,
) -> tuple[nn.Module, Vocab, Config]:
    """The model of a checkpoint's `payload` (its `model` weights, `config` and `vocab_fingerprint`) with
    the vocabulary in `vocab_dir`, in eval mode on `device`; errors name `file`, or `config_file` where the
    config came from one of its own. A run's checkpoints and an exported model folder (model_folder.py) are
    rebuilt alike, so both are checked alike."""
    config = from_dict(payload["config"], where=f"{config_file or file} (config)")
    if not vocab_dir.is_dir():
        raise UserError(f"{file}: the vocabulary folder {vocab_dir} is missing")
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
    if bad := non_finite(model):
        raise UserError(
            f"{file}: the weights hold NaN or infinite values ({bad}): the run diverged or the file was "
            "damaged; take an earlier checkpoint"
        )
    return model.to(device).eval(), vocab, config


def non_finite(model: nn.Module) -> str | None:
    """The name of the first of the model's tensors holding a NaN or an infinity (None: all finite).
    Such weights would translate every sentence into garbage without a word of warning."""
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return name
    return None


def save_validated(
    folder: Path, payload: dict[str, Any], kept: list[dict], entered: bool, dropped: list[int]
) -> None:
    """Write a validated step: its `step-N.pt` when it `entered` the best-K `kept`, `best.pt` pointing to
    the best of them, `latest.pt`, and only then remove the `dropped` steps' files (latest.pt no longer
    lists them)."""
    step = payload["step"]
    if entered:
        save_checkpoint(step_file(folder, step), payload)
        point_best(folder, step_file(folder, kept[0]["step"]))
    save_checkpoint(folder / LATEST, payload)
    for old in dropped:
        step_file(folder, old).unlink(missing_ok=True)


def match_kept(folder: Path, kept: list[dict]) -> None:
    """Make a resumed run's `step-N.pt` files and `best.pt` what its latest.pt lists in `kept` (best
    first). A run killed after writing latest.pt and before removing the steps it dropped, or after
    writing a new step-N.pt and pointing best.pt at it but before latest.pt, leaves files that no
    checkpoint lists; nothing would ever remove them, and averaging the last K would take them."""
    listed = {step_file(folder, entry["step"]) for entry in kept}
    for path in step_files(folder).values():
        if path not in listed:
            path.unlink()
    if kept:
        point_best(folder, step_file(folder, kept[0]["step"]))
    else:
        (folder / BEST).unlink(missing_ok=True)
