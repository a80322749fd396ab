"""One writer per run and data folder (io.py), readers beside a training run, and the empty config.

Concurrency is tested with real processes. A writer is caught while it holds its lock and frozen there
with SIGSTOP, so that the second writer meets the lock for certain; then it is let go and must end intact.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from helpers import (
    ENV,
    assert_one_line_error,
    make_run_dir,
    metrics,
    parameters,
    quiet_env,
    run_main,
    seq2seq,
    snapshot,
    tiny_config,
    train_cli,
    write_corpus,
    write_tiny_config,
)

from seq2seq_attn.io import LOCK_FILE, exclusive
from seq2seq_attn.runs import average
from seq2seq_attn.runs.checkpoint import load_checkpoint, save_checkpoint
from seq2seq_attn.runs.run_folder import LATEST, average_latest, checkpoint_dir, load_trained
from seq2seq_attn.vocab.cache import load_cache
from seq2seq_attn.vocab.pieces import Vocab

WAIT = 120  # seconds before a test gives up on a process that should have done something
SEQ2SEQ = [sys.executable, "-m", "seq2seq_attn", "--quiet"]


def holder_pid(folder: Path) -> int | None:
    """The PID recorded in `folder`'s lock file, or None when there is none (yet)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return json.loads((folder / LOCK_FILE).read_text(encoding="utf-8"))["pid"]
    return None


def wait_for(condition: Callable[[], bool], process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert process.poll() is None, f"the process ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.002)


@contextlib.contextmanager
def frozen_holding(process: subprocess.Popen, folder: Path) -> Iterator[None]:
    """Stop `process` (SIGSTOP) at an instant it holds `folder`'s lock; let it go on (SIGCONT) on exit.

    A holder removes its record only when it releases the lock, so reading its PID there once it is
    stopped proves it is stopped while holding the lock.
    """
    while True:
        wait_for(lambda: holder_pid(folder) == process.pid, process, f"it locked {folder}")
        process.send_signal(signal.SIGSTOP)
        if holder_pid(folder) == process.pid:
            break
        process.send_signal(signal.SIGCONT)  # it released the lock meanwhile: catch it the next time
    try:
        yield
    finally:
        process.send_signal(signal.SIGCONT)


@contextlib.contextmanager
def running(command: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """A process that is killed, if it still runs, when the block ends: a failed test leaves none behind."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def assert_refused(result: subprocess.CompletedProcess, folder: Path, holder: int) -> None:
    """The one-line error naming the folder and the process that holds it."""
    assert_one_line_error(result, f"{folder}: in use by another writer, PID {holder} on host")


@pytest.mark.e2e
@pytest.mark.slow(seconds=10)
def test_a_second_trainer_is_refused_and_the_first_ends_intact(prepared, tmp_path):
    folder, run = tmp_path / "w", tmp_path / "w" / "run"
    shutil.copytree(prepared, folder)
    settings = ["--set", "train.max_steps=20", "--set", "train.valid_bleu=false"]  # log 5, validate 10
    with running(train_cli(folder, *settings), quiet_env()) as first:
        wait_for(lambda: (run / "metrics.jsonl").is_file(), first, "it logged")
        with frozen_holding(first, run):
            before = snapshot(run)
            second = subprocess.run(
                train_cli(folder, *settings), capture_output=True, env=quiet_env(), timeout=WAIT
            )
            assert_refused(second, run, first.pid)
            assert snapshot(run) == before  # the second one wrote nothing
        assert first.wait(timeout=WAIT) == 0
    assert [record["step"] for record in metrics(run)] == [5, 10, 10, 15, 20, 20]  # one writer's lines
    assert load_checkpoint(checkpoint_dir(run) / LATEST)["step"] == 20
    assert not (run / LOCK_FILE).exists()


@pytest.mark.e2e
@pytest.mark.slow(seconds=14)
def test_a_killed_trainer_leaves_no_lock_and_resumes_exactly(prepared, tmp_path):
    settings = [
        *("--set", "train.max_steps=20", "--set", "train.checkpoint_every=3"),
        *("--set", "train.validate_every=100", "--set", "train.valid_bleu=false"),
    ]
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    for folder in (reference, killed):
        shutil.copytree(prepared, folder)
    latest = checkpoint_dir(killed / "run") / LATEST
    with running(train_cli(reference, *settings), quiet_env()) as uninterrupted:
        with running(train_cli(killed, *settings), quiet_env()) as process:
            wait_for(latest.exists, process, "it wrote a checkpoint")
        assert process.returncode == -signal.SIGKILL
        assert holder_pid(killed / "run") == process.pid  # its record is left, its lock is not
        subprocess.run(train_cli(killed, *settings), check=True, env=quiet_env(), timeout=WAIT)  # at once
        assert uninterrupted.wait(timeout=WAIT) == 0
    expected = parameters(checkpoint_dir(reference / "run") / LATEST)
    resumed = parameters(latest)
    assert load_checkpoint(latest)["step"] == 20
    assert all(torch.equal(resumed[name], expected[name]) for name in expected)


@pytest.mark.slow
def test_a_second_vocab_on_a_data_folder_is_refused(tmp_path):
    data = tmp_path / "data"
    write_corpus(data, n=4000)  # enough work that the first is caught holding its lock
    config = write_tiny_config(tmp_path / "exp.yaml", data={"dir": "data"})
    with running([*SEQ2SEQ, "vocab", str(config)], ENV) as first:
        with frozen_holding(first, data):
            before = snapshot(data)
            assert_refused(seq2seq("vocab", str(config), cwd=tmp_path), data, first.pid)
            assert snapshot(data) == before
        assert first.wait(timeout=WAIT) == 0
    vocab = Vocab.load(data / "vocab")
    assert len(load_cache(data / "vocab", "train").src) == 4000
    assert vocab.src_size == 40
    assert not (data / LOCK_FILE).exists()


@pytest.mark.slow
def test_the_data_lock_is_taken_only_to_write(tmp_path):
    """A command that finds the data up to date writes nothing and needs no lock (so trainings started
    side by side share a data folder, as in reproduce.py --parallel); one that must write is refused."""
    write_corpus(tmp_path / "data")
    config = write_tiny_config(tmp_path / "exp.yaml", data={"dir": "data"})
    assert seq2seq("vocab", str(config), cwd=tmp_path).returncode == 0
    with exclusive(tmp_path / "data"):
        with exclusive(tmp_path / "data"):  # the holder may take it again (nested calls)
            assert holder_pid(tmp_path / "data") == os.getpid()
        assert seq2seq("vocab", str(config), cwd=tmp_path).returncode == 0  # up to date: no lock needed
        assert_refused(seq2seq("vocab", "--force", str(config), cwd=tmp_path), tmp_path / "data", os.getpid())
    assert not (tmp_path / "data" / LOCK_FILE).exists()


@pytest.mark.e2e
@pytest.mark.slow(seconds=12)
def test_readers_load_a_run_while_it_writes_checkpoints(prepared, tmp_path):
    """best.pt is repointed and best-K step files are removed all the time; every load still succeeds."""
    folder, run = tmp_path / "w", tmp_path / "w" / "run"
    shutil.copytree(prepared, folder)
    settings = {
        "train.max_steps": 100000,
        "train.checkpoint_every": 1,
        "train.validate_every": 2,
        "train.keep_best": 2,
        "train.valid_bleu": "false",
    }
    sets = [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]
    source = tmp_path / "in.txt"
    source.write_text("the cat sat\n", encoding="utf-8")
    translate = ["translate", "--model", str(run), "-i", str(source), "-o", str(tmp_path / "out.txt")]
    with running(train_cli(folder, *sets), quiet_env()) as trainer:
        wait_for(lambda: len(list(checkpoint_dir(run).glob("step-*.pt"))) >= 2, trainer, "it kept 2")
        with running([*SEQ2SEQ, *translate, "--average", "2"], ENV) as reader:
            steps_seen = set()  # of latest.pt: the trainer went on writing while we read
            deadline = time.monotonic() + WAIT
            while reader.poll() is None or len(steps_seen) < 5:
                assert trainer.poll() is None and time.monotonic() < deadline
                load_trained(run)
                average_latest(run, 2)
                steps_seen.add(load_checkpoint(checkpoint_dir(run) / LATEST)["step"])
        assert reader.returncode == 0
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").count("\n") == 1


def test_averaging_lists_again_when_training_prunes_a_checkpoint_meanwhile(tmp_path, monkeypatch):
    """The instant the readers' test above rarely hits: step-1.pt listed, then removed before it is read."""
    config = tiny_config(tmp_path)
    write_corpus(config.data_dir)
    folder = checkpoint_dir(make_run_dir(config, steps=(1, 2)))
    load = average.load_checkpoint

    def training_moves_on(path: Path, *args, **kwargs) -> dict:
        if path.name == "step-1.pt" and path.exists():  # a better step-3 is kept, step-1 pruned
            save_checkpoint(folder / "step-3.pt", {**load(folder / "step-2.pt"), "step": 3})
            path.unlink()
        return load(path, *args, **kwargs)

    monkeypatch.setattr(average, "load_checkpoint", training_moves_on)
    averaged, paths = average_latest(config.run_dir, 2)
    assert [path.name for path in paths] == ["step-2.pt", "step-3.pt"]
    assert averaged["step"] == 3


@pytest.mark.parametrize(
    "text", ["", "# only a comment\n", "{}\n", "null\n"], ids=["empty", "comment", "{}", "null"]
)
def test_an_empty_config_is_an_error_naming_the_file(tmp_path, text):
    config = tmp_path / "exp.yaml"
    config.write_text(text, encoding="utf-8")
    result = run_main("--quiet", "train", str(config), cwd=tmp_path)
    assert_one_line_error(result, f"{config}: empty config; a config must set at least `name`")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml"]  # no data/ or runs/: nothing ran
