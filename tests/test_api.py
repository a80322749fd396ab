"""The Python API (`import seq2seq_attn as s2s`): the same translations and scores as the command line,
cheap to import, errors as UserError, and the README's example run as written."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import ROOT, record_compiles, run_main

import seq2seq_attn as s2s
from seq2seq_attn.errors import UserError

LINES = ["the cat sat on the mat", "", "a big red dog ran to the house"]


@pytest.fixture(scope="module")
def model(tiny_run_dir: Path) -> s2s.Model:
    return s2s.load(tiny_run_dir, beam_size=3)


def test_the_package_exports_the_api_and_imports_no_torch() -> None:
    assert set(s2s.__all__) >= {"load", "Model", "Candidate", "Attention", "Score", "UserError"}
    assert s2s.UserError is UserError
    code = "import sys, seq2seq_attn; print('torch' in sys.modules, 'seq2seq_attn.api' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        s2s.nothing  # noqa: B018


def test_translations_are_the_command_lines(model: s2s.Model, tiny_run_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    result = run_main(
        "translate", "--model", str(tiny_run_dir), "--beam", "3", "--input", str(source), text=True
    )
    assert result.returncode == 0, result.stderr
    assert model.translate(LINES) == result.stdout.splitlines()
    assert model.translate_one(LINES[0]) == result.stdout.splitlines()[0]
    assert model.translate([""]) == [""] and model.decode.beam_size == 3


def test_nbest_lists_are_the_command_lines(model: s2s.Model, tiny_run_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.write_text(LINES[0] + "\n", encoding="utf-8")
    args = ["translate", "--model", str(tiny_run_dir), "--beam", "4", "--nbest", "4", "--input", str(source)]
    rows = [line.split("\t") for line in run_main(*args, text=True).stdout.splitlines()]
    (candidates,) = model.nbest([LINES[0]], 4)
    assert [c.text for c in candidates] == [row[3] for row in rows]
    assert [round(c.score, 4) for c in candidates] == [float(row[2]) for row in rows]
    assert [c.score for c in candidates] == sorted((c.score for c in candidates), reverse=True)
    assert model.decode.nbest == 1  # the call's n-best did not change the model's settings
    with pytest.raises(UserError, match=r"^n: `decode.nbest` must be a number >= 1, got 0$"):
        model.nbest([LINES[0]], 0)  # (the keys it sets are named by its argument)


def test_scores_are_the_command_lines(model: s2s.Model, tiny_run_dir: Path, tmp_path: Path) -> None:
    targets = ["le chat", "", "un grand chien"]
    for name, lines in (("src", LINES), ("tgt", targets)):
        (tmp_path / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    args = [
        "score",
        "--model",
        str(tiny_run_dir),
        "--src",
        str(tmp_path / "src"),
        "--tgt",
        str(tmp_path / "tgt"),
    ]
    rows = [json.loads(line) for line in run_main(*args, "--format", "jsonl", text=True).stdout.splitlines()]
    scores = model.score(LINES, targets)
    assert [row["log_prob"] for row in rows] == [
        None if s.log_prob is None else pytest.approx(s.log_prob, abs=1e-9) for s in scores
    ]
    report = model.perplexity(LINES, targets)
    total = report["rows"][0]
    assert total["bucket"] == "all" and total["sentences"] == 2 and total["unscored"] == 1
    scored = [s for s in scores if s.log_prob is not None]
    assert total["ppl"] == pytest.approx(
        math.exp(-sum(s.log_prob for s in scored) / sum(s.pieces for s in scored))
    )


def test_attention_of_a_translation(model: s2s.Model) -> None:
    attention = model.attention(LINES[0])
    assert attention.translation == model.translate_one(LINES[0])
    assert attention.source[-1] == attention.target[-1] == "</s>"
    assert attention.weights.shape == (len(attention.target), len(attention.source))
    assert np.allclose(attention.weights.sum(axis=1), 1.0, atol=1e-5)
    assert model.attention("") is None


def test_an_ensemble_of_a_run_with_itself_translates_as_the_run(model: s2s.Model, tiny_run_dir: Path) -> None:
    ensemble = s2s.load([tiny_run_dir, tiny_run_dir], beam_size=3)
    assert ensemble.translate(LINES) == model.translate(LINES)
    with pytest.raises(UserError, match="scores are of one model"):
        ensemble.score(LINES[:1], ["le chat"])


def test_threads_and_bad_input_raise_user_errors(tiny_run_dir: Path, tmp_path: Path) -> None:
    before = torch.get_num_threads()
    try:
        s2s.load(tiny_run_dir, threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    for threads in (0, "2", 2.5, True):
        with pytest.raises(UserError, match="threads must be a whole number of at least 1"):
            s2s.load(tiny_run_dir, threads=threads)
    with pytest.raises(UserError, match=str(tmp_path / "missing")):
        s2s.load(tmp_path / "missing")
    with pytest.raises(UserError, match="decode.beam"):
        s2s.load(tiny_run_dir, beam=3)
    with pytest.raises(
        UserError, match=r"^decode.beam_size: `decode.beam_size` must be a number >= 1, got 0$"
    ):
        s2s.load(tiny_run_dir, beam_size=0)
    other = tmp_path / "other"
    shutil.copytree(tiny_run_dir, other)
    (other / "vocab" / "tgt.model").write_bytes((other / "vocab" / "src.model").read_bytes())
    with pytest.raises(UserError, match="different vocabulary"):
        s2s.load(other)


def test_a_string_where_a_list_of_sentences_is_due_is_refused(model: s2s.Model) -> None:
    """A string is a sequence of characters: taken as it is, it was one sentence per character."""
    for call in (model.translate, model.search, lambda lines: model.nbest(lines, 2)):
        with pytest.raises(UserError, match="^lines: a list of sentences, not one string"):
            call("the cat sat")
    with pytest.raises(UserError, match="^sources: a list of sentences"):
        model.score("the cat", ["le chat"])
    with pytest.raises(UserError, match="^targets: a list of sentences"):
        model.perplexity(["the cat"], "le chat")


def test_the_settings_shown_are_a_copy(model: s2s.Model) -> None:
    shown = model.decode
    shown.beam_size = 0  # changing the copy changes nothing: settings are checked where they are made
    assert model.decode.beam_size == 3 and model.translate(LINES[:1])[0]


def test_a_dictionary_given_to_load_turns_unk_replacement_on_as_on_the_command_line(
    tiny_run_dir: Path, tmp_path: Path
) -> None:
    dictionary = tmp_path / "dict.tsv"
    dictionary.write_text("cat\tchat\n", encoding="utf-8")
    assert s2s.load(tiny_run_dir, unk_dictionary=str(dictionary)).decode.replace_unk
    assert not s2s.load(tiny_run_dir, unk_dictionary=str(dictionary), replace_unk=False).decode.replace_unk
    with pytest.raises(UserError, match=str(tmp_path / "missing.tsv")):
        s2s.load(tiny_run_dir, unk_dictionary=str(tmp_path / "missing.tsv"))


def test_a_run_folders_own_report_is_not_its_bleu_by_length(tiny_run_dir: Path, tmp_path: Path) -> None:
    """Only an exported folder carries a report (`export --report`); a run folder's files stay its own."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    (run / "by_length.json").write_text('{"note": "my own file"}', encoding="utf-8")
    assert s2s.load(run).bleu_by_length is None


def test_a_damaged_lexical_shortlist_is_one_line_naming_it(tiny_run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    (run / "lexical_shortlist.npz").write_bytes(b"not a table")
    with pytest.raises(
        UserError, match=f"^{run / 'lexical_shortlist.npz'}: not a readable lexical shortlist"
    ):
        s2s.load(run, lexical_shortlist=True)


def readme_example() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## From Python\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_example_runs_as_written(tiny_run_dir: Path, tmp_path: Path) -> None:
    """The README's block as it stands, in a folder where runs/demo/rnnsearch is a trained run."""
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    shutil.copytree(tiny_run_dir, tmp_path / "runs" / "demo" / "rnnsearch")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", readme_example()], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 + 3 + 2 and lines[-1].endswith(")")  # translation, 3-best, score, attention


def test_a_search_with_other_settings_leaves_the_models_compile_choice_alone(
    tiny_run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """decode.compile: n-best lists (beam 2) search compiled; greedy translations of the same model stay
    eager before and after, as the option says (a setting of the shared model would stay with it, and
    under a server change the searches of other threads)."""
    compiled = record_compiles(monkeypatch)
    model = s2s.load(tiny_run_dir, beam_size=1, compile=True)
    model.translate(["the cat sat"])
    assert compiled == []
    model.nbest(["the cat sat"], 2)
    assert compiled and set(compiled) == {"additive_attention"}
    compiled.clear()
    model.translate(["the cat sat"])
    assert compiled == []
