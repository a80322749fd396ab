"""Faults during training, beyond test_train.py's kills between steps and its in-process torn
`torch.save`: SIGKILL in the middle of checkpoint writes, a real write error from the kernel while
checkpointing, and a metrics line torn by a crash. Each time nothing is lost: every checkpoint on disk
stays loadable and the resumed run ends bit-identical to an uninterrupted one (CPU).
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import ENV, assert_one_line_error

from seq2seq_attn.config import load_config
from seq2seq_attn.runs.checkpoint import load_checkpoint
from seq2seq_attn.runs.run_folder import resolve_checkpoint
from seq2seq_attn.training import train as train_module
from seq2seq_attn.training.log import read_metrics

# every update writes latest.pt, every 5th also a best-K step-N.pt and the best.pt link
SETTINGS = {
    "train.max_steps": 40,
    "train.checkpoint_every": 1,
    "train.validate_every": 5,
    "train.keep_best": 2,
    "train.valid_bleu": "false",
}


def command(folder: Path, settings: dict, *prefix: str) -> list[str]:
    sets = [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]
    return [sys.executable, *prefix, "--quiet", "train", str(folder / "tiny.yaml"), *sets]


def step_of(latest: Path) -> int:
    return load_checkpoint(latest)["step"] if latest.exists() else 0


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob(".*.tmp")) if folder.is_dir() else []


def assert_all_loadable(run: Path) -> None:
    """Every checkpoint file and the best.pt link (when present) load; the run resolves to one."""
    folder = run / "checkpoints"
    for path in folder.glob("*.pt"):
        assert path.is_file(), f"{path.name} is a dangling link"
        load_checkpoint(path)
    load_checkpoint(resolve_checkpoint(run))


def version(path: Path) -> tuple[int, int] | None:
    """Changes each time `path` is atomically replaced."""
    return (path.stat().st_ino, path.stat().st_mtime_ns) if path.exists() else None


def kill_during_training(folder: Path, rng: random.Random, in_a_write: bool) -> bool:
    """Start training, let it write 1 to 3 checkpoints, then SIGKILL it at a random instant (or as soon as
    the next checkpoint write has begun); return whether the kill left a half-written temporary file."""
    checkpoints = folder / "run" / "checkpoints"
    process = subprocess.Popen(command(folder, SETTINGS, "-m", "seq2seq_attn"), env=ENV)
    seen, writes, target = version(checkpoints / "latest.pt"), 0, rng.randint(1, 3)
    deadline = time.monotonic() + 120
    while process.poll() is None and writes < target:
        assert time.monotonic() < deadline, "training wrote no checkpoint"
        if (now := version(checkpoints / "latest.pt")) != seen:
            seen, writes = now, writes + 1
        time.sleep(0.001)
    time.sleep(rng.uniform(0.0, 0.01))
    while in_a_write and process.poll() is None and not temporaries(checkpoints):
        time.sleep(0.0005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    return bool(temporaries(checkpoints))


@pytest.mark.e2e
@pytest.mark.slow(seconds=35)
def test_sigkill_during_checkpoint_writes_loses_nothing(prepared, tmp_path):
    reference = tmp_path / "reference"
    shutil.copytree(prepared, reference)
    subprocess.run(command(reference, SETTINGS, "-m", "seq2seq_attn"), check=True, env=ENV, timeout=300)

    killed = tmp_path / "killed"
    shutil.copytree(prepared, killed)
    rng = random.Random(2024)
    torn = 0
    for attempt in range(10):  # alternate random instants and instants inside a write
        torn += kill_during_training(killed, rng, in_a_write=attempt % 2 == 1)
        assert_all_loadable(killed / "run")
        if torn >= 2 and attempt >= 3:
            break
    assert torn >= 2, "no kill landed inside a checkpoint write"
    assert step_of(killed / "run" / "checkpoints" / "latest.pt") < SETTINGS["train.max_steps"]
    subprocess.run(command(killed, SETTINGS, "-m", "seq2seq_attn"), check=True, env=ENV, timeout=300)

    ours, theirs = (folder / "run" / "checkpoints" for folder in (killed, reference))
    assert temporaries(ours) == []  # the temporaries of the killed writes were cleaned up
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir())
    assert (ours / "best.pt").readlink() == (theirs / "best.pt").readlink()
    a, b = (load_checkpoint(folder / "latest.pt") for folder in (ours, theirs))
    assert a["step"] == b["step"] == SETTINGS["train.max_steps"]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])


# limit the size of any file the process writes: the kernel then fails the write (EFBIG), a real I/O
# error surfacing from inside torch.save, like a full disk
LIMITED = (
    "import resource, runpy, sys; limit = int(sys.argv.pop(1)); "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)); "
    "runpy.run_module('seq2seq_attn', run_name='__main__', alter_sys=True)"
)


@pytest.mark.slow
def test_write_error_while_checkpointing_stops_clearly_and_keeps_the_previous_checkpoint(
    prepared,
    tmp_path,
):
    overrides = [f"train.run_dir={tmp_path / 'run'}", "train.valid_bleu=false"]
    latest = train_module.train(load_config(prepared / "tiny.yaml", [*overrides, "train.max_steps=4"]))
    latest = latest / "checkpoints" / "latest.pt"
    before = latest.read_bytes()

    settings = {
        **SETTINGS,
        "train.max_steps": 8,
        "train.validate_every": 100,
        "train.run_dir": tmp_path / "run",
    }
    limit = str(len(before) // 2)  # every other file the resumed run writes is smaller
    result = subprocess.run(
        command(prepared, settings, "-c", LIMITED, limit), capture_output=True, env=ENV, timeout=300
    )
    assert_one_line_error(
        result, "latest.pt: not written (File too large); any previous version is unchanged"
    )
    assert latest.read_bytes() == before
    assert temporaries(latest.parent) == []
    # the previous checkpoint is usable: training goes on from it
    train_module.train(load_config(prepared / "tiny.yaml", [*overrides, "train.max_steps=8"]))
    assert load_checkpoint(latest)["step"] == 8


def test_a_metrics_line_torn_by_a_crash_does_not_stop_resume_or_plots(prepared, tmp_path):
    overrides = [f"train.run_dir={tmp_path / 'run'}", "train.valid_bleu=false", "train.log_every=2"]
    run = train_module.train(load_config(prepared / "tiny.yaml", [*overrides, "train.max_steps=4"]))
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"step": 6, "loss": 3.1')  # the power went out mid-append
    assert [r["step"] for r in read_metrics(run)] == [2, 4, 4]

    train_module.train(load_config(prepared / "tiny.yaml", [*overrides, "train.max_steps=8"]))
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2, 4, 4, 6, 8, 8]
