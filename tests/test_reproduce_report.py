"""scripts/reproduce.py's summary on a tiny report: it says in which length buckets RNNsearch beats
RNNencdec significantly."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import load_script, make_run_dir, noisy, tiny_config, write_corpus

from seq2seq_attn.config import EvalConfig
from seq2seq_attn.errors import UserError
from seq2seq_attn.evaluation.metrics.by_length import evaluate
from seq2seq_attn.evaluation.metrics.inputs import System

ROOT = Path(__file__).resolve().parent.parent


def test_summary_names_the_buckets_where_attention_wins_significantly():
    """RNNencdec equals RNNsearch under 10 words and is much worse above: only 10-20 and 20+ are wins."""
    sources = [" ".join(f"w{i}" for i in range(3 + n % 27)) for n in range(240)]
    references = [line.upper() for line in sources]
    search = noisy(references, 0.1, seed=1)
    worse = noisy(references, 0.6, seed=2)
    encdec = [s if len(src.split()) < 10 else w for s, w, src in zip(search, worse, sources, strict=True)]
    systems = [System("RNNsearch", search), System("RNNencdec", encdec)]
    config = EvalConfig(buckets=[0, 10, 20], bootstrap=200)
    report = evaluate(systems, references, sources, by_length=True, config=config)

    reproduce = load_script("reproduce")
    finding = reproduce.significance_finding(report, "RNNsearch", "RNNencdec")
    assert finding == (
        "RNNsearch beats RNNencdec significantly (paired-bs, p < 0.05) in the buckets 10-20, 20+; "
        "not significantly in 0-10."
    )
    # the same answer whichever system the comparison lists first
    flipped = evaluate(systems[::-1], references, sources, by_length=True, config=config)
    assert reproduce.significance_finding(flipped, "RNNsearch", "RNNencdec") == finding
    verdicts = reproduce.check_criteria(report, "RNNsearch", "RNNencdec")
    summary = reproduce._summary(
        [("", report)], {"training": 60.0}, verdicts, [finding], argparse.Namespace()
    )
    assert f"- {finding}" in summary and "[report.html](report.html)" in summary
    assert "| RNNsearch | 10-20 |" in summary


def test_the_criteria_read_the_rows_of_all_sentences_only():
    """A word-vocabulary run adds "no UNK" rows; the length criteria judge the "all" rows."""
    rows = [
        {"subset": subset, "bucket": bucket, "bleu": bleu, "count": 5}
        for subset, offset in (("all", 0.0), ("no UNK", 50.0))
        for bucket, bleu in (("all", 10.0), ("0-10", 20.0), ("10-20", 5.0))
        for bleu in [bleu + offset]
    ]
    report = {"systems": [{"label": "S", "rows": rows}]}
    assert load_script("reproduce")._bleu_by_bucket(report, "S") == {"0-10": 20.0, "10-20": 5.0}


def _report(search: dict[str, float], encdec: dict[str, float]) -> dict:
    """A by-length report of two systems with these bucket BLEUs (all sentences), buckets from 0 by 10."""
    edges = [10 * i for i in range(len(search))]
    buckets = [{"label": label} for label in search]
    systems = [
        {
            "label": label,
            "rows": [{"subset": "all", "bucket": b, "bleu": v, "count": 9} for b, v in bleu.items()],
        }
        for label, bleu in (("RNNsearch", search), ("RNNencdec", encdec))
    ]
    return {"systems": systems, "edges": edges, "buckets": buckets}


def _run_log(folder: Path, validations: list[tuple[int, float, float]]) -> Path:
    """A run folder whose metrics.jsonl holds training lines and these (update, dev ppl, dev BLEU)."""
    folder.mkdir()
    lines = [json.dumps({"step": step, "loss": 0.1}) for step, _, _ in validations]
    lines += [json.dumps({"step": s, "valid_ppl": p, "valid_bleu": b}) for s, p, b in validations]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_a_failed_criterion_gives_its_ratio_and_what_the_training_log_says(tmp_path):
    reproduce = load_script("reproduce")
    report = _report(
        {"0-10": 98.73, "10-20": 97.0, "20-30": 90.0, "30+": 82.74},
        {"0-10": 91.94, "10-20": 68.0, "20-30": 46.0, "30+": 18.58},
    )
    unstable = _run_log(tmp_path / "search", [(500, 1.25, 75.4), (1000, 1.35, 80.9), (1250, 2.07, 68.4)])
    fine = _run_log(tmp_path / "encdec", [(500, 3.0, 20.0), (1000, 2.5, 25.0), (1500, 2.6, 24.0)])
    verdicts = reproduce.check_criteria(
        report, "RNNsearch", "RNNencdec", {"RNNsearch": unstable, "RNNencdec": fine}
    )
    assert verdicts[0] == (True, "RNNencdec: longest bucket 30+ BLEU 18.58 <= 0.6 x best 91.94 (ratio 0.20)")
    assert verdicts[1] == (
        False,
        "RNNsearch: longest bucket 30+ BLEU 82.74 >= 0.85 x best 98.73 (ratio 0.84); likely cause: dev "
        "perplexity rose from 1.25 (update 500) to 2.07 (update 1250): the training went unstable",
    )
    assert verdicts[2][0]

    short = _run_log(tmp_path / "short", [(500, 2.0, 60.0), (1000, 1.5, 70.0)])
    verdicts = reproduce.check_criteria(
        report, "RNNsearch", "RNNencdec", {"RNNsearch": short, "RNNencdec": fine}
    )
    assert verdicts[1][1].endswith(
        "likely cause: dev BLEU still rising at the last validation (70.00, update 1000): a longer training "
        "(train.max_minutes) would likely help"
    )
    assert reproduce.training_note(fine) == "" and reproduce.training_note(tmp_path / "nowhere") == ""
    crossed = _report(
        {"0-10": 99.0, "10-20": 95.0, "20-30": 30.0, "30+": 90.0},
        {"0-10": 90.0, "10-20": 50.0, "20-30": 40.0, "30+": 20.0},
    )
    ok, text = reproduce.check_criteria(crossed, "RNNsearch", "RNNencdec")[2]
    assert not ok and text.endswith("past 20 words (20-30, 30+); not in 20-30")


def test_several_test_sets_each_get_a_section_and_their_own_folder(tmp_path):
    sources = [" ".join(f"w{i}" for i in range(3 + n % 17)) for n in range(60)]
    report = evaluate([System("RNNsearch", sources)], sources, sources, by_length=True)
    reproduce = load_script("reproduce")
    summary = reproduce._summary(
        [("test_2016_flickr", report), ("test_2017_flickr", report)], {}, [], [], argparse.Namespace()
    )
    assert summary.count("| RNNsearch | all |") == 2 * 2  # (scores and diagnostics) per test set
    for name in ("test_2016_flickr", "test_2017_flickr"):
        assert f"## {name}" in summary and f"[{name}/report.html]({name}/report.html)" in summary
    # any other corpus: its prepared test split, reported at the top of --out
    config = tiny_config(tmp_path)
    assert reproduce.test_sets(config) == [
        ("", config.data_dir / "test.src", config.data_dir / "test.tgt", None)
    ]


def test_parallel_trainings_take_the_gpus_the_caller_left_visible(monkeypatch):
    """--parallel gives each training one GPU: one of those CUDA_VISIBLE_DEVICES names, not device i of
    all (a caller's CUDA_VISIBLE_DEVICES=2,3 put the runs on GPUs 0 and 1)."""
    reproduce = load_script("reproduce")
    started = []

    class Started:
        returncode = 0

        def __init__(self, command, env):
            self.args = command
            started.append(env["CUDA_VISIBLE_DEVICES"])

        def poll(self) -> int:
            return 0

        def wait(self) -> int:
            return 0

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setattr(reproduce.subprocess, "Popen", Started)
    reproduce._train_all([Path("a.yaml"), Path("b.yaml")], [[], []], parallel=True)
    assert started == ["2", "3"]


def test_a_rerun_refuses_search_settings_its_checkpoint_does_not_hold(tmp_path):
    """Evaluation reads a run's settings from its checkpoint; a re-run that trains no further writes none:
    a new `--set decode.*` would be ignored while config.yaml says it."""
    reproduce = load_script("reproduce")
    config = tiny_config(tmp_path)
    write_corpus(config.data_dir)
    make_run_dir(config)
    reproduce.check_settings_reach_evaluation(config)  # the settings it was trained with
    changed = dataclasses.replace(config, decode=dataclasses.replace(config.decode, min_len=6))
    with pytest.raises(UserError, match=r"its checkpoint has decode.min_len = 0, not 6"):
        reproduce.check_settings_reach_evaluation(changed)


def test_a_failed_parallel_training_stops_the_others_and_names_itself(monkeypatch):
    """One system's training fails: the others are stopped (SIGTERM: they save and can resume) instead of
    trained to the end of their budget, and the failure is the failed command's."""
    reproduce = load_script("reproduce")
    started, real = [], subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(reproduce.subprocess, "Popen", popen)
    fails_or_sleeps = "import sys, time; sys.exit(3) if sys.argv[2] == 'bad.yaml' else time.sleep(600)"
    monkeypatch.setattr(reproduce, "SEQ2SEQ", [sys.executable, "-c", fails_or_sleeps])
    with pytest.raises(subprocess.CalledProcessError) as failed:
        reproduce._train_all([Path("good.yaml"), Path("bad.yaml")], [[], []], parallel=True)
    assert failed.value.returncode == 3 and "bad.yaml" in failed.value.cmd
    assert [process.returncode for process in started] == [-signal.SIGTERM, 3]


@pytest.mark.slow
def test_criteria_without_both_kinds_of_system_is_refused_before_training(tmp_path):
    """--criteria compares RNNsearch with RNNencdec: with only one of them it failed after all the work."""
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "scripts/reproduce.py",
            "--out",
            str(out),
            "--criteria",
            "configs/demo_rnnsearch.yaml",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    message = "--criteria compares a system with attention and one without (model.attention none)"
    assert result.returncode == 2 and not out.exists() and result.stderr == f"reproduce: error: {message}\n"
