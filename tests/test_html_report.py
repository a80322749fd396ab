"""The self-contained HTML report: its sections, the sentences it picks, and a real browser loading it
offline (headless Chromium: no console message, no network request, the curve drawn)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from helpers import browse, corpus
from matplotlib.image import imread
from typer.testing import CliRunner

from seq2seq_attn.cli import app
from seq2seq_attn.config import EvalConfig
from seq2seq_attn.errors import UserError
from seq2seq_attn.evaluation.metrics.by_length import evaluate
from seq2seq_attn.evaluation.metrics.examples import differing_examples
from seq2seq_attn.evaluation.metrics.html_report import render_html
from seq2seq_attn.evaluation.metrics.inputs import System
from seq2seq_attn.evaluation.models.align import AlignmentCorpus, GoldLinks, alignment_section

ALIGNMENT = {
    "method": "argmax",
    "overall": {"aer": 0.25, "precision": 0.8, "recall": 0.7, "sentences": 10},
    "by_length": [{"bucket": "0-10", "aer": 0.125, "precision": 0.9, "recall": 0.85, "sentences": 10}],
    "baseline": {"aer": 0.5, "precision": 0.5, "recall": 0.5, "sentences": 10},
    "figures": [{"title": "gold links on line 3", "svg": '<svg id="gold-3" width="10" height="10"></svg>'}],
}
EXTERNAL = re.compile(r"""(src|href)\s*=\s*["']?(https?:|//)""", re.IGNORECASE)


def two_systems() -> tuple[list[str], list[str], list[System]]:
    sources, references, hypotheses = corpus(80, seed=11, max_words=25)
    worse = [" ".join(line.split()[::2]) for line in hypotheses]
    worse[0] = "<b>&amp; not markup</b>"
    return sources, references, [System("good", hypotheses), System("worse", worse)]


def test_examples_are_the_sentences_whose_chrf_differs_most_per_bucket():
    sources, references, systems = two_systems()
    config = EvalConfig(buckets=[0, 10, 20], bootstrap=0)
    report = evaluate(systems, references, sources, by_length=True, config=config)
    examples = differing_examples(report, systems, references, sources, per_bucket=2, lowercase=False)
    assert [group["bucket"] for group in examples] == ["0-10", "10-20", "20+"]
    chrf = [
        [sacrebleu.sentence_chrf(s.hypotheses[i], [references[i]]).score for s in systems] for i in range(80)
    ]
    for group, (low, high) in zip(examples, [(0, 10), (10, 20), (20, 99)], strict=True):
        members = [i for i in range(80) if low <= len(sources[i].split()) < high]
        spread = sorted(members, key=lambda i: (-(max(chrf[i]) - min(chrf[i])), i))
        assert [s["line"] for s in group["sentences"]] == spread[:2]
        for sentence in group["sentences"]:
            i = sentence["line"]
            assert (sentence["source"], sentence["reference"]) == (sources[i], references[i])
            outputs = [(o["label"], o["text"]) for o in sentence["outputs"]]
            assert outputs == [(s.label, s.hypotheses[i]) for s in systems]
            assert [o["chrf"] for o in sentence["outputs"]] == pytest.approx(chrf[i])


def test_page_has_every_section_escapes_text_and_loads_nothing():
    sources, references, systems = two_systems()
    report = evaluate(systems, references, sources, by_length=True, config=EvalConfig(bootstrap=50))
    examples = differing_examples(report, systems, references, sources, lowercase=False)
    page = render_html(report, curve_svg='<svg id="c"></svg>', examples=examples, alignment=ALIGNMENT)
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 1  # (the alignment figure: an <img>)
    for heading in ("Scores", "Sentences where the systems differ most", "Alignment quality"):
        assert f"<h2>{heading}</h2>" in page
    assert '<figure id="curve"><svg id="c"></svg>' in page
    assert "<td>0.250</td><td>0.800</td><td>0.700</td>" in page  # overall AER, precision, recall
    assert '<td class="name">baseline (all)</td><td>10</td><td>0.500</td>' in page
    assert "&lt;b&gt;&amp;amp; not markup&lt;/b&gt;" in page and "<b>" not in page
    significant = report["comparisons"][0]["rows"]
    assert page.count('<tr class="significant">') == sum(bool(row["significant"]) for row in significant)
    assert not EXTERNAL.search(page) and "@import" not in page and "url(" not in page
    assert "Alignment quality" not in render_html(report)


def test_examples_are_scored_case_insensitively_when_the_report_is(tmp_path: Path):
    """`--lowercase` reports a system that differs from the references only in case as chrF 100: its
    examples must say 100 too, not the case-sensitive chrF the report does not use."""
    references = ["A man rides a red bicycle down the street.", "Two dogs play in the snow."]
    lines = {"ref": references, "lower": [line.lower() for line in references], "other": ["A cat.", "Dogs."]}
    lines["src"] = ["Un homme.", "Deux chiens."]
    for name, text in lines.items():
        (tmp_path / name).write_text("\n".join(text) + "\n", encoding="utf-8")
    args = ["eval", "--ref", str(tmp_path / "ref"), "--src", str(tmp_path / "src"), "--lowercase"]
    args += ["--hyp", str(tmp_path / "lower"), "--hyp", str(tmp_path / "other"), "--bootstrap", "0"]
    args += ["--output", str(tmp_path / "r.json"), "--html", str(tmp_path / "p.html")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (overall,) = json.loads((tmp_path / "r.json").read_text())["systems"][0]["rows"]
    assert overall["chrf"] == pytest.approx(100)  # the report: case-insensitive
    page = (tmp_path / "p.html").read_text(encoding="utf-8")
    shown = re.findall(r'<td class="name">lower</td><td>[^<]*</td><td>([^<]*)</td>', page)
    assert shown == ["100.0", "100.0"]  # case-sensitive, both would be below 100


def test_eval_html_without_sources_has_no_heat_maps(tmp_path: Path):
    (tmp_path / "h.txt").write_text("a b\n")
    args = ["eval", "--hyp", str(tmp_path / "h.txt"), "--ref", str(tmp_path / "h.txt"), "--bootstrap", "0"]
    result = CliRunner().invoke(app, [*args, "--html", str(tmp_path / "p.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "p.html").read_text(encoding="utf-8")
    assert "<h2>Scores</h2>" in page and "<h2>Attention</h2>" not in page


def test_alignment_buckets_without_sentences_show_a_dash():
    """An AER bucket with no sentence has no AER, precision or recall (None): "-", as the text shows it."""
    corpus = AlignmentCorpus(
        [["a"], ["a", "b", "c"]], [["x"], ["x", "y", "z"]], [GoldLinks(frozenset(), frozenset())] * 2
    )
    section = alignment_section(corpus, [np.ones((1, 1)), np.eye(3)], edges=[0, 2, 10])
    assert section["by_length"][-1] == {
        "bucket": "10+",
        "aer": None,
        "precision": None,
        "recall": None,
        "sentences": 0,
    }
    sources, references, systems = two_systems()
    page = render_html(
        evaluate(systems, references, sources, config=EvalConfig(bootstrap=0)), alignment=section
    )
    assert '<td class="name">10+</td><td>0</td><td>-</td><td>-</td><td>-</td>' in page


@pytest.fixture(scope="module")
def html_page(tiny_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`seq2seq eval --html` with a hypothesis file and a --model run (attention heat maps)."""
    folder = tmp_path_factory.mktemp("html")
    data = tiny_run_dir.parent / "data"
    references = (data / "test.tgt").read_text(encoding="utf-8").splitlines()
    (folder / "copy.hyp").write_text("\n".join(" ".join(r.split()[:-1]) for r in references) + "\n")
    args = ["eval", "--hyp", str(folder / "copy.hyp"), "--model", str(tiny_run_dir)]
    args += [
        "--label",
        "copy",
        "--label",
        "tiny",
        "--src",
        str(data / "test.src"),
        "--ref",
        str(data / "test.tgt"),
    ]
    args += ["--by-length", "--buckets", "0,4,8", "--bootstrap", "100", "--output", str(folder / "r.json")]
    (folder / "align.json").write_text(json.dumps(ALIGNMENT))  # as `seq2seq align --json` writes it
    args += ["--alignment", str(folder / "align.json")]
    result = CliRunner().invoke(app, [*args, "--html", str(folder / "report.html")])
    assert result.exit_code == 0, result.output
    return folder / "report.html"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"method": "argmax"}', "not the JSON of `seq2seq align --json`"),
        ("{", "not valid JSON"),
        ('{"method": "argmax", "overall": {}, "by_length": []}', "each row: sentences, and aer"),
        ('{"method": "argmax", "overall": null, "by_length": [1]}', "each row: sentences, and aer"),
        (
            '{"method": "a", "overall": {"sentences": 2, "aer": "x", "precision": 1, "recall": 1}, '
            '"by_length": []}',
            "each row: sentences, and aer",
        ),
        (
            '{"method": "a", "overall": {"sentences": 2, "aer": 1, "precision": 1, "recall": 1}, '
            '"by_length": [{"bucket": 5, "sentences": 2, "aer": 1, "precision": 1, "recall": 1}]}',
            "a bucket named in each by_length row",
        ),
        (
            '{"method": "a", "overall": {"sentences": 2, "aer": 1, "precision": 1, "recall": 1}, '
            '"by_length": [], "figures": [1]}',
            "figures must be a list of {title, svg} texts",
        ),
    ],
)
def test_a_bad_alignment_file_is_one_line(tmp_path: Path, content: str, message: str):
    (tmp_path / "a.json").write_text(content)
    (tmp_path / "h.txt").write_text("a b\n")
    args = ["eval", "--hyp", str(tmp_path / "h.txt"), "--ref", str(tmp_path / "h.txt")]
    result = CliRunner().invoke(app, [*args, "--alignment", str(tmp_path / "a.json"), "--html", "x.html"])
    assert isinstance(result.exception, UserError)  # (the `seq2seq` entry point: one line, exit 2)
    assert message in str(result.exception) and "a.json" in str(result.exception)


def test_an_alignment_figure_runs_no_script_it_holds():
    """The figures of an `align --json` file are its text: a script in one would run if inlined."""
    sources, references, systems = two_systems()
    figure = {"title": "x", "svg": '<svg onload="alert(1)"><script>alert(2)</script></svg>'}
    page = render_html(
        evaluate(systems, references, sources, config=EvalConfig(bootstrap=0)),
        alignment={**ALIGNMENT, "figures": [figure]},
    )
    assert "alert" not in page and "<script" not in page


def test_eval_html_holds_the_curve_tables_and_the_models_heat_maps(html_page: Path, tiny_run_dir: Path):
    page = html_page.read_text(encoding="utf-8")
    report = json.loads((html_page.parent / "r.json").read_text())
    assert '<figure id="curve"><svg' in page and '<figure id="diagnostics"><svg' in page
    heat_maps = re.findall(r"<figcaption>tiny, line (\d+) \((\d+) words\)</figcaption>", page)
    # one per bucket, the --model run's (not the hypothesis file's): the bucket's first example
    sections = page.split("<h3>Bucket ")[1:]
    first_lines = [re.search(r'<div class="example"><p>line (\d+)</p>', section)[1] for section in sections]
    assert [line for line, _ in heat_maps] == first_lines and len(first_lines) == len(report["buckets"])
    edges = [*report["edges"], 10**6]
    for (_, words), low, high in zip(heat_maps, edges, edges[1:], strict=False):
        assert low <= int(words) < high
    assert page.count("<h3>Bucket ") == len(report["buckets"])
    drawn = base64.b64encode(ALIGNMENT["figures"][0]["svg"].encode()).decode()  # from --alignment, an image
    assert "Alignment quality" in page and f'<img alt="" src="data:image/svg+xml;base64,{drawn}">' in page
    assert page.count("<table>") >= 2 + 2 * len(report["subsets"])
    assert not EXTERNAL.search(page)


# ----------------------------------------------------------------------------------------------------------
# a real browser


@pytest.mark.slow
def test_the_checks_catch_console_errors_and_network_requests(tmp_path: Path):
    """The browser checks below can fail: a page with both problems shows both."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
        '<img src="http://example.invalid/x.png"><script>console.error("broken")</script></body></html>'
    )
    _, console, requests = browse(bad, tmp_path / "browser", "--dump-dom")
    assert any('"broken"' in line for line in console)
    assert requests == ["http://example.invalid/x.png"]


@pytest.mark.slow
def test_chromium_loads_the_report_offline_and_draws_the_curve(html_page: Path, tmp_path: Path):
    dom, console, requests = browse(html_page, tmp_path / "dom", "--dump-dom")
    assert console == [] and requests == []
    assert re.search(r'<figure id="curve"><svg[^>]*>', dom)
    assert dom.count("<svg") == 2 + 3  # the curve and the diagnostics, 3 heat maps (alignment's: an <img>)

    shot = tmp_path / "shot.png"
    _, console, requests = browse(html_page, tmp_path / "shot", f"--screenshot={shot}")
    assert console == [] and requests == []
    pixels = (imread(shot)[..., :3] * 255).astype(int)  # (height, width, rgb)
    blue = np.abs(pixels - [31, 119, 180]).max(axis=-1) < 30  # matplotlib's first line colour, C0
    orange = np.abs(pixels - [255, 127, 14]).max(axis=-1) < 30  # the second system's, C1
    assert blue.sum() > 300 and orange.sum() > 50  # the curves, their bands and markers are drawn
