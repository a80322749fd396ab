"""Paired significance where the test is degenerate: no observed difference (identical outputs) or a single
sentence is p = 1, not significant; every other p-value is sacrebleu's estimate."""

from __future__ import annotations

import pytest
from helpers import corpus, noisy

from seq2seq_attn.config import EvalConfig
from seq2seq_attn.evaluation.metrics.bootstrap import degenerate
from seq2seq_attn.evaluation.metrics.by_length import evaluate
from seq2seq_attn.evaluation.metrics.inputs import System
from seq2seq_attn.evaluation.metrics.report import render


def test_no_difference_or_one_sentence_is_degenerate():
    assert degenerate(0.0, 1000) and degenerate(-0.0, 2)  # both systems score the same
    assert degenerate(-95.4, 1) and degenerate(3.0, 0)  # one sentence (or none): nothing to resample
    assert not degenerate(0.01, 2)


def split_systems() -> tuple[list[str], list[str], System, System]:
    """Sources, references and two systems with the same output on every source of under 10 words and a
    different one on longer sources, plus a single 40-word sentence where they differ."""
    sources, references, _ = corpus(200, seed=3, max_words=25)
    sources.append(" ".join(["w"] * 40))
    references.append(" ".join(f"W{i}" for i in range(40)))
    first, second = noisy(references, 0.3, seed=1), noisy(references, 0.3, seed=2)
    second = [a if len(s.split()) < 10 else b for s, a, b in zip(sources, first, second, strict=True)]
    return sources, references, System("a", first), System("b", second)


@pytest.mark.parametrize("test", ["paired-bs", "paired-ar"])
def test_identical_outputs_and_a_single_sentence_are_not_a_significant_difference(test):
    sources, references, first, second = split_systems()
    config = EvalConfig(buckets=[0, 10, 40], bootstrap=200, significance=test, baseline="b")
    report = evaluate([first, second], references, sources, by_length=True, config=config)
    (comparison,) = report["comparisons"]
    rows = {row["bucket"]: row for row in comparison["rows"]}
    assert rows["0-10"]["count"] > 30 and rows["40+"]["count"] == 1
    assert rows["0-10"]["delta"] == 0.0 and rows["40+"]["delta"] != 0.0
    for bucket in ("0-10", "40+"):
        assert (rows[bucket]["p_value"], rows[bucket]["significant"]) == (1.0, False)
    assert rows["10-40"]["delta"] != 0.0 and rows["10-40"]["p_value"] < 1.0  # a real test: an estimate
    table = [line.split() for line in render(report, "text").splitlines()]
    assert [cells[-2:] for cells in table if cells[:3] == ["a", "b", "0-10"]] == [["1.0000", "no"]]


@pytest.mark.parametrize("test", ["paired-bs", "paired-ar"])
def test_the_same_difference_on_every_sentence_stays_significant(test):
    """Every sentence alike: the paired bootstrap's null does not vary, but 40 sentences agree on the
    difference; sacrebleu's estimate, its smallest p-value, stands."""
    references = [f"the cat {n} sat on the mat ." for n in range(40)]
    sources = [" ".join(["word"] * 12)] * 40
    systems = [System("copy", references), System("poor", ["the dog sat ."] * 40)]
    config = EvalConfig(bootstrap=200, significance=test, baseline="copy")
    (comparison,) = evaluate(systems, references, sources, config=config)["comparisons"]
    (overall,) = comparison["rows"]
    assert overall["delta"] < -50 and overall["p_value"] == 1 / 201 and overall["significant"]
