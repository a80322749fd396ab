"""A shared task's BLEU beside sacrebleu's (`seq2seq eval --task-ref FILE --task-lang LANG`): the hypotheses
lowercased, punctuation-normalised and Moses-tokenised with escaping, as Multi30k processed its official
references, scored against those references with no further tokenisation and no smoothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sacrebleu
from helpers import assert_one_line_error, run_main

from seq2seq_attn.data import moses
from seq2seq_attn.evaluation.metrics.report import render

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "multi30k"

# Lines written for the rules of lowercase.perl | normalize-punctuation.perl -l LANG | tokenizer.perl -l LANG
HAND_WRITTEN = [
    ("en", 'A man\'s "big" dog.', "a man &apos;s &quot; big &quot; dog ."),  # escaping, English clitic
    ("en", "“Hello,” she said.", "&quot; hello , &quot; she said ."),  # typographic quotes
    ("en", "It costs 3 % & more.", "it costs 3 % &amp; more ."),  # "3 %" joined, then split; &amp;
    ("fr", "L’homme dit « bonjour ».", "l&apos; homme dit &quot; bonjour &quot; ."),  # ’ between ASCII
    ("fr", "Un coup d’œil.", "un coup d &quot; œil ."),  # ’ before a non-ASCII letter: a quote, as perl
    ("de", "Er sagt: „Hallo.“", "er sagt : &quot; hallo &quot; ."),  # period out of the quote at line end
    ("de", 'Ein Schild: "Kein Eintritt." Daneben.', "ein schild : &quot; kein eintritt &quot; . daneben ."),
]


@pytest.mark.parametrize(("lang", "line", "expected"), HAND_WRITTEN)
def test_the_task_pipeline_writes_what_the_moses_scripts_write(lang, line, expected):
    assert moses.task_pipeline(lang).line(line) == expected


def test_the_pipelines_name_their_steps():
    assert moses.Pipeline("fr").describe() == "moses-tokenizer:fr"  # the paper's, as signed before
    assert moses.task_pipeline("de").describe() == "lowercase+moses-punct-norm+moses-tokenizer-escape:de"


def read_lines(path: Path) -> list[str]:
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


@pytest.mark.slow(seconds=2)
@pytest.mark.skipif(not MULTI30K.is_dir(), reason="the Multi30k copy of ../shared/corpora is not here")
@pytest.mark.parametrize("lang", ["en", "fr", "de"])
def test_the_raw_multi30k_references_processed_are_the_official_ones_line_for_line(lang):
    pipeline = moses.task_pipeline(lang)
    for split in ("val", "test_2016_flickr", "test_2017_flickr"):
        raw = read_lines(MULTI30K / f"{split}.{lang}.gz")
        official = read_lines(MULTI30K / f"{split}.lc.norm.tok.{lang}")
        assert len(raw) == len(official) >= 1000
        differing = [
            i for i, (line, ref) in enumerate(zip(raw, official, strict=True)) if pipeline.line(line) != ref
        ]
        assert differing == [], f"{split}.{lang}: {len(differing)} lines differ, first {differing[:5]}"


# ----------------------------------------------------------------------------------------------------------
# seq2seq eval --task-ref

SOURCES = ["A man's dog.", "Er sagt: Hallo.", "A big red house near the river bank.", "Two cats."]
REFERENCES = [
    "L’homme a un chien.",
    "Il dit : « Bonjour. »",
    "Une grande maison rouge près de la rive.",
    "Deux chats.",
]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def task_files(tmp_path: Path) -> dict[str, Path]:
    """Sources, cased references, their task-processed form, and a lowercased system output."""
    lowered = [line.lower().replace("rouge", "bleue") for line in REFERENCES]
    return {
        "src": write(tmp_path / "test.en", SOURCES),
        "ref": write(tmp_path / "test.fr", REFERENCES),
        "task": write(tmp_path / "test.lc.norm.tok.fr", moses.task_pipeline("fr")(REFERENCES)),
        "hyp": write(tmp_path / "lowered.hyp", lowered),
    }


def run_cli(*args: str):
    return run_main("--quiet", *args)


def test_eval_reports_the_task_bleu_beside_sacrebleu_in_every_format(task_files, tmp_path):
    files = task_files
    report_path = tmp_path / "report.json"
    common = ["eval", "--hyp", str(files["hyp"]), "--ref", str(files["ref"]), "--src", str(files["src"])]
    task = ["--task-ref", str(files["task"]), "--task-lang", "fr", "--by-length", "--buckets", "0,5"]
    result = run_cli(*common, *task, "--bootstrap", "0", "--output", str(report_path))
    assert result.returncode == 0, result.stderr
    report = json.loads(report_path.read_text(encoding="utf-8"))
    signature = report["signatures"]["bleu_task"]
    assert signature.startswith("lowercase+moses-punct-norm+moses-tokenizer-escape:fr|nrefs:1|")
    assert "tok:none" in signature and "smooth:none" in signature
    assert report["signatures"]["bleu_moses"] is None
    assert report["task_references"] == str(files["task"])
    (system,) = report["systems"]
    rows = {row["bucket"]: row for row in system["rows"]}
    assert list(rows) == ["all", "0-5", "5+"]
    hypotheses = files["hyp"].read_text(encoding="utf-8").splitlines()
    # sacrebleu's BLEU (cased, detokenised) as always; the task's BLEU ignores case and counts Moses words
    assert rows["all"]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [REFERENCES]).score)
    words = moses.task_pipeline("fr")
    expected = sacrebleu.corpus_bleu(
        words(hypotheses), [words(REFERENCES)], tokenize="none", smooth_method="none", force=True
    )
    assert (
        rows["all"]["bleu_task"] == pytest.approx(expected.score)
        and rows["all"]["bleu_task"] > rows["all"]["bleu"]
    )
    # the short sentences differ from the references in case only, the long one in a word too
    assert rows["0-5"]["bleu_task"] == pytest.approx(100.0) and rows["0-5"]["bleu"] < 99
    assert rows["5+"]["count"] == 1 and rows["5+"]["bleu_task"] < 100.0

    text = result.stdout.decode()
    assert "BLEU-task" in text and f"Task references: {files['task']}" in text
    assert "BLEU-task: a shared task's own BLEU: the hypotheses lowercased" in render(report, "markdown")
    csv_lines = render(report, "csv").splitlines()
    assert "bleu_moses,bleu_task" in csv_lines[0]
    bleu_task = csv_lines[0].split(",").index("bleu_task")
    assert float(csv_lines[1].split(",")[bleu_task]) == pytest.approx(rows["all"]["bleu_task"])


def test_the_task_bleu_of_the_raw_references_is_100(task_files, tmp_path):
    files = task_files
    result = run_cli(
        "eval", "--hyp", str(files["ref"]), "--ref", str(files["ref"]), "--task-ref", str(files["task"]),
        "--task-lang", "fr", "--bootstrap", "0", "--format", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout)["systems"][0]["rows"][0]
    assert row["bleu"] == pytest.approx(100.0) == row["bleu_task"]


def test_eval_lowercase_makes_sacrebleu_case_insensitive_and_says_so(task_files):
    files = task_files
    base = ["eval", "--hyp", str(files["hyp"]), "--ref", str(files["ref"]), "--bootstrap", "0"]
    hypotheses = files["hyp"].read_text(encoding="utf-8").splitlines()
    scores = {}
    for case, options in (("mixed", ()), ("lc", ("--lowercase",))):
        result = run_cli(*base, *options, "--format", "json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert f"|case:{case}|" in report["signatures"]["bleu"]
        assert f"|case:{case}|" in report["signatures"]["chrf"]
        scores[case] = report["systems"][0]["rows"][0]
    lowered = sacrebleu.corpus_bleu(hypotheses, [REFERENCES], lowercase=True)
    assert scores["lc"]["bleu"] == pytest.approx(lowered.score)
    assert scores["lc"]["bleu"] > scores["mixed"]["bleu"]  # the output is lowercased, the references cased
    assert scores["lc"]["chrf"] > scores["mixed"]["chrf"]


@pytest.mark.slow(seconds=2)
@pytest.mark.skipif(not MULTI30K.is_dir(), reason="the Multi30k copy of ../shared/corpora is not here")
def test_a_model_trained_on_the_task_form_is_scored_on_exactly_the_official_words():
    """`data.tokenize: task`: the model writes the task's words (unescaped), detokenised; the task's BLEU
    puts them through its processing again. That round trip gives the official references back, so a
    perfect output scores 100 on the task's metric."""
    text = moses.text_pipeline("task", "fr")
    for split in ("val", "test_2016_flickr", "test_2017_flickr"):
        written = [
            moses.detokenize(text.line(line), "fr") for line in read_lines(MULTI30K / f"{split}.fr.gz")
        ]
        official = read_lines(MULTI30K / f"{split}.lc.norm.tok.fr")
        assert moses.task_pipeline("fr")(written) == official


def test_eval_model_takes_the_task_language_from_the_run(tiny_run_dir, tmp_path):
    data = tiny_run_dir.parent / "data"
    references = (data / "test.tgt").read_text(encoding="utf-8").splitlines()[:20]
    ref = write(tmp_path / "test.fr", references)
    src = write(tmp_path / "test.en", (data / "test.src").read_text(encoding="utf-8").splitlines()[:20])
    task = write(tmp_path / "test.lc.norm.tok.fr", moses.task_pipeline("fr")(references))
    result = run_cli(
        "eval", "--model", str(tiny_run_dir), "--src", str(src), "--ref", str(ref), "--task-ref", str(task),
        "--bootstrap", "0", "--output", str(tmp_path / "r.json"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert report["signatures"]["bleu_task"].startswith(
        "lowercase+moses-punct-norm+moses-tokenizer-escape:fr|"
    )
    assert report["systems"][0]["rows"][0]["bleu_task"] is not None


def test_task_options_that_cannot_work_are_one_line_errors(task_files, tmp_path):
    files = task_files
    base = ["eval", "--hyp", str(files["hyp"]), "--ref", str(files["ref"])]
    assert_one_line_error(run_cli(*base, "--task-lang", "fr"), "--task-lang", "--task-ref FILE")
    assert_one_line_error(run_cli(*base, "--task-ref", str(files["task"])), "--task-lang LANG")
    short = write(tmp_path / "short.lc.norm.tok.fr", ["one line"])
    assert_one_line_error(
        run_cli(*base, "--task-ref", str(short), "--task-lang", "fr"), f"{short} has 1 lines but", "has 4"
    )
