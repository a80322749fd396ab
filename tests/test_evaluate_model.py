"""`seq2seq eval --model RUN_DIR`: translate with the run's decode settings, score, keep the hypotheses."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import sacrebleu
from helpers import run_main, with_eval_section

from seq2seq_attn.decoding.translate import Translator
from seq2seq_attn.evaluation.metrics.diagnostics import bucket_row, sentence_counts
from seq2seq_attn.evaluation.models.systems import sentence_attention
from seq2seq_attn.runs.run_folder import load_trained


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`seq2seq --quiet ARGS` (the entry point, in this process), stdout and stderr as text."""
    return run_main("--quiet", *args, text=True)


def test_eval_model_translates_scores_and_keeps_hypotheses(tiny_run_dir: Path, tmp_path: Path):
    data = tiny_run_dir.parent / "data"
    src, ref = data / "test.src", data / "test.tgt"
    report = tmp_path / "report.json"
    result = run_cli(
        "eval",
        "--model",
        str(tiny_run_dir),
        "--label",
        "tiny",
        "--src",
        str(src),
        "--ref",
        str(ref),
        "--by-length",
        "--buckets",
        "0,4,8",
        "--bootstrap",
        "50",
        "--output",
        str(report),
    )
    assert result.returncode == 0, result.stderr
    hyp_file = tmp_path / "test.tiny.hyp"
    hypotheses = hyp_file.read_text(encoding="utf-8").splitlines()
    sources = src.read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == len(sources)

    # the kept file is exactly what the run's own decode settings produce
    model, vocab, config = load_trained(tiny_run_dir)
    expected = [
        t.texts[0] if t.texts else ""
        for t in Translator(model, vocab, config.decode, "cpu").translate(sources)
    ]
    assert hypotheses == expected

    saved = json.loads(report.read_text())
    (system,) = saved["systems"]
    assert system["label"] == "tiny"
    overall = next(row for row in system["rows"] if row["bucket"] == "all")
    references = ref.read_text(encoding="utf-8").splitlines()
    assert abs(overall["bleu"] - sacrebleu.corpus_bleu(hypotheses, [references]).score) < 1e-9


def test_a_run_named_from_inside_it_keeps_its_name_and_its_folder(tiny_run_dir: Path, tmp_path: Path):
    """`--model .` in the run folder, `--model best.pt` in its checkpoints/: the label is the run's name
    (it was empty, or "-best") and the translation is kept in the run folder (it went to checkpoints/)."""
    run = tmp_path / "tiny-run"
    shutil.copytree(tiny_run_dir, run, symlinks=True)
    data = tiny_run_dir.parent / "data"
    texts = ["--src", str(data / "test.src"), "--ref", str(data / "test.tgt")]
    result = run_main("--quiet", "eval", "--model", ".", *texts, cwd=run, text=True)
    assert result.returncode == 0 and "tiny-run" in result.stdout, result.stderr
    result = run_main("--quiet", "eval", "--model", "best.pt", *texts, cwd=run / "checkpoints", text=True)
    assert result.returncode == 0 and "tiny-run-best" in result.stdout, result.stderr
    assert sorted(path.name for path in run.glob("*.hyp")) == ["test.tiny-run-best.hyp", "test.tiny-run.hyp"]


def test_two_runs_of_one_label_are_refused_before_translating(tiny_run_dir: Path, tmp_path: Path):
    """Both would keep their translation in the same file; the refusal comes before any search."""
    data = tiny_run_dir.parent / "data"
    src, ref = data / "test.src", data / "test.tgt"
    report = tmp_path / "report.json"
    args = ["eval", "--model", str(tiny_run_dir), "--model", str(tiny_run_dir), "--src", str(src)]
    result = run_cli(*args, "--ref", str(ref), "--output", str(report))
    assert result.returncode == 2 and "is used 2 times: give each system its own label" in result.stderr
    assert not list(tmp_path.glob("*.hyp"))


def test_files_that_do_not_line_up_are_refused_before_a_run_translates(tiny_run_dir: Path, tmp_path: Path):
    data = tiny_run_dir.parent / "data"
    src, ref = data / "test.src", data / "test.tgt"
    one_line = tmp_path / "one.txt"
    one_line.write_text("a b\n", encoding="utf-8")
    keep = tmp_path / "report.json"
    for given in (["--hyp", str(one_line), "--src", str(src)], ["--src", str(one_line)]):
        model = ["--model", str(tiny_run_dir)]
        result = run_cli("eval", *given, *model, "--ref", str(ref), "--output", str(keep))
        assert result.returncode == 2 and "has 1 lines but" in result.stderr, result.stderr
        assert "translated" not in result.stderr and not list(tmp_path.glob("*.hyp"))


def test_eval_model_reports_the_diagnostics_of_its_own_search(tiny_run_dir: Path, tmp_path: Path):
    """The attention diagnostics come from the search that made the hypotheses, and agree with the same
    measures computed here from a search of our own; --plot also draws them."""
    data = tiny_run_dir.parent / "data"
    src, ref = data / "test.src", data / "test.tgt"
    report, plot = tmp_path / "report.json", tmp_path / "curve.png"
    result = run_cli(
        "eval", "--model", str(tiny_run_dir), "--src", str(src), "--ref", str(ref), "--by-length",
        "--buckets", "0,4,8", "--bootstrap", "0", "--output", str(report), "--plot", str(plot),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (system,) = json.loads(report.read_text())["diagnostics"]
    overall = system["rows"][0]
    assert overall["bucket"] == "all" and 0 <= overall["entropy"] <= 1 and 0 <= overall["dropped"] <= 1
    assert [row["bucket"] for row in system["rows"]] == ["all", "0-4", "4-8", "8+"]
    assert (tmp_path / "curve.diagnostics.png").read_bytes().startswith(b"\x89PNG")

    model, vocab, config = load_trained(tiny_run_dir)
    translator = Translator(model, vocab, config.decode, "cpu", with_attention=True)
    sources, references = src.read_text().splitlines(), ref.read_text().splitlines()
    counts = [
        sentence_counts(t.texts[0] if t.texts else "", reference, sentence_attention(translator, t))
        for t, reference in zip(translator.translate(sources), references, strict=True)
    ]
    assert bucket_row("all", counts, attention=True) == overall


def test_eval_model_needs_src(tiny_run_dir: Path):
    result = run_cli(
        "eval", "--model", str(tiny_run_dir), "--ref", str(tiny_run_dir.parent / "data" / "test.tgt")
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "seq2seq: error: --model translates the source: give --src FILE"
    ]


def test_eval_model_takes_the_runs_eval_section_unless_an_option_is_given(tiny_run_dir: Path, tmp_path: Path):
    data = tiny_run_dir.parent / "data"
    run = with_eval_section(tiny_run_dir, tmp_path / "a", buckets=[0, 3, 6], bootstrap=0, seed=7)
    report = tmp_path / "report.json"
    args = ["eval", "--model", str(run), "--src", str(data / "test.src"), "--ref", str(data / "test.tgt")]
    args += ["--by-length", "--output", str(report)]
    for extra, edges in (([], [0, 3, 6]), (["--buckets", "0,5"], [0, 5])):
        result = run_cli(*args, *extra)
        assert result.returncode == 0, result.stderr
        saved = json.loads(report.read_text(encoding="utf-8"))
        assert saved["edges"] == edges
        assert (saved["bootstrap"]["resamples"], saved["bootstrap"]["seed"]) == (0, 7)


def test_eval_models_that_differ_in_their_eval_section_need_the_option(tiny_run_dir: Path, tmp_path: Path):
    data = tiny_run_dir.parent / "data"
    first = with_eval_section(tiny_run_dir, tmp_path / "a", buckets=[0, 3, 6], bootstrap=0)
    second = with_eval_section(tiny_run_dir, tmp_path / "b", buckets=[0, 4], bootstrap=0)
    args = ["eval", "--model", str(first), "--model", str(second), "--label", "a", "--label", "b"]
    args += ["--src", str(data / "test.src"), "--ref", str(data / "test.tgt"), "--by-length"]
    args += ["--output", str(tmp_path / "report.json")]
    result = run_cli(*args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "seq2seq: error: the trained runs differ in eval.buckets ([0, 3, 6] vs [0, 4]): give --buckets"
    ]
    assert not list(tmp_path.rglob("*.hyp"))  # refused before either run translated
    result = run_cli(*args, "--buckets", "0,10")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["edges"] == [0, 10]
