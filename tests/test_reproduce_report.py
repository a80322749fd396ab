"""scripts/reproduce.py's summary on a tiny report: it says in which length buckets RNNsearch beats
RNNencdec significantly."""

from __future__ import annotations

import argparse
from pathlib import Path

from helpers import load_script, noisy

from seq2seq_attn.config import EvalConfig
from seq2seq_attn.evaluation.by_length import System, evaluate

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
    summary = reproduce._summary(report, {"training": 60.0}, verdicts, [finding], argparse.Namespace())
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
