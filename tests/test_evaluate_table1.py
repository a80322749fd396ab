"""Scoring as Bahdanau et al. 2014, Table 1: the "no UNK" subset of a word-vocabulary run, and BLEU on
Moses-tokenised text (multi-bleu.perl) beside sacrebleu's default BLEU."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import sentencepiece as spm
from helpers import make_run_dir, tiny_config, write_corpus
from typer.testing import CliRunner

from seq2seq_attn.cli import app
from seq2seq_attn.config import EvalConfig
from seq2seq_attn.data import moses
from seq2seq_attn.evaluation.metrics.by_length import Subset, TokenisedBleu, evaluate
from seq2seq_attn.evaluation.metrics.inputs import System
from seq2seq_attn.evaluation.metrics.report import render


@pytest.fixture(scope="module")
def word_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny run whose vocabulary is a word shortlist smaller than the corpus's words."""
    root = tmp_path_factory.mktemp("word")
    config = tiny_config(root, vocab={"type": "word", "size": 14})
    write_corpus(config.data_dir, n=120, seed=3)
    return make_run_dir(config)


def shortlist(model_file: Path) -> set[str]:
    """The words a sentencepiece word model knows, read from the model itself."""
    processor = spm.SentencePieceProcessor(model_file=str(model_file))
    pieces = (processor.id_to_piece(i) for i in range(processor.get_piece_size()))
    return {piece.removeprefix("\u2581") for piece in pieces}


def test_no_unk_rows_score_exactly_the_sentences_the_shortlists_cover(word_run: Path, tmp_path: Path):
    data = word_run.parent / "data"
    src, ref, out = data / "test.src", data / "test.tgt", tmp_path / "report.json"
    args = ["eval", "--model", str(word_run), "--label", "word", "--src", str(src), "--ref", str(ref)]
    args += ["--by-length", "--buckets", "0,4,8", "--bootstrap", "20", "--output", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output

    sources, references = src.read_text().splitlines(), ref.read_text().splitlines()
    src_words, tgt_words = (shortlist(word_run / "vocab" / f"{side}.model") for side in ("src", "tgt"))
    covered = [
        i
        for i, (s, r) in enumerate(zip(sources, references, strict=True))
        if set(s.split()) <= src_words and set(r.split()) <= tgt_words
    ]
    assert 0 < len(covered) < len(sources)  # the shortlist leaves some sentences out, not all

    report = json.loads(out.read_text())
    assert [(s["name"], s["sentences"]) for s in report["subsets"]] == [
        ("all", len(sources)),
        ("no UNK", len(covered)),
    ]
    assert report["subsets"][1]["definition"].endswith(
        "; word translated with <unk> forbidden (decode.no_unk)"
    )
    hypotheses = (tmp_path / "test.word.hyp").read_text().splitlines()
    # the no-UNK rows read a second search of those sentences that never generates <unk> (Table 1)
    kept = (tmp_path / "test.word.no-unk.hyp").read_text().splitlines()  # line-aligned with the sources
    assert len(kept) == len(sources)
    assert [kept[i] for i in range(len(sources)) if i not in covered] == [
        hypotheses[i] for i in range(len(sources)) if i not in covered
    ]
    no_unk = {i: kept[i] for i in covered}
    assert not any("<unk>" in line for line in no_unk.values())
    rows = {(row["subset"], row["bucket"]): row for row in report["systems"][0]["rows"]}
    for bucket, low, high in [("all", 0, 99), ("0-4", 0, 4), ("4-8", 4, 8), ("8+", 8, 99)]:
        members = [i for i in covered if low <= len(sources[i].split()) < high]
        row = rows["no UNK", bucket]
        assert row["count"] == len(members)
        if members:
            expected = sacrebleu.corpus_bleu([no_unk[i] for i in members], [[references[i] for i in members]])
            assert row["bleu"] == expected.score
    assert rows["all", "all"]["bleu"] == sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert "no UNK: " in result.stdout and "no UNK" in render(report, "markdown")


def test_subword_runs_get_no_no_unk_rows(tiny_run_dir: Path, tmp_path: Path):
    data = tiny_run_dir.parent / "data"
    args = [
        "eval",
        "--model",
        str(tiny_run_dir),
        "--src",
        str(data / "test.src"),
        "--ref",
        str(data / "test.tgt"),
    ]
    result = CliRunner().invoke(app, [*args, "--bootstrap", "0", "--output", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert [s["name"] for s in report["subsets"]] == ["all"]


def test_moses_bleu_is_bleu_of_moses_tokens_without_smoothing():
    """French elision: Moses splits l'homme into l' homme, sacrebleu's 13a keeps one token."""
    reference, hypothesis = "l'homme mange une pomme rouge.", "l'homme mange une pomme verte."
    paper_words = TokenisedBleu("bleu_moses", moses.Pipeline("fr"))
    report = evaluate(
        [System("s", [hypothesis])], [reference], config=EvalConfig(bootstrap=0), tokenised=[paper_words]
    )
    row = report["systems"][0]["rows"][0]
    # Moses tokens: l' homme mange une pomme rouge|verte . -> n-gram matches 6/7, 4/6, 3/5, 2/4, BP 1
    assert row["bleu_moses"] == pytest.approx(
        100 * math.exp(sum(map(math.log, [6 / 7, 4 / 6, 3 / 5, 2 / 4])) / 4)
    )
    assert row["bleu"] == sacrebleu.corpus_bleu([hypothesis], [[reference]]).score != row["bleu_moses"]
    assert report["signatures"]["bleu_moses"].startswith("moses-tokenizer:fr|")
    assert (
        "tok:none" in report["signatures"]["bleu_moses"]
        and "smooth:none" in report["signatures"]["bleu_moses"]
    )
    text = render(report, "text")
    assert "BLEU-moses" in text and "multi-bleu.perl" in text
    assert f",all,{row['bleu_moses']}," in render(report, "csv").splitlines()[1]


def test_moses_bleu_counts_an_unknown_word_as_one_word():
    """A word model writes <unk>; multi-bleu.perl on the authors' output counted UNK as one word. Moses
    would split "<unk>" into "< unk >": three unmatched words, lower precisions, a longer hypothesis."""
    reference, hypothesis = "le chat mange une pomme rouge .", "le chat mange une <unk> rouge ."
    paper_words = TokenisedBleu("bleu_moses", moses.Pipeline("fr"))
    report = evaluate(
        [System("s", [hypothesis])], [reference], config=EvalConfig(bootstrap=0), tokenised=[paper_words]
    )
    # 7 words against 7: n-gram matches 6/7, 4/6, 2/5, 1/4, BP 1
    assert report["systems"][0]["rows"][0]["bleu_moses"] == pytest.approx(
        100 * math.exp(sum(map(math.log, [6 / 7, 4 / 6, 2 / 5, 1 / 4])) / 4)
    )


def test_a_subset_scores_its_own_outputs_where_a_system_has_them():
    references = ["a b c d", "e f g h", "i j k l"]
    first, second = ["a b c d", "x x x x", "i j k l"], ["a b c d", "e f g h", "i j k l"]
    subset = Subset("no UNK", "lines 1 and 2", np.array([1, 2]), outputs={"s": second})
    report = evaluate(
        [System("s", first), System("t", first)], references, subsets=[subset], config=EvalConfig(bootstrap=0)
    )
    rows = {
        (system["label"], row["subset"]): row["bleu"]
        for system in report["systems"]
        for row in system["rows"]
    }
    assert rows["s", "no UNK"] == pytest.approx(100.0)  # its outputs for the subset
    assert rows["t", "no UNK"] == sacrebleu.corpus_bleu(first[1:], [references[1:]]).score < 100
    assert rows["s", "all"] == rows["t", "all"] < 100  # every sentence: its own hypotheses
