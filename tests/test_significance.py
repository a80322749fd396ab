"""Paired significance per length bucket: BLEU differences, their paired-bootstrap intervals and p-values
as sacrebleu's paired-bs / paired-ar tests compute them, in every output format and on the curve."""

from __future__ import annotations

import json

import pytest
from helpers import corpus, noisy
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest
from typer.testing import CliRunner

from seq2seq_attn.cli import app
from seq2seq_attn.config import EvalConfig
from seq2seq_attn.errors import UserError
from seq2seq_attn.evaluation.metrics.by_length import evaluate
from seq2seq_attn.evaluation.metrics.inputs import System
from seq2seq_attn.evaluation.metrics.plots import curve_figure
from seq2seq_attn.evaluation.metrics.report import render

SIZE = 300


def close_systems() -> tuple[list[str], list[str], list[str], list[str]]:
    """Sources, references and two systems whose BLEU differ by about one point: p is neither 0 nor 1."""
    sources, references, _ = corpus(SIZE, seed=7, max_words=30)
    return sources, references, noisy(references, 0.30, seed=1), noisy(references, 0.31, seed=2)


def sacrebleu_p(test_type: str, references, baseline, system, samples: int) -> float:
    named = [("baseline", baseline), ("system", system)]
    _, scores = PairedTest(named, {"BLEU": BLEU(references=[references])}, None, test_type, samples)()
    return scores["BLEU"][1].p_value


@pytest.mark.parametrize(("test", "sacrebleu_type"), [("paired-bs", "bs"), ("paired-ar", "ar")])
def test_overall_p_value_agrees_with_sacrebleus_paired_test(test, sacrebleu_type):
    sources, references, better, worse = close_systems()
    config = EvalConfig(bootstrap=2000, significance=test)
    report = evaluate([System("a", better), System("b", worse)], references, sources, config=config)
    (comparison,) = report["comparisons"]
    (overall,) = comparison["rows"]
    theirs = sacrebleu_p(sacrebleu_type, references, worse, better, 2000)
    assert 0.02 < theirs < 0.9  # a p-value that Monte-Carlo error could move
    # both are Monte-Carlo estimates from 2000 draws: standard error below 0.012 each
    assert overall["p_value"] == pytest.approx(theirs, abs=0.06)
    rows = {system["label"]: system["rows"][0]["bleu"] for system in report["systems"]}
    assert overall["delta"] == pytest.approx(rows["a"] - rows["b"])
    assert overall["ci_low"] < overall["delta"] < overall["ci_high"]
    assert overall["significant"] == (overall["p_value"] < 0.05)


def bucketed_report(**settings) -> dict:
    """Three systems, the last much worse: its differences are significant, the first two's less so."""
    sources, references, better, worse = close_systems()
    bad = noisy(references, 0.7, seed=3)
    systems = [System("A", better), System("B", worse), System("C", bad)]
    config = EvalConfig(buckets=[0, 10, 20], bootstrap=300, **settings)
    return evaluate(systems, references, sources, by_length=True, config=config)


def test_every_pair_or_each_against_the_baseline_in_every_bucket():
    report = bucketed_report()
    pairs = [(c["system"], c["baseline"]) for c in report["comparisons"]]
    assert pairs == [("A", "B"), ("A", "C"), ("B", "C")]
    for comparison in report["comparisons"]:
        assert [row["bucket"] for row in comparison["rows"]] == ["all", "0-10", "10-20", "20+"]
    against_c = {(c["system"], c["baseline"]) for c in bucketed_report(baseline="C")["comparisons"]}
    assert against_c == {("A", "C"), ("B", "C")}
    a_vs_c = report["comparisons"][1]["rows"]
    assert all(row["significant"] and row["p_value"] < 0.05 and row["ci_low"] > 0 for row in a_vs_c)
    with pytest.raises(UserError, match=r"^eval.baseline 'D': no system has that label \(labels: A, B, C\)"):
        bucketed_report(baseline="D")


def test_significant_buckets_are_marked_in_every_format_and_on_the_curve():
    report = bucketed_report()
    rows = [(c["system"], c["baseline"], row) for c in report["comparisons"] for row in c["rows"]]
    marked = {(system, baseline, row["bucket"]) for system, baseline, row in rows if row["significant"]}
    assert ("A", "B", "0-10") in marked and ("A", "B", "10-20") not in marked  # both kinds are checked

    text = [line.split() for line in render(report, "text").splitlines()]
    compared = [cells for cells in text if len(cells) == 9 and cells[1] in ("B", "C")]
    assert len(compared) == len(rows)
    assert {tuple(cells[:3]) for cells in compared if cells[-1] == "yes"} == marked
    markdown = [line.split(" | ") for line in render(report, "markdown").splitlines()]
    compared = [cells for cells in markdown if len(cells) == 8 and cells[1] in ("B", "C")]
    assert {(cells[0][2:], *cells[1:3]) for cells in compared if cells[-1] == "yes |"} == marked
    header, *csv_rows = [line.split(",") for line in render(report, "csv").splitlines()]
    baseline, significant = header.index("baseline"), header.index("significant")
    compared = [cells for cells in csv_rows if cells[baseline] in ("B", "C")]
    assert {
        (cells[0], cells[baseline], cells[1]) for cells in compared if cells[significant] == "True"
    } == marked
    assert json.loads(render(report, "json"))["significance"] == {
        "test": "paired-bs",
        "alpha": 0.05,
        "baseline": None,
    }

    axes = curve_figure(report).axes[0]
    labelled = [c for c in axes.collections if not c.get_label().startswith("_")]  # the marks, not the bands
    marks = {c.get_label(): sorted(c.get_offsets()[:, 0].tolist()) for c in labelled}
    buckets = [bucket["label"] for bucket in report["buckets"]]
    expected = {}
    for system, baseline, bucket in sorted(marked):
        if bucket != "all":
            expected.setdefault(f"{system} vs {baseline}: p < 0.05", []).append(buckets.index(bucket))
    assert marks == {label: sorted(xs) for label, xs in expected.items()}


def test_cli_baseline_and_approximate_randomization(tmp_path):
    sources, references, better, worse = close_systems()
    for name, lines in [("src", sources), ("ref", references), ("a", better), ("b", worse)]:
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    args = ["eval", "--ref", str(tmp_path / "ref"), "--src", str(tmp_path / "src"), "--by-length"]
    args += ["--hyp", str(tmp_path / "a"), "--hyp", str(tmp_path / "b"), "--baseline", "b"]
    args += ["--significance", "paired-ar", "--bootstrap", "200", "--output", str(tmp_path / "r.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["significance"]["test"] == "paired-ar"
    assert [(c["system"], c["baseline"]) for c in report["comparisons"]] == [("a", "b")]
    assert "sacrebleu's paired-ar test (200 trials)" in result.stdout
