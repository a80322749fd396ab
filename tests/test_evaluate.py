"""Evaluation: sacrebleu scores per length bucket, bootstrap intervals, reports, the curve, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from helpers import corpus, run_main
from sacrebleu.metrics import BLEU
from typer.testing import CliRunner

from seq2seq_attn.cli import app
from seq2seq_attn.config import EvalConfig
from seq2seq_attn.errors import UserError
from seq2seq_attn.evaluation.metrics.bleu import bleu_metric
from seq2seq_attn.evaluation.metrics.bootstrap import bleu_scores, sentence_stats
from seq2seq_attn.evaluation.metrics.buckets import bucket_index, bucket_labels, check_edges, parse_edges
from seq2seq_attn.evaluation.metrics.by_length import evaluate
from seq2seq_attn.evaluation.metrics.inputs import System
from seq2seq_attn.evaluation.metrics.plots import curve_figure, diagnostics_figure, save_curve
from seq2seq_attn.evaluation.metrics.report import render
from seq2seq_attn.evaluation.metrics.saved_reports import merge_reports

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def by_label(report: dict, system: int = 0) -> dict:
    return {row["bucket"]: row for row in report["systems"][system]["rows"]}


# ----------------------------------------------------------------------------------------------------------
# buckets


def test_bucket_boundaries_are_half_open_and_the_last_is_open_ended():
    edges = [0, 10, 20, 30]
    lengths = np.array([0, 9, 10, 19, 20, 29, 30, 500])
    assert bucket_index(lengths, edges).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [b["label"] for b in bucket_labels(edges)] == ["0-10", "10-20", "20-30", "30+"]
    # end to end: a 10-word source is counted in 10-20, a 9-word one in 0-10
    sources = [" ".join(["x"] * n) for n in (9, 10, 10, 35)]
    systems = [System("s", ["a b c"] * 4)]
    report = evaluate(
        systems, ["a b c"] * 4, sources, by_length=True, config=EvalConfig(buckets=edges, bootstrap=0)
    )
    assert {label: row["count"] for label, row in by_label(report).items()} == {
        "all": 4,
        "0-10": 1,
        "10-20": 2,
        "20-30": 0,
        "30+": 1,
    }
    empty = by_label(report)["20-30"]
    assert (empty["bleu"], empty["chrf"], empty["ci_low"], empty["few"]) == (None, None, None, True)


@pytest.mark.parametrize("edges", [[], [5, 10], [0, 10, 10], [0, 20, 10]])
def test_bad_bucket_edges_are_user_errors(edges):
    with pytest.raises(UserError, match="bucket edges"):
        check_edges(edges)


def test_parse_edges():
    assert parse_edges("0,5,50") == [0, 5, 50]
    with pytest.raises(UserError, match="eval.buckets '0,ten': expected comma-separated whole numbers"):
        parse_edges("0,ten")
    with pytest.raises(UserError, match=r"bucket edges \[0, 20, 10\]: .* \(eval.buckets\)"):
        parse_edges("0,20,10")


# ----------------------------------------------------------------------------------------------------------
# scores


@pytest.mark.parametrize("bucket_by", ["source", "reference"])
def test_bucket_scores_equal_sacrebleu_on_exactly_that_subset(bucket_by):
    sources, references, hypotheses = corpus(150, seed=1)
    config = EvalConfig(bucket_by=bucket_by, bootstrap=0)
    report = evaluate([System("s", hypotheses)], references, sources, by_length=True, config=config)
    lengths = [len(line.split()) for line in (sources if bucket_by == "source" else references)]
    rows = by_label(report)
    for bucket in [{"label": "all", "low": 0, "high": None}, *report["buckets"]]:
        members = [
            i
            for i, n in enumerate(lengths)
            if n >= bucket["low"] and (bucket["high"] is None or n < bucket["high"])
        ]
        hyps, refs = [hypotheses[i] for i in members], [[references[i] for i in members]]
        bleu = sacrebleu.corpus_bleu(hyps, refs)
        row = rows[bucket["label"]]
        assert row["count"] == len(members) > 0
        assert (row["bleu"], row["bp"], row["hyp_len"], row["ref_len"]) == (
            bleu.score,
            bleu.bp,
            bleu.sys_len,
            bleu.ref_len,
        )
        assert row["chrf"] == sacrebleu.corpus_chrf(hyps, refs).score


def test_vectorised_bleu_matches_sacrebleu_on_resamples_and_degenerate_outputs():
    """The bootstrap's numpy BLEU equals sacrebleu on resamples, incl. no match / too short / empty output."""
    _, references, hypotheses = corpus(40, seed=2)
    references += ["A B C D E", "A B C D E", "A B C D E"]
    hypotheses += ["A X B Y C", "A B", ""]  # only unigram matches (smoothing), too short for 4-grams, empty
    stats = sentence_stats(BLEU(references=[references]), hypotheses)  # (43, 10)
    rng = np.random.default_rng(0)
    samples = [rng.integers(0, len(hypotheses), size=30) for _ in range(20)]
    samples += [np.array([40]), np.array([41]), np.array([42]), np.array([40, 41])]
    ours = bleu_scores(np.stack([stats[sample].sum(axis=0) for sample in samples]))
    for score, sample in zip(ours, samples, strict=True):
        expected = sacrebleu.corpus_bleu(
            [hypotheses[i] for i in sample], [[references[i] for i in sample]]
        ).score
        assert score == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_interval_contains_the_estimate_and_narrows_with_more_sentences():
    widths = []
    for size in (30, 600):
        sources, references, hypotheses = corpus(size, seed=3)
        row = by_label(evaluate([System("s", hypotheses)], references, sources))["all"]
        assert row["ci_low"] < row["bleu"] < row["ci_high"]
        widths.append(row["ci_high"] - row["ci_low"])
    assert widths[1] < widths[0] / 2  # ~ 1/sqrt(20) in theory


def test_mismatched_lines_name_both_files_and_counts():
    with pytest.raises(UserError, match=r"^hyp.txt has 2 lines but ref.txt has 3: "):
        evaluate([System("s", ["a", "b"], "hyp.txt")], ["a", "b", "c"], references_path="ref.txt")


# ----------------------------------------------------------------------------------------------------------
# reports


def two_system_report(size: int = 120) -> dict:
    sources, references, hypotheses = corpus(size, seed=4)
    _, _, worse = corpus(size, seed=4, noise=0.6)
    systems = [System("RNNsearch-50", hypotheses, "a.txt"), System("RNNencdec-50", worse, "b.txt")]
    return evaluate(
        systems, references, sources, by_length=True, config=EvalConfig(bootstrap=200, min_bucket_size=20)
    )


def test_multi_system_report_schema_and_renderings():
    report = two_system_report()
    assert list(report) == [
        "format",
        "version",
        "signatures",
        "references",
        "task_references",
        "sources",
        "bucket_by",
        "words",
        "edges",
        "buckets",
        "subsets",
        "bootstrap",
        "min_bucket_size",
        "systems",
        "significance",
        "comparisons",
        "diagnostics",
    ]
    assert report["version"] == 2 and report["subsets"] == [
        {"name": "all", "definition": "every sentence", "sentences": 120}
    ]
    assert report["words"] == "whitespace"
    assert report["edges"] == EvalConfig().buckets and report["bootstrap"]["seed"] == EvalConfig().seed
    labels = ["all"] + [bucket["label"] for bucket in report["buckets"]]
    for system in report["systems"]:
        assert [row["bucket"] for row in system["rows"]] == labels
        assert set(system["rows"][0]) == {
            "subset",
            "bucket",
            "count",
            "bleu",
            "ci_low",
            "ci_high",
            "chrf",
            "bp",
            "ratio",
            "hyp_len",
            "ref_len",
            "bleu_moses",
            "bleu_task",
            "few",
        }
        assert sum(row["count"] for row in system["rows"][1:]) == system["rows"][0]["count"] == 120
        assert all(row["few"] == (row["count"] < 20) for row in system["rows"])
    assert by_label(report, 0)["all"]["bleu"] > by_label(report, 1)["all"]["bleu"]
    assert json.loads(render(report, "json")) == report

    text = render(report, "text").splitlines()
    assert text[0].startswith("BLEU signature: nrefs:1|") and text[1].startswith("chrF signature: ")
    scores = text[text.index("") + 1 : text.index("", text.index("") + 1)]  # the first table
    table = [line for line in scores if line.startswith(("RNNsearch-50 ", "RNNencdec-50 "))]
    assert len(table) == 2 * len(labels) and len({len(line) for line in scores}) == 1
    differences = [line for line in text if line.startswith("RNNsearch-50  RNNencdec-50  ")]
    assert len(differences) == len(labels)

    csv_lines = render(report, "csv").splitlines()
    assert csv_lines[0].startswith("system,bucket,low,high,count,bleu,ci_low,ci_high")
    assert len(csv_lines) == 1 + 3 * len(labels) and csv_lines[2].startswith("RNNsearch-50,0-10,0,10,")
    assert all(",RNNencdec-50," in line for line in csv_lines[-len(labels) :])  # the paired differences

    markdown = [line for line in render(report, "markdown").splitlines() if line.startswith("|")]
    assert len(markdown) == 2 + 2 * len(labels) + 2 + len(labels) + 2 + 2 * len(labels)  # + diagnostics
    for system in report["diagnostics"]:  # hypotheses alone: the output-side measures only
        assert [row["bucket"] for row in system["rows"]] == labels
        assert all(row["entropy"] is None and row["length_ratio"] > 0 for row in system["rows"])


def test_curve_has_one_labelled_line_per_system_and_saves_a_png(tmp_path):
    report = two_system_report()
    figure = curve_figure(report)
    axes = figure.axes[0]
    labelled = [line.get_label() for line in axes.get_lines() if not line.get_label().startswith("_")]
    assert [label.split(" ")[0] for label in labelled] == ["RNNsearch-50", "RNNencdec-50"]
    bands = [c for c in axes.collections if c.get_label().startswith("_")]  # unlabelled: the bands
    assert len(bands) == 2  # one confidence band per system
    assert axes.get_xlabel() == "Source sentence length (words)" and axes.get_ylabel() == "BLEU"
    ticks = [tick.get_text() for tick in axes.get_xticklabels()]
    counts = [by_label(report)[bucket["label"]]["count"] for bucket in report["buckets"]]
    labels = [bucket["label"] for bucket in report["buckets"]]
    assert ticks == [
        f"{label}\nn={n}{'*' if n < 20 else ''}" for label, n in zip(labels, counts, strict=True)
    ]
    assert min(counts) < 20 <= max(counts)  # both kinds of tick are checked
    save_curve(report, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes().startswith(PNG_MAGIC)
    assert [p.name for p in tmp_path.iterdir()] == ["curve.png"]  # no temporary file left behind


def test_labels_are_shown_as_given_in_figures_and_markdown_and_every_system_is_in_the_legend(tmp_path):
    """A `$` pair would be math to matplotlib (a parse error after the report was written), a `|` a cell
    of its own in markdown; the diagnostics' legend names systems without attention too."""
    sources, references, hypotheses = corpus(120, seed=4)
    _, _, worse = corpus(120, seed=4, noise=0.6)
    systems = [System("v1 $_$ v2", hypotheses, "a.txt"), System("beam|5", worse, "b.txt")]
    report = evaluate(systems, references, sources, by_length=True, config=EvalConfig(bootstrap=50))
    save_curve(report, tmp_path / "curve.png")  # the curve and, beside it, the diagnostics
    (legend,) = [axes.get_legend() for axes in diagnostics_figure(report).axes if axes.get_legend()]
    assert [text.get_text() for text in legend.get_texts()] == [r"v1 \$_\$ v2", "beam|5"]
    table = [line for line in render(report, "markdown").splitlines() if line.startswith("|")]
    rows = [line for line in table if line.startswith("| beam")]
    assert rows and all(line.startswith(r"| beam\|5 |") for line in rows)
    assert all(line.count(" | ") == table[0].count(" | ") for line in rows[:1])


def test_merging_reports_requires_the_same_buckets():
    first, second = two_system_report(), two_system_report()
    for system, label in zip(second["systems"], ("A", "B"), strict=True):
        system["label"] = label
    merged = merge_reports([("a.json", first), ("b.json", second)])
    assert [system["label"] for system in merged["systems"]] == ["RNNsearch-50", "RNNencdec-50", "A", "B"]
    with pytest.raises(UserError, match="appears in more than one report"):
        merge_reports([("a.json", first), ("a2.json", first)])
    second["words"] = "moses:en"
    with pytest.raises(UserError, match=r"by source, in Moses words \(en\) but a.json has .* in words:"):
        merge_reports([("a.json", first), ("b.json", second)])
    second["edges"], second["words"] = [0, 20], first["words"]
    with pytest.raises(UserError, match=r"^b.json has buckets \[0, 20\] by source, in words but a.json"):
        merge_reports([("a.json", first), ("b.json", second)])


def test_merging_reports_requires_the_same_references_and_bleu_signature():
    """A curve of reports scored against other references, or with other BLEU settings, compares nothing;
    the same references under another path are the same test set."""
    first = two_system_report()
    sources, references, hypotheses = corpus(120, seed=4)
    quick = EvalConfig(bootstrap=0)
    same = evaluate(
        [System("C", hypotheses)], references, sources, by_length=True, config=quick, references_path="x/ref"
    )
    assert merge_reports([("a.json", first), ("b.json", same)])["references"] == first["references"]
    sources, references, hypotheses = corpus(120, seed=5)
    other = evaluate([System("C", hypotheses)], references, sources, by_length=True, config=quick)
    with pytest.raises(UserError, match=r"^b.json was scored against other references than a.json \("):
        merge_reports([("a.json", first), ("b.json", other)])
    sources, references, hypotheses = corpus(120, seed=4)
    case_insensitive = EvalConfig(bootstrap=0, lowercase=True)
    lowercased = evaluate(
        [System("C", hypotheses)], references, sources, by_length=True, config=case_insensitive
    )
    with pytest.raises(
        UserError, match=r"^b.json has BLEU signature \S*case:lc\S* but a.json has \S*case:mixed"
    ):
        merge_reports([("a.json", first), ("b.json", lowercased)])


# ----------------------------------------------------------------------------------------------------------
# command line


@pytest.fixture
def files(tmp_path: Path) -> Path:
    sources, references, hypotheses = corpus(60, seed=5)
    _, _, worse = corpus(60, seed=5, noise=0.6)
    for name, lines in [
        ("src.en", sources),
        ("ref.fr", references),
        ("good.fr", hypotheses),
        ("bad.fr", worse),
        ("short.fr", worse[:-1]),
    ]:
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def run_eval(folder: Path, *extra: str) -> str:
    args = [
        "eval",
        "--hyp",
        str(folder / "good.fr"),
        "--hyp",
        str(folder / "bad.fr"),
        "--ref",
        str(folder / "ref.fr"),
        "--src",
        str(folder / "src.en"),
        "--by-length",
        "--bootstrap",
        "100",
        *extra,
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_cli_json_report_is_deterministic_and_the_table_is_printed(files):
    first = run_eval(files, "--output", str(files / "one.json"), "--plot", str(files / "curve.png"))
    run_eval(files, "--output", str(files / "two.json"))
    assert (files / "one.json").read_bytes() == (files / "two.json").read_bytes()
    assert [s["label"] for s in json.loads((files / "one.json").read_text())["systems"]] == ["good", "bad"]
    assert "good    all " in first and "bad     60+ " in first
    assert (files / "curve.png").read_bytes().startswith(PNG_MAGIC)
    assert run_eval(files, "--format", "csv").startswith("system,bucket,")


def test_cli_plot_curve_combines_saved_reports(files):
    run_eval(files, "--label", "A", "--label", "B", "--output", str(files / "a.json"))
    run_eval(files, "--label", "C", "--label", "D", "--output", str(files / "b.json"))
    result = CliRunner().invoke(
        app, ["plot", "curve", str(files / "a.json"), str(files / "b.json"), "-o", str(files / "both.png")]
    )
    assert result.exit_code == 0, result.output
    assert (files / "both.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["eval", "--hyp", "short.fr", "--ref", "ref.fr"], "short.fr has 59 lines but ref.fr has 60"),
        (
            ["eval", "--hyp", "good.fr", "--ref", "ref.fr", "--src", "missing.en"],
            "missing.en: file not found",
        ),
        (["eval", "--hyp", "good.fr", "--ref", "ref.fr", "--by-length"], "give --src SRC"),
        (["plot", "curve", "ref.fr", "-o", "x.png"], "ref.fr: not valid JSON"),
        (
            ["eval", "--hyp", "good.fr", "--ref", "ref.fr", "--baseline", "nobody"],
            "--baseline 'nobody': no system has that label (labels: good)",
        ),
    ],
)
def test_cli_errors_are_one_line_with_exit_code_2(files, args, message):
    result = run_main(*args, cwd=files)
    stderr = result.stderr.decode()
    assert result.returncode == 2
    assert stderr.startswith("seq2seq: error: ") and message in stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr


def test_sacrebleu_detokenisation_warning_only_where_the_references_are_detokenised(caplog):
    hypotheses = [f"the word {i} ." for i in range(120)]
    with caplog.at_level("WARNING", logger="sacrebleu"):
        tokenised = bleu_metric(hypotheses).corpus_score(hypotheses, None)  # the corpus is written so
        assert "forgot to detokenize" not in caplog.text
        detokenised = bleu_metric([f"the word {i}." for i in range(120)]).corpus_score(hypotheses, None)
        assert "forgot to detokenize" in caplog.text
    assert tokenised.score == detokenised.score == pytest.approx(100.0)  # sacrebleu splits the period


def test_a_metric_added_to_the_table_reaches_every_rendering(monkeypatch):
    """The report's numbers come from one table (`report.METRICS`): one more entry is one more row field,
    JSON key, table column (text, markdown, HTML) and CSV field, with no other edit."""
    from seq2seq_attn.evaluation.metrics import by_length, html_report, report

    words = report.Metric("hyp_words", "bleu", "sys_len", "hyp words", 0, kind=int, empty=0)
    extended = (*report.METRICS[:4], words, *report.METRICS[4:])
    monkeypatch.setattr(report, "METRICS", extended)
    monkeypatch.setattr(by_length, "METRICS", extended)
    result = two_system_report()
    for system in result["systems"]:
        for row in system["rows"]:
            assert row["hyp_words"] == row["hyp_len"]
            assert list(row).index("hyp_words") == list(row).index("ratio") + 1
    text = render(result, "text")
    header = next(line for line in text.splitlines() if line.startswith("system "))
    assert header.split()[-3:] == ["ratio", "hyp", "words"]
    total = by_label(result)["all"]["hyp_len"]
    first = next(line for line in text.splitlines() if line.startswith("RNNsearch-50 "))
    assert first.split()[-1] == str(total)
    assert "| hyp words |" in render(result, "markdown")
    csv_header = render(result, "csv").splitlines()[0].split(",")
    assert csv_header[csv_header.index("ratio") + 1] == "hyp_words"
    html = html_report.render_html(result)
    assert "<th>hyp words</th>" in html
