"""`seq2seq score`: forced decoding agrees with the search's own log-probabilities, one row per line,
perplexity by length, and n-best rescoring."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import assert_one_line_error, quiet_env, run_main

from seq2seq_attn.decoding.search import translate_ids
from seq2seq_attn.errors import UserError
from seq2seq_attn.evaluation.models.likelihood import (
    Score,
    Scorer,
    format_score,
    load_scorer,
    perplexity_report,
    score_ids,
)
from seq2seq_attn.runs.run_folder import load_trained

SOURCES = ["the cat sat on the mat", "a dog ran to the big red house", "", "naïve cat", "the"]


@pytest.fixture(scope="module")
def loaded(tiny_run_dir: Path):
    return load_trained(tiny_run_dir, "cpu")


@pytest.mark.parametrize("beam", [1, 4])
def test_the_score_of_a_search_output_is_the_searchs_own_log_probability(loaded, beam: int) -> None:
    """Over the hypothesis' own pieces, the source cut as translation cuts it (fp32, 1e-4 per piece)."""
    model, vocab, config = loaded
    decode = dataclasses.replace(config.decode, beam_size=beam, nbest=beam, max_src_tokens=5)
    sources = vocab.encode_src([line for line in SOURCES if line])
    cut = [ids[: decode.max_src_tokens] for ids in sources]
    searched = translate_ids(model, cut, decode, "cpu")
    pairs = [(src, hyp) for src, nbest in zip(cut, searched, strict=True) for hyp in nbest]
    scores = score_ids(model, [src for src, _ in pairs], [hyp.tokens for _, hyp in pairs], decode, "cpu")
    assert len(pairs) == beam * len(sources)
    for (_, hyp), values in zip(pairs, scores, strict=True):
        assert len(values) == len(hyp.tokens) + 1  # every piece and EOS
        assert abs(math.fsum(values) - hyp.log_prob) <= 1e-4 * len(values)


def test_scores_run_in_the_decode_precision(loaded, monkeypatch) -> None:
    """The forced pass runs as search does, in `decode.precision` (TF32 products under `tf32`)."""
    from seq2seq_attn.decoding import forced

    model, vocab, config = loaded
    asked: list[tuple] = []
    recorded = lambda *how: asked.append(how) or contextlib.nullcontext()  # noqa: E731
    monkeypatch.setattr(forced, "decode_precision", recorded)
    decode = dataclasses.replace(config.decode, precision="tf32")
    score_ids(model, vocab.encode_src(["the cat"]), [[5]], decode, "cpu")
    assert asked == [("tf32", torch.device("cpu"))]


def test_rows_follow_the_input_lines(loaded) -> None:
    model, vocab, config = loaded
    config = dataclasses.replace(config, decode=dataclasses.replace(config.decode, max_src_tokens=4))
    targets = ["le chat", "un chien", "le chat", "", "le"]
    scores = Scorer(model, vocab, config, "cpu").score(SOURCES, targets)
    assert len(scores) == len(SOURCES)
    assert scores[2] == Score(None) and scores[2].log_prob is None  # an empty source: no score
    assert scores[3].pieces == 1 and scores[3].log_prob < 0  # an empty target: the EOS alone
    assert [score.src_cut for score in scores] == [len(ids) > 4 for ids in vocab.encode_src(SOURCES)]
    assert scores[0].src_cut and not scores[4].src_cut
    assert scores[0].pieces == len(vocab.encode_tgt(["le chat"])[0]) + 1
    assert scores[0].mean == pytest.approx(scores[0].log_prob / scores[0].pieces)
    with pytest.raises(UserError, match="5 source lines but 1 target lines"):
        Scorer(model, vocab, config, "cpu").score(SOURCES, ["x"])


def test_row_formats() -> None:
    score = Score([-1.0, -0.5], src_cut=True)
    assert format_score(0, score, "tsv", False) == "-1.5000\t2\t-0.7500\t1"
    assert format_score(0, score, "tsv", True) == "-1.5000\t2\t-0.7500\t1\t-1.0000 -0.5000"
    assert format_score(3, Score(None), "tsv", False) == "\t0\t\t0"
    row = json.loads(format_score(3, score, "jsonl", True))
    assert row == {"index": 3, "log_prob": -1.5, "pieces": 2, "mean": -0.75, "src_cut": True,
                   "piece_log_probs": [-1.0, -0.5]}  # fmt: skip


def test_perplexity_by_length(loaded) -> None:
    _, _, config = loaded
    scores = [Score([-1.0, -1.0]), Score([-2.0] * 4), Score(None)]
    sources = ["a b", "w " * 12, ""]
    report = perplexity_report(scores, sources, dataclasses.replace(config.eval, buckets=[0, 10]))
    rows = {row["bucket"]: row for row in report["rows"]}
    assert rows["all"]["sentences"] == 2 and rows["all"]["unscored"] == 1 and rows["all"]["pieces"] == 6
    assert rows["all"]["ppl"] == pytest.approx(math.exp(10 / 6))
    assert rows["0-10"]["ppl"] == pytest.approx(math.e) and rows["10+"]["ppl"] == pytest.approx(math.e**2)


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_score_command_writes_a_row_per_line_and_the_perplexity(tiny_run_dir: Path, tmp_path: Path) -> None:
    src = write(tmp_path / "src", SOURCES)
    tgt = write(tmp_path / "tgt", ["le chat", "un chien", "x", "", "le"])
    args = ["score", "--model", str(tiny_run_dir), "--src", str(src), "--tgt", str(tgt)]
    result = run_main(
        *args, "--format", "jsonl", "--pieces", "--report", str(tmp_path / "ppl.json"), text=True
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["index"] for row in rows] == list(range(len(SOURCES)))
    assert rows[2]["log_prob"] is None
    for row in rows[:2]:
        assert math.fsum(row["piece_log_probs"]) == pytest.approx(row["log_prob"])
    report = json.loads((tmp_path / "ppl.json").read_text())
    total = report["rows"][0]
    assert total["bucket"] == "all" and total["sentences"] == 4
    assert total["ppl"] == pytest.approx(
        math.exp(-sum(r["log_prob"] for r in rows if r["log_prob"]) / total["pieces"])
    )
    assert "all" in result.stderr and f"{total['ppl']:.2f}" in result.stderr


@pytest.fixture(scope="module")
def nbest_file(tiny_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("nbest")
    src = write(folder / "src", SOURCES)
    result = run_main("translate", "--model", str(tiny_run_dir), "--input", str(src), "--beam", "4",
                      "--nbest", "4", "--output", str(folder / "nbest"), text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return src, folder / "nbest"


def test_rescoring_ranks_each_lines_hypotheses_by_their_forced_scores(tiny_run_dir, nbest_file) -> None:
    """Each hypothesis' new score is its forced-decoding log p / lp(pieces) (the text re-encoded: a search
    output's own pieces can differ from its text's encoding, so the search's scores are not expected)."""
    src, nbest = nbest_file
    penalty = ["--length-penalty", "gnmt", "--alpha", "0.6"]
    base = ["score", "--model", str(tiny_run_dir), "--src", str(src), "--nbest", str(nbest)]
    result = run_main(*base, *penalty, text=True)
    assert result.returncode == 0, result.stderr
    original, rescored = (by_line(text) for text in (nbest.read_text(), result.stdout))
    assert original.keys() == rescored.keys() == set(range(len(SOURCES)))
    scorer = load_scorer(tiny_run_dir)
    for index, rows in rescored.items():
        assert [rank for rank, _, _ in rows] == list(range(1, len(rows) + 1))
        assert [score for _, score, _ in rows] == sorted((score for _, score, _ in rows), reverse=True)
        assert sorted(text for *_, text in rows) == sorted(text for *_, text in original[index])
        forced = scorer.score([SOURCES[index]] * len(rows), [text for *_, text in rows])
        expected = [s.log_prob / ((5 + s.pieces) / 6) ** 0.6 if s.log_prob is not None else 0 for s in forced]
        assert [score for _, score, _ in rows] == pytest.approx(expected, abs=1e-4)


def by_line(text: str) -> dict[int, list[tuple[int, float, str]]]:
    """An n-best file's rows as {line index: [(rank, score, translation), ...]}."""
    rows: dict[int, list[tuple[int, float, str]]] = {}
    for line in text.splitlines():
        index, rank, score, translation = line.split("\t")
        rows.setdefault(int(index), []).append((int(rank), float(score), translation))
    return rows


def test_rescoring_with_two_models_and_best(tiny_run_dir, nbest_file, tmp_path: Path) -> None:
    src, nbest = nbest_file
    models = ["--model", str(tiny_run_dir), "--model", str(tiny_run_dir)]
    base = ["score", *models, "--src", str(src), "--nbest", str(nbest)]
    doubled = run_main(*base, "--weights", "1,1", text=True).stdout.splitlines()
    single = run_main(
        "score", "--model", str(tiny_run_dir), "--src", str(src), "--nbest", str(nbest), text=True
    )
    for two, one in zip(
        doubled, single.stdout.splitlines(), strict=True
    ):  # the same model twice: 2x the score
        assert two.split("\t")[3] == one.split("\t")[3]
        assert float(two.split("\t")[2]) == pytest.approx(2 * float(one.split("\t")[2]), abs=1e-3)
    best = run_main(*base, "--best", "--output", str(tmp_path / "best"), text=True)
    assert best.returncode == 0, best.stderr
    lines = (tmp_path / "best").read_text().splitlines()
    firsts = [row.split("\t")[3] for row in doubled if row.split("\t")[1] == "1"]
    assert len(lines) == len(SOURCES) and lines == firsts


@pytest.mark.slow
def test_rescored_rows_on_stdout_are_utf8_whatever_the_locale(tiny_run_dir, tmp_path) -> None:
    """As translate writes: a stdout whose encoding cannot hold a hypothesis' text still gets its bytes."""
    src = write(tmp_path / "src", ["the cat"])
    nbest = write(tmp_path / "nbest", ["0\t1\t-1.0\tthe cat 😀"])
    result = subprocess.run(
        [sys.executable, "-m", "seq2seq_attn", "score", "-m", str(tiny_run_dir), "--src", str(src)]
        + ["--nbest", str(nbest)],
        capture_output=True,
        env={**quiet_env(), "PYTHONIOENCODING": "latin-1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode("utf-8").endswith("\tthe cat 😀\n")


@pytest.mark.parametrize(
    ("extra", "fragments"),
    [
        ([], ["give either --tgt FILE", "--nbest FILE"]),
        (["--tgt", "T", "--nbest", "N"], ["give either --tgt FILE"]),
        (["--nbest", "BAD"], ["BAD:2: expected `index<TAB>rank<TAB>score<TAB>translation`"]),
        (["--nbest", "FAR"], ["FAR:1: index 9 is not a line of the 5-line source"]),
        (["--nbest", "N", "--weights", "1,2"], ["--weights '1,2' has 2 weights for 1 --model"]),
        (["--nbest", "N", "--weights", "nan"], ["--weights 'nan': expected finite numbers"]),
        (["--tgt", "T", "--best"], ["--best picks from an n-best list"]),
    ],
)
def test_bad_score_options_are_one_line_errors(tiny_run_dir, nbest_file, tmp_path, extra, fragments) -> None:
    src, nbest = nbest_file
    files = {"T": str(src), "N": str(nbest)}
    files["BAD"] = str(write(tmp_path / "BAD", ["0\t1\t-1.0\tle chat", "zero\t1\t-1\tx"]))
    files["FAR"] = str(write(tmp_path / "FAR", ["9\t1\t-1.0\tle chat"]))
    args = [files.get(arg, arg) for arg in extra]
    result = run_main("score", "--model", str(tiny_run_dir), "--src", str(src), *args)
    assert_one_line_error(
        result,
        *[fragment.replace("BAD", files["BAD"]).replace("FAR", files["FAR"]) for fragment in fragments],
    )


def test_load_scorer_reads_the_runs_config(tiny_run_dir: Path) -> None:
    scorer = load_scorer(tiny_run_dir)
    assert scorer.cfg == scorer.config.decode and scorer.vocab.tgt_size > 4
