"""A run's counters and files where it ends, is run again or resumed: the epoch budget, early stopping
remembered, the optimiser settings and ranking metric a resume may or may not change, skipped updates
counted across a resume, a vocabulary copy and best-K files left whole by a kill, and DDP ranks that
share one learning-rate schedule."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import config_of, metrics, quiet_env, run_main, torchrun_train

from seq2seq_attn.errors import UserError
from seq2seq_attn.runs import run_folder
from seq2seq_attn.runs.checkpoint import load_checkpoint
from seq2seq_attn.runs.run_folder import latest_checkpoints
from seq2seq_attn.training import train as train_module
from seq2seq_attn.training.log import text_line
from seq2seq_attn.vocab.pieces import Vocab

torch.set_num_threads(1)

NO_BLEU = "train.valid_bleu=false"


def latest(workdir: Path) -> dict:
    return load_checkpoint(workdir / "run" / "checkpoints" / "latest.pt")


def test_max_epochs_ends_with_the_last_batch_of_the_epoch(workdir):
    """train.max_epochs=1: every batch of epoch 0 and none of epoch 1 (the stream moves to the next epoch
    only when its next batch is drawn)."""
    train_module.train(config_of(workdir, "train.max_steps=0", "train.max_epochs=1", NO_BLEU))
    state = latest(workdir)
    (position,) = state["data"]
    assert (position["epoch"], position["index"]) == (0, state["step"])
    assert state["step"] > 1 and {r["epoch"] for r in metrics(workdir / "run") if "epoch" in r} == {0}


def test_a_run_ended_by_early_stopping_stays_ended_when_run_again(workdir):
    # a learning rate this small cannot move dev BLEU: no validation after the first improves it
    settings = ["train.learning_rate=1e-12", "train.min_learning_rate=0", "train.validate_every=2"]
    settings += ["train.patience=2", "train.keep_best=1", "train.max_steps=50"]
    train_module.train(config_of(workdir, *settings))
    assert latest(workdir)["step"] == 6
    train_module.train(config_of(workdir, *settings), resume=True)
    assert latest(workdir)["step"] == 6
    assert [r["step"] for r in metrics(workdir / "run") if "valid_bleu" in r] == [2, 4, 6]
    more_patience = config_of(workdir, *settings, "train.patience=4")
    train_module.train(more_patience, resume=True)  # a larger patience continues the run
    assert latest(workdir)["step"] == 10


def test_a_resumed_run_uses_its_configs_optimizer_settings(workdir):
    """Weight decay and betas set for the resumed sitting are used, as config.yaml records them; the
    moments come from the checkpoint."""
    adam = ["train.optimizer=adam", NO_BLEU]
    train_module.train(config_of(workdir, *adam, "train.max_steps=2"))
    saved_moments = latest(workdir)["optimizer"]["state"][0]["exp_avg"]
    seen = {}
    built = train_module.build_optimizer

    def spy(*args, **kwargs):
        optimizer = built(*args, **kwargs)
        real_step = optimizer.step

        def step(*a, **k):
            seen.setdefault("group", {k: v for k, v in optimizer.param_groups[0].items() if k != "params"})
            first = optimizer.param_groups[0]["params"][0]
            seen.setdefault("moments", optimizer.state[first]["exp_avg"].clone())
            return real_step(*a, **k)

        optimizer.step = step
        return optimizer

    train_module.build_optimizer = spy
    try:
        changed = ["train.weight_decay=0.1", "train.adam_betas=[0.5,0.9]", "train.max_steps=3"]
        train_module.train(config_of(workdir, *adam, *changed), resume=True)
    finally:
        train_module.build_optimizer = built
    assert seen["group"]["weight_decay"] == 0.1 and tuple(seen["group"]["betas"]) == (0.5, 0.9)
    torch.testing.assert_close(seen["moments"], saved_moments)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("train.optimizer=sgd", "train.optimizer was 'adam', now 'sgd'"),
        ("train.valid_bleu=true", "the ranking metric .* was 'loss', now 'bleu'"),
        ("train.valid_max_sentences=3", "train.valid_max_sentences was 0, now 3"),
        ("vocab.size=50", "config changed: vocab.size was 120, now 50"),
        ("data.dir=other", "config changed: data.dir was '.*/data', now '.*/other'"),
    ],
)
def test_resume_refuses_a_new_optimizer_ranking_metric_dev_set_or_vocabulary_and_writes_nothing(
    workdir, change, message
):
    """The optimiser's moments and the best-K and plateau values saved belong to the old ones (a dev loss
    of 3 sentences is no best for the loss of all); refused before the data folder is touched."""
    train_module.train(config_of(workdir, "train.max_steps=2", NO_BLEU))
    data = sorted(workdir.joinpath("data").rglob("*"))
    before = {path: path.stat().st_mtime_ns for path in data}
    with pytest.raises(UserError, match=f"cannot resume: {message}"):
        train_module.train(config_of(workdir, "train.max_steps=4", NO_BLEU, change))
    assert {path: path.stat().st_mtime_ns for path in sorted(workdir.joinpath("data").rglob("*"))} == before


def test_resume_refuses_a_dev_set_whose_text_changed_in_place(workdir):
    """The dev files rewritten where they are (their paths, hence the config, unchanged): the checkpoint's
    best-K and plateau values were measured on the old text."""
    train_module.train(config_of(workdir, "train.max_steps=2", NO_BLEU))
    for side in ("src", "tgt"):  # the same pairs in another order: the same sizes, other text
        path = workdir / "data" / f"valid.{side}"
        path.write_text(
            "".join(reversed(path.read_text(encoding="utf-8").splitlines(True))), encoding="utf-8"
        )
    with pytest.raises(UserError, match="latest.pt: cannot resume: the dev set's text changed"):
        train_module.train(config_of(workdir, "train.max_steps=3", NO_BLEU), resume=True)


def test_a_checkpoint_that_left_its_folders_to_the_defaults_resumes_from_where_they_were(
    workdir, monkeypatch
):
    """A checkpoint's data.dir '' (data/<name> under the working directory, as they were written before
    loading named the folders) is that folder, not a change of config."""
    train_module.train(config_of(workdir, "train.max_steps=2", NO_BLEU, "data.dir=data/tiny"))
    state = latest(workdir)
    state["config"]["data"]["dir"] = state["config"]["train"]["run_dir"] = ""
    torch.save(state, workdir / "run" / "checkpoints" / "latest.pt")
    monkeypatch.chdir(workdir)  # where data/tiny is, as it was
    train_module.train(config_of(workdir, "train.max_steps=3", NO_BLEU, "data.dir=data/tiny"), resume=True)
    assert latest(workdir)["step"] == 3


def test_a_project_folder_moved_elsewhere_resumes_there(workdir, tmp_path):
    """The config, data and run folders moved together (another disk, another machine): the checkpoint's
    paths name the old place, but the data folder is where it was beside the run folder, so the run
    learns its lexical shortlist and resumes (a data folder of another place is refused, above)."""
    train_module.train(config_of(workdir, "train.max_steps=2", NO_BLEU))
    moved = Path(shutil.move(workdir, tmp_path / "elsewhere"))
    learned = run_main(
        "lexical-shortlist", str(moved / "run"), "--sentences", "20", "--top-k", "3", text=True
    )
    assert learned.returncode == 0, learned.stderr  # from the data beside it, not from where it was
    train_module.train(config_of(moved, "train.max_steps=3", NO_BLEU), resume=True)
    assert latest(moved)["step"] == 3


def test_resume_keeps_an_average_named_like_a_step_file(workdir):
    """An average the user put in the checkpoint folder as step-1-2-avg.pt is not training's: a resume,
    which removes the step-N.pt files its checkpoint does not list, leaves it."""
    train_module.train(config_of(workdir, "train.max_steps=2", NO_BLEU))
    average = workdir / "run" / "checkpoints" / "step-1-2-avg.pt"
    assert run_main("average", str(workdir / "run"), "--last", "1", "-o", str(average)).returncode == 0
    train_module.train(config_of(workdir, "train.max_steps=3", NO_BLEU), resume=True)
    assert average.is_file()


def test_a_latest_pt_without_training_state_is_refused_in_one_line(workdir):
    """An average or a model copied over latest.pt holds weights but no optimiser, schedule or position."""
    train_module.train(config_of(workdir, "train.max_steps=2", NO_BLEU))
    state = latest(workdir)
    model_only = {key: state[key] for key in ("config", "model", "step", "vocab_fingerprint")}
    torch.save(model_only, workdir / "run" / "checkpoints" / "latest.pt")
    with pytest.raises(UserError, match="latest.pt: cannot resume: not a training checkpoint .no optimizer,"):
        train_module.train(config_of(workdir, "train.max_steps=3", NO_BLEU), resume=True)


def test_a_resume_under_another_schedule_takes_its_rates_not_the_plateaus_decay(workdir):
    train_module.train(config_of(workdir, "train.max_steps=2", NO_BLEU, "train.scheduler=plateau"))
    state = latest(workdir)
    state["schedule"]["plateau_scale"] = 0.25  # as after two decays
    torch.save(state, workdir / "run" / "checkpoints" / "latest.pt")
    constant = ["train.scheduler=constant", "train.learning_rate=0.01", "train.log_every=1"]
    train_module.train(config_of(workdir, "train.max_steps=3", NO_BLEU, *constant), resume=True)
    assert [r["lr"] for r in metrics(workdir / "run") if r["step"] == 3 and "lr" in r] == [0.01]


def test_a_fresh_start_removes_best_k_files_a_kill_left_before_the_first_latest(workdir):
    """Killed after writing step-N.pt and best.pt but before the first latest.pt: the run starts afresh,
    and the files no checkpoint lists would be averaged with its own (`average --last K`)."""
    folder = workdir / "run" / "checkpoints"
    folder.mkdir(parents=True)
    (folder / "step-5.pt").write_bytes(b"left by a kill")
    (folder / "best.pt").symlink_to("step-5.pt")
    train_module.train(config_of(workdir, "train.max_steps=2", NO_BLEU, "train.keep_best=2"))
    assert not (folder / "step-5.pt").exists()
    assert not (folder / "best.pt").exists() or (folder / "best.pt").resolve().name != "step-5.pt"


def test_a_resume_forgets_the_lines_of_train_log_after_its_checkpoint_as_metrics_jsonl(workdir):
    run = workdir / "run"
    train_module.train(config_of(workdir, "train.max_steps=2", NO_BLEU, "train.log_every=1"))
    for name, line in (("metrics.jsonl", '{"step": 7, "loss": 1.0}'), ("train.log", "step=7 loss=1.0")):
        with open(run / name, "a", encoding="utf-8") as handle:  # logged after latest.pt by a killed run
            handle.write(line + "\n")
    train_module.train(config_of(workdir, "train.max_steps=2", NO_BLEU, "train.log_every=1"), resume=True)
    kept = metrics(run)
    assert max(r["step"] for r in kept) == 2
    assert (run / "train.log").read_text(encoding="utf-8").splitlines() == [text_line(r) for r in kept]


def nan_at_update(number: int):
    """build_model whose model's output is NaN at training forward pass `number` (1-based)."""
    built = train_module.build_model
    calls = {"n": 0}

    def build(*args, **kwargs):
        model = built(*args, **kwargs)

        def hook(module, inputs, out):
            if module.training:
                calls["n"] += 1
                return out * float("nan") if calls["n"] == number else out
            return out

        model.register_forward_hook(hook)
        return model

    return build


def test_updates_skipped_between_log_lines_are_counted_across_a_resume(workdir, tmp_path, monkeypatch):
    """A checkpoint written between log lines (checkpoint_every) counts the updates skipped since the last
    line: the resumed run's total is the uninterrupted run's."""
    settings = ["train.max_steps=15", NO_BLEU, "train.validate_every=100", "train.log_every=5"]
    settings.append("train.checkpoint_every=9")
    reference = tmp_path / "reference"
    reference.mkdir()
    monkeypatch.setattr(train_module, "build_model", nan_at_update(8))
    overridden = [*settings, f"train.run_dir={reference}"]
    train_module.train(config_of(workdir, *overridden))
    monkeypatch.setattr(train_module, "build_model", nan_at_update(8))
    train_module.train(config_of(workdir, *settings), stop_after=9)  # ends right after step 9's checkpoint
    assert latest(workdir)["progress"]["skipped_updates"] == 1
    monkeypatch.undo()
    train_module.train(config_of(workdir, *settings), resume=True)
    want = load_checkpoint(reference / "checkpoints" / "latest.pt")["progress"]["skipped_updates"]
    assert latest(workdir)["progress"]["skipped_updates"] == want == 1


def test_a_vocabulary_copy_killed_half_way_leaves_no_partial_folder(workdir, monkeypatch):
    real_copy = Vocab.copy_to

    def killed(self, dest):
        real_copy(self, dest)
        (Path(dest) / "manifest.json").unlink()  # the models copied, the manifest not yet
        raise KeyboardInterrupt

    monkeypatch.setattr(Vocab, "copy_to", killed)
    with pytest.raises(KeyboardInterrupt):
        train_module.train(config_of(workdir, "train.max_steps=2", NO_BLEU))
    assert not (workdir / "run" / "vocab").exists()
    monkeypatch.undo()
    train_module.train(config_of(workdir, "train.max_steps=2", NO_BLEU))
    copied, prepared = (Vocab.load(workdir / folder / "vocab") for folder in ("run", "data"))
    assert copied.fingerprint() == prepared.fingerprint()
    assert not list((workdir / "run").glob(".vocab.*"))


def test_a_resume_removes_the_best_k_files_its_checkpoint_does_not_list(workdir, monkeypatch):
    """Killed after latest.pt and before the dropped step-N.pt files are removed: the resumed run removes
    them, so averaging the last K takes only checkpoints the run kept."""
    settings = ["train.validate_every=2", "train.keep_best=1", NO_BLEU, "train.max_steps=12"]
    real = run_folder.save_validated

    def killed_before_removing(folder, payload, kept, entered, dropped):
        real(folder, payload, kept, entered, [])
        if dropped:
            raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "save_validated", killed_before_removing)
    with pytest.raises(KeyboardInterrupt):
        train_module.train(config_of(workdir, *settings))
    folder = workdir / "run" / "checkpoints"
    assert len(list(folder.glob("step-*.pt"))) == 2  # one of them no longer kept
    monkeypatch.undo()
    train_module.train(config_of(workdir, *settings), stop_after=0)
    kept = latest(workdir)["progress"]["kept"]
    assert [path.name for path in folder.glob("step-*.pt")] == [f"step-{kept[0]['step']}.pt"]
    assert os.readlink(folder / "best.pt") == f"step-{kept[0]['step']}.pt"
    with pytest.raises(UserError, match="the run has 1 step-N.pt files"):
        latest_checkpoints(workdir / "run", 2)


DUMP_RANK = """
import os, sys, torch
from seq2seq_attn.training import step, train
if "INF_LOSS" in os.environ:  # RANK:UPDATE: that rank's loss at that update (from 1) + inf, gradients kept
    rank, update = map(int, os.environ["INF_LOSS"].split(":"))
    loss, calls = step.batch_loss, []
    def batch_loss(*args, **kwargs):
        calls.append(1)
        here = int(os.environ["RANK"]) == rank and len(calls) == update
        return loss(*args, **kwargs) + (float("inf") if here else 0.0)
    step.batch_loss = batch_loss
run = train._Loop.run
def dumped(self, stop_after):
    run(self, stop_after)
    torch.save({"model": self.model.state_dict(), "schedule": self.schedule.state_dict()},
               os.path.join(os.environ["DUMP"], f"rank{self.ranks.rank}.pt"))
train._Loop.run = dumped
from seq2seq_attn.cli import main
sys.argv[0] = "seq2seq"
main()
"""


def ddp_ranks_after(workdir: Path, folder: Path, settings: list[str], **env: str) -> list[dict]:
    """Each rank's weights and schedule at the end of a 2-rank DDP run of the tiny config (`env` added)."""
    script = folder / "dump_rank.py"
    script.write_text(DUMP_RANK)
    command = torchrun_train(workdir, *settings)
    command[command.index("-m", command.index("--standalone")) : command.index("train")] = [str(script)]
    root = str(Path(train_module.__file__).parents[2])
    result = subprocess.run(
        command,
        env={**quiet_env(), "DUMP": str(folder), "PYTHONPATH": root, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [torch.load(folder / f"rank{rank}.pt") for rank in (0, 1)]
    for name, value in ranks[0]["model"].items():
        assert torch.equal(value, ranks[1]["model"][name]), f"the ranks' {name} differ"
    return ranks


@pytest.mark.e2e
@pytest.mark.slow(seconds=15)
def test_ddp_ranks_lower_the_rate_together_on_a_plateau(workdir, tmp_path):
    """train.scheduler plateau under DDP: rank 0 validates, every rank takes its schedule, and the ranks'
    weights stay equal (ranks at different rates would drift apart on the same averaged gradients)."""
    # dev BLEU of a few updates stays 0: no validation improves it, and each lowers the rate
    settings = ["train.max_steps=12", "train.validate_every=3", "train.scheduler=plateau"]
    ranks = ddp_ranks_after(
        workdir, tmp_path, [*settings, "train.plateau_patience=0", "train.valid_max_sentences=4"]
    )
    assert ranks[0]["schedule"] == ranks[1]["schedule"] and ranks[0]["schedule"]["plateau_scale"] < 1


@pytest.mark.e2e
@pytest.mark.slow(seconds=15)
def test_ddp_ranks_skip_an_update_together(workdir, tmp_path):
    """A loss that is not finite on one rank, its gradients finite: every rank skips that update (the
    weights stay equal and the run counts one skipped update)."""
    settings = ["train.max_steps=8", "train.log_every=4", "train.validate_every=8", NO_BLEU]
    ddp_ranks_after(workdir, tmp_path, settings, INF_LOSS="1:3")
    assert [r["skipped"] for r in metrics(workdir / "run") if "skipped" in r] == [1, 1]
