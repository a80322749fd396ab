"""`seq2seq train`: learning, run-directory layout, validation and early stopping, guarded updates,
atomic checkpoints, exact resume after SIGKILL, refused resume, and DDP with gloo."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import (
    config_of,
    ddp_train,
    metrics,
    parameters,
    quiet_env,
    tiny_config,
    torchrun_train,
    train_cli,
)

from seq2seq_attn.config import load_config
from seq2seq_attn.errors import UserError
from seq2seq_attn.runs.checkpoint import load_checkpoint
from seq2seq_attn.runs.run_folder import load_trained
from seq2seq_attn.training import train as train_module
from seq2seq_attn.training.optim import Schedule
from seq2seq_attn.training.state import Progress

torch.set_num_threads(1)


@pytest.mark.slow
def test_loss_falls_and_run_dir_is_complete(workdir):
    run = train_module.train(
        config_of(workdir, "train.max_steps=160", "train.validate_every=40", "train.log_every=10")
    )
    records = metrics(run)
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 16
    assert sum(losses[-3:]) < 0.7 * sum(losses[:3])
    valid = [r for r in records if "valid_loss" in r]
    assert [r["step"] for r in valid] == [40, 80, 120, 160]
    assert {
        "loss",
        "ppl",
        "lr",
        "tokens_per_s",
        "padding",
        "epoch",
        "skipped",
        "grad_norm",
        "clipped",
    } <= set(records[0])
    assert {"valid_loss", "valid_ppl", "valid_bleu"} <= set(valid[0])
    assert (run / "config.yaml").is_file() and (run / "train.log").is_file()
    assert load_config(run / "config.yaml").model.hidden_size == 24  # the resolved config round-trips
    ckpt = run / "checkpoints"
    assert (ckpt / "latest.pt").is_file() and (ckpt / "best.pt").is_symlink()
    assert len(list(ckpt.glob("step-*.pt"))) <= 3  # keep_best default
    model, vocab, _ = load_trained(run)
    assert vocab.src_size == 120 and not model.training


@pytest.mark.slow
def test_compiled_attention_trains_the_same_run(workdir):
    """train.compile: the same losses, dev BLEU (search runs compiled too) and weights as eager."""
    runs = []
    for compiled in ("true", "false"):
        overrides = ("train.max_steps=20", f"train.compile={compiled}", f"train.run_dir=run-{compiled}")
        runs.append(train_module.train(config_of(workdir, *overrides)))
    (losses, bleus), (want_losses, want_bleus) = (
        ([r[key] for r in metrics(run) if key in r] for key in ("loss", "valid_bleu")) for run in runs
    )
    assert len(losses) == 4 and len(bleus) == 2
    assert losses == pytest.approx(want_losses, rel=1e-4) and bleus == pytest.approx(want_bleus, abs=0.01)
    weights, want_weights = (parameters(run / "checkpoints" / "latest.pt") for run in runs)
    for name, value in want_weights.items():
        torch.testing.assert_close(weights[name], value, rtol=1e-3, atol=1e-5, msg=name)


def test_keep_best_and_early_stopping(workdir):
    # a learning rate this small cannot move dev BLEU: no validation after the first improves it
    config = config_of(
        workdir,
        "train.learning_rate=1e-12",
        "train.min_learning_rate=0",
        "train.validate_every=2",
        "train.patience=2",
        "train.keep_best=1",
        "train.max_steps=50",
    )
    run = train_module.train(config)
    valid = [r for r in metrics(run) if "valid_bleu" in r]
    assert [r["step"] for r in valid] == [2, 4, 6]  # stopped after 2 validations without improvement
    kept = sorted(p.name for p in (run / "checkpoints").glob("step-*.pt"))
    assert kept == ["step-2.pt"]
    assert os.readlink(run / "checkpoints" / "best.pt") == "step-2.pt"
    assert load_checkpoint(run / "checkpoints" / "latest.pt")["step"] == 6


def test_without_dev_bleu_the_loss_ranks_the_checkpoints(workdir):
    """train.valid_bleu off with early_stop_metric bleu (the default): no BLEU is computed, so the dev
    loss picks the best checkpoint and judges patience (a BLEU of 0 at every validation would keep the
    first checkpoint and stop the run)."""
    config = config_of(
        workdir,
        "train.valid_bleu=false",
        "train.validate_every=5",
        "train.patience=2",
        "train.keep_best=1",
        "train.max_steps=20",
    )
    assert (config.train.early_stop_metric, config.train.ranking_metric) == ("bleu", "loss")
    run = train_module.train(config)
    valid = [(r["step"], r["valid_loss"]) for r in metrics(run) if "valid_loss" in r]
    assert [step for step, _ in valid] == [5, 10, 15, 20]  # the loss falls: no early stop
    best_step = min(valid, key=lambda record: record[1])[0]
    assert best_step > 5 and os.readlink(run / "checkpoints" / "best.pt") == f"step-{best_step}.pt"


@pytest.mark.parametrize(
    ("metric", "values"), [("bleu", [10, 12, 12, 11, 13]), ("loss", [3, 2.5, 2.5, 2.6, 2])]
)
def test_best_k_early_stopping_and_plateau_schedule_judge_improvement_alike(metric, values):
    """Only a strictly better dev value (higher BLEU, lower loss) is an improvement: it resets early
    stopping's and the plateau schedule's counts of validations without one; ties rank by step."""
    raw = {"scheduler": "plateau", "plateau_patience": 1, "early_stop_metric": metric, "learning_rate": 1.0}
    schedule = Schedule(torch.optim.SGD([torch.zeros(1, requires_grad=True)]), tiny_config(train=raw).train)
    progress = Progress()
    seen = []
    for step, value in enumerate(values, start=1):
        progress.step = step
        entered, dropped = progress.validated({metric: value}, metric, keep=2)
        schedule.validated(value)
        seen.append((entered, dropped, progress.bad_validations, schedule.plateau_scale))
    assert seen == [
        (True, [], 0, 1.0),
        (True, [], 0, 1.0),
        (True, [1], 1, 1.0),  # a tie enters the best 2 after the earlier step
        (False, [], 2, 0.5),  # a second validation without improvement: more than plateau_patience
        (True, [3], 0, 0.5),
    ]
    assert [k["step"] for k in progress.kept] == [5, 2]


def test_non_finite_loss_is_skipped_and_never_reaches_the_weights(workdir, monkeypatch):
    built = train_module.build_model
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        model = built(*args, **kwargs)

        def hook(module, inputs, output):
            calls["n"] += 1
            return output * float("nan") if module.training and calls["n"] == 3 else output

        model.register_forward_hook(hook)
        return model

    monkeypatch.setattr(train_module, "build_model", poisoned)
    run = train_module.train(config_of(workdir, "train.max_steps=10", "train.valid_bleu=false"))
    last = [r for r in metrics(run) if "skipped" in r][-1]
    assert last["skipped"] == 1
    weights = parameters(run / "checkpoints" / "latest.pt")
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_many_non_finite_updates_stop_the_run(workdir, monkeypatch):
    built = train_module.build_model

    def always_nan(*args, **kwargs):
        model = built(*args, **kwargs)
        model.register_forward_hook(lambda m, i, out: out * float("nan") if m.training else out)
        return model

    monkeypatch.setattr(train_module, "build_model", always_nan)
    with pytest.raises(UserError, match="consecutive updates had a non-finite loss"):
        train_module.train(config_of(workdir, "train.max_nonfinite=5", "train.max_steps=100"))


def test_interrupted_checkpoint_write_keeps_the_previous_one(workdir, monkeypatch):
    run = train_module.train(config_of(workdir, "train.max_steps=10", "train.valid_bleu=false"))
    latest = run / "checkpoints" / "latest.pt"
    before = parameters(latest)

    def torn_save(obj, handle, *args, **kwargs):
        handle.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", torn_save)
    with pytest.raises(OSError, match="No space left"):
        train_module.train(config_of(workdir, "train.max_steps=20", "train.valid_bleu=false"))
    after = parameters(latest)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.endswith(".tmp")]


def test_resume_is_refused_when_vocabulary_or_model_changed(workdir):
    train_module.train(config_of(workdir, "train.max_steps=4", "train.valid_bleu=false"))
    with pytest.raises(UserError, match=r"config changed: model.hidden_size was 24, now 32"):
        train_module.train(config_of(workdir, "train.max_steps=8", "model.hidden_size=32"))
    with pytest.raises(UserError, match=r"config changed: vocab.size was 120, now 100"):
        train_module.train(config_of(workdir, "train.max_steps=8", "vocab.size=100"))
    latest = workdir / "run" / "checkpoints" / "latest.pt"
    state = load_checkpoint(latest)
    state["vocab_fingerprint"] = "another vocabulary's"  # the same settings, trained on other text
    torch.save(state, latest)
    with pytest.raises(UserError, match=r"cannot resume: the vocabulary changed"):
        train_module.train(config_of(workdir, "train.max_steps=8", "train.valid_bleu=false"))


def test_resume_flag_without_checkpoint_is_an_error(workdir):
    with pytest.raises(UserError, match="cannot resume: the run has no checkpoint"):
        train_module.train(config_of(workdir), resume=True)


@pytest.mark.e2e
@pytest.mark.slow(seconds=30)
def test_sigkill_then_resume_is_bit_identical(prepared, tmp_path):
    settings = [
        "--set",
        "train.max_steps=40",
        "--set",
        "train.checkpoint_every=3",
        "--set",
        "train.validate_every=100",
        "--set",
        "train.valid_bleu=false",
    ]
    reference = tmp_path / "reference"
    shutil.copytree(prepared, reference)
    subprocess.run(train_cli(reference, *settings), check=True, env=quiet_env(), timeout=300)

    killed = tmp_path / "killed"
    shutil.copytree(prepared, killed)
    latest = killed / "run" / "checkpoints" / "latest.pt"
    for wait in (0.0, 0.15, 0.4):  # kill at different points: mid-step, mid-write, between steps
        process = subprocess.Popen(train_cli(killed, *settings), env=quiet_env())
        deadline = time.monotonic() + 120
        step_before = load_checkpoint(latest)["step"] if latest.exists() else 0
        while time.monotonic() < deadline and process.poll() is None:
            if latest.exists() and load_checkpoint(latest)["step"] > step_before:
                break
            time.sleep(0.02)
        time.sleep(wait)
        process.send_signal(signal.SIGKILL)
        process.wait()
        load_checkpoint(latest)  # never unreadable
    subprocess.run(train_cli(killed, *settings), check=True, env=quiet_env(), timeout=300)

    a = parameters(reference / "run" / "checkpoints" / "latest.pt")
    b = parameters(latest)
    assert load_checkpoint(latest)["step"] == 40
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed run diverged from the uninterrupted run"


@pytest.mark.e2e
@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_before_exiting(workdir):
    process = subprocess.Popen(
        train_cli(workdir, "--set", "train.max_steps=100000", "--set", "train.valid_bleu=false"),
        env=quiet_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics_file = workdir / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (metrics_file.exists() and metrics_file.read_text().strip()):
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode != 0
    assert "checkpoint saved at step" in stderr
    state = load_checkpoint(workdir / "run" / "checkpoints" / "latest.pt")
    assert state["step"] >= 5


@pytest.mark.e2e
@pytest.mark.slow(seconds=12)
@pytest.mark.parametrize("processes", [1, 2])
def test_ddp_gloo(workdir, processes):
    ddp_train(workdir, processes, "gloo")


def worker_pids(parent: int) -> list[int]:
    """The processes torchrun started (Linux /proc), oldest first."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return sorted(int(pid) for pid in children)


@pytest.mark.e2e
@pytest.mark.slow(seconds=12)
def test_ddp_ranks_stop_together_when_one_rank_is_signalled(workdir):
    """SIGTERM that reaches one rank only: both stop after the same update and a checkpoint is saved,
    where a rank stopping alone would wait forever in the checkpoint's gathers."""
    command = torchrun_train(
        workdir, "train.max_steps=100000", "train.log_every=4", "train.validate_every=1000000"
    )
    env = {**quiet_env(), "PYTHONFAULTHANDLER": "1"}
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    workers: list[int] = []
    try:
        metrics_file = workdir / "run" / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(_lines(metrics_file)) < 2:
            time.sleep(0.05)
        assert len(_lines(metrics_file)) >= 2, "the DDP run logged nothing"
        workers = worker_pids(process.pid)
        assert len(workers) == 2
        os.kill(workers[1], signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:  # a hung run: torchrun and its workers (each in a session of its own) must not outlive the test
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode != 0
    assert stderr.count("stopped by signal 15") == 2, stderr[-4000:]  # both ranks, one signal
    state = load_checkpoint(workdir / "run" / "checkpoints" / "latest.pt")
    assert state["step"] % 4 == 0 and state["step"] >= 8  # at a log interval, after the logged ones
    assert len(state["data"]) == 2 and state["data"][0] == state["data"][1]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_gradient_norm_before_clipping_and_the_clipped_share_are_logged(workdir):
    """Each log line carries the mean gradient norm before clipping and the share of clipped updates."""
    first = {}
    for clip in ("1e-9", "0", "1e9"):  # clip everything, clipping off, clip nothing
        run = workdir / f"clip-{clip}"
        sets = ("train.max_steps=4", "train.log_every=1", "train.valid_bleu=false", f"train.run_dir={run}")
        records = [
            r
            for r in metrics(train_module.train(config_of(workdir, *sets, f"train.clip_norm={clip}")))
            if "loss" in r
        ]
        assert [r["clipped"] for r in records] == [1.0 if clip == "1e-9" else 0.0] * 4
        assert all(r["grad_norm"] > 0 for r in records)
        first[clip] = records[0]["grad_norm"]  # the same model and batch: the same norm before clipping
    assert first["1e-9"] == pytest.approx(first["0"]) == pytest.approx(first["1e9"])


def test_tensorboard_events_when_installed(workdir, monkeypatch):
    """With the optional `tensorboard` package present, every logged number also goes to TensorBoard."""
    import types

    written: list[tuple[str, float, int]] = []

    class Writer:
        def __init__(self, log_dir: str) -> None:
            self.log_dir = log_dir

        def add_scalar(self, key: str, value: float, step: int) -> None:
            written.append((key, value, step))

        def close(self) -> None:
            written.append(("closed", 0.0, 0))

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=Writer))
    run = train_module.train(config_of(workdir, "train.max_steps=10", "train.valid_bleu=false"))
    assert ("loss", metrics(run)[0]["loss"], 5) in written
    assert {key for key, _, _ in written} >= {"loss", "lr", "tokens_per_s", "valid_loss", "closed"}


def test_a_data_folder_rewritten_during_a_run_does_not_change_what_it_validates_on(workdir: Path) -> None:
    """Another process rewriting the shared data folder mid-run (`seq2seq vocab` with another size, new dev
    references) must not score the running model on another vocabulary's ids or another dev set."""
    from seq2seq_attn.model import build_model
    from seq2seq_attn.training import validate as validate_module
    from seq2seq_attn.vocab.cache import build_cache
    from seq2seq_attn.vocab.pieces import build_vocab

    config = load_config(workdir / "tiny.yaml", ["train.valid_bleu=true"])
    vocab = build_vocab(config)
    torch.manual_seed(0)
    model = build_model(config.model, vocab.src_size, vocab.tgt_size)
    dev = validate_module.load_dev(config)
    before = validate_module.validate(model, dev, config, vocab, torch.device("cpu"), bf16=False)
    other = load_config(workdir / "tiny.yaml", [f"vocab.size={config.vocab.size + 20}"])
    build_cache(other, build_vocab(other))  # the folder's vocabulary and cache replaced
    (config.data_dir / "valid.tgt").write_text("autre chose\n" * len(dev.src), encoding="utf-8")
    after = validate_module.validate(model, dev, config, vocab, torch.device("cpu"), bf16=False)
    assert after == before
    now = validate_module.load_dev(config)
    assert now.references != dev.references and [a.tolist() for a in now.src] != [a.tolist() for a in dev.src]


def test_validation_forces_eos_instead_of_retrying(trained_run: Path, monkeypatch: pytest.MonkeyPatch):
    """Dev BLEU searches at train.valid_beam with EOS forced at the maximum length, even under the authors'
    retry rule: an early model would otherwise search most long sentences again with ever wider beams."""
    from seq2seq_attn.training import validate as validate_module

    model, vocab, config = load_trained(trained_run)
    config.decode.at_max_len, config.decode.beam_size, config.train.valid_beam = "retry", 5, 2
    config.train.valid_bleu = True
    searched = []
    real = validate_module.translate_ids
    monkeypatch.setattr(
        validate_module, "translate_ids", lambda m, s, cfg, d: searched.append(cfg) or real(m, s, cfg, d)
    )
    dev = validate_module.load_dev(config)
    result = validate_module.validate(model, dev, config, vocab, torch.device("cpu"), bf16=False)
    assert [(cfg.at_max_len, cfg.beam_size, cfg.nbest) for cfg in searched] == [("force_eos", 2, 1)]
    assert result["bleu"] >= 0.0 and result["ppl"] > 1.0
