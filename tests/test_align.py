"""`seq2seq align`: gold readers, AER on hand-computed cases, piece-to-word merging, the CLI end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import make_run_dir, tiny_config, with_eval_section, write_corpus

from seq2seq_attn.cli import main
from seq2seq_attn.errors import UserError
from seq2seq_attn.evaluation.metrics.buckets import bucket_labels
from seq2seq_attn.evaluation.metrics.diagnostics import merge_matrix, word_attention
from seq2seq_attn.evaluation.models.align import (
    AlignmentCorpus,
    GoldLinks,
    alignment_scores,
    alignment_section,
    attention_scores,
    diagonal_links,
    encode_words,
    link_counts,
    load_corpus,
    predict_links,
    read_gold,
    score_links,
)
from seq2seq_attn.runs.run_folder import load_trained


def gold(sure=(), possible=()) -> GoldLinks:
    """Gold links of one pair; P is `possible` plus the sure links."""
    return GoldLinks(frozenset(sure), frozenset({*sure, *possible}))


def scores_of(predicted: list[set], golds: list[GoldLinks]) -> dict:
    counts = np.array([link_counts(links, g) for links, g in zip(predicted, golds, strict=True)])
    return alignment_scores(counts)


# ----------------------------------------------------------------------------------------------------------
# AER, precision, recall


def test_perfect_alignment_has_aer_0():
    sure = {(0, 0), (1, 1), (2, 2)}
    assert scores_of([sure], [gold(sure, {(2, 1)})]) == {
        "aer": 0.0,
        "precision": 1.0,
        "recall": 1.0,
        "sentences": 1,
    }


def test_empty_alignment_has_aer_1_and_no_precision():
    assert scores_of([set()], [gold({(0, 0), (1, 1)})]) == {
        "aer": 1.0,
        "precision": None,
        "recall": 0.0,
        "sentences": 1,
    }


def test_only_possible_links():
    possible = gold(possible={(0, 1), (1, 0)})
    assert scores_of([{(0, 1)}], [possible]) == {"aer": 0.0, "precision": 1.0, "recall": None, "sentences": 1}
    assert scores_of([{(0, 0)}], [possible]) == {"aer": 1.0, "precision": 0.0, "recall": None, "sentences": 1}
    assert scores_of([set()], [possible])["aer"] is None  # no predicted and no sure link: undefined


def test_mixed_case_by_hand():
    # S = {0-0, 1-1}, P = S + {2-1}, A = {0-0, 2-1, 2-2}: |A| 3, |S| 2, |A&S| 1, |A&P| 2
    scores = scores_of([{(0, 0), (2, 1), (2, 2)}], [gold({(0, 0), (1, 1)}, {(2, 1)})])
    assert scores["precision"] == pytest.approx(2 / 3)
    assert scores["recall"] == pytest.approx(1 / 2)
    assert scores["aer"] == pytest.approx(1 - 3 / 5)


def test_counts_are_summed_over_the_corpus_not_averaged():
    # pair 1 perfect (AER 0); pair 2: A 3 links, one of them sure of S 1 -> |A| 4, |S| 2, |A&S| = |A&P| = 2
    predicted = [{(0, 0)}, {(0, 0), (1, 0), (2, 0)}]
    golds = [gold({(0, 0)}), gold({(1, 0)})]
    assert scores_of(predicted, golds)["aer"] == pytest.approx(1 - 4 / 6)  # the mean per pair would be 1/3


# ----------------------------------------------------------------------------------------------------------
# gold files


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_pharaoh_reader_sure_and_possible(tmp_path: Path):
    path = write(tmp_path / "g.pharaoh", "0-0 1?2 2p1 1p2\n\n1-1 1p1\n")
    links = read_gold(path, "pharaoh", [(3, 3), (1, 1), (2, 2)])
    assert links == [gold({(0, 0)}, {(1, 2), (2, 1)}), gold(), gold({(1, 1)})]


def test_pharaoh_reader_one_indexed(tmp_path: Path):
    path = write(tmp_path / "g.pharaoh", "1-1 2p3\n")
    assert read_gold(path, "pharaoh", [(2, 3)], one_indexed=True) == [gold({(0, 0)}, {(1, 2)})]


def test_naacl_reader(tmp_path: Path):
    text = "1 1 1 S\n1 2 3 P\n1 0 2 S\n\n3 2 2\n3 1 1 P 0.8\n3 2 1 0.5\n"
    links = read_gold(write(tmp_path / "g.naacl", text), "naacl", [(2, 3), (1, 1), (2, 2)])
    # word 0 is NULL (skipped); no S/P means sure, with or without a confidence
    assert links == [gold({(0, 0)}, {(1, 2)}), gold(), gold({(1, 1), (1, 0)}, {(0, 0)})]


@pytest.mark.parametrize(
    ("fmt", "text", "one_indexed", "message"),
    [
        ("pharaoh", "0-0 1x1\n0-0\n", False, "g:1: malformed link '1x1'"),
        ("pharaoh", "0-0\n0-5\n", False, "g:2: link '0-5' is out of range: sentence pair 2 has 2 source"),
        ("pharaoh", "0-1\n1-1\n", True, "g:1: link '0-1' is out of range"),
        ("pharaoh", "0-0\n", False, "g has 1 lines but there are 2 sentence pairs"),
        ("naacl", "1 1\n", False, "g:1: malformed link '1 1'"),
        ("naacl", "1 1 1 S\n1 1 1 X\n", False, "g:2: malformed link '1 1 1 X'"),
        ("naacl", "1 1 1 P 0.5 7\n", False, "g:1: malformed link"),
        ("naacl", "1 1 \u00b2\n", False, "g:1: malformed link"),
        ("naacl", "9 1 1\n", False, "g:1: sentence 9 is out of range: there are 2 sentence pairs"),
        ("naacl", "2 3 1 S\n", False, "g:1: link '2 3 1' is out of range"),
    ],
)
def test_gold_errors_name_file_and_line(tmp_path: Path, fmt: str, text: str, one_indexed: bool, message: str):
    path = write(tmp_path / "g", text)
    with pytest.raises(UserError) as error:
        read_gold(path, fmt, [(2, 2), (2, 2)], one_indexed)
    assert message in str(error.value).replace(str(tmp_path) + "/", "")


def test_load_corpus_needs_line_aligned_files(tmp_path: Path):
    src, gold_file = write(tmp_path / "s", "a b\nc\n"), write(tmp_path / "g", "0-0\n0-0\n")
    corpus = load_corpus(src, write(tmp_path / "r", "x\ny z\n"), gold_file)
    assert corpus.src_words == [["a", "b"], ["c"]] and corpus.tgt_words == [["x"], ["y", "z"]]
    with pytest.raises(UserError, match="s has 2 lines but .*r1 has 1: they must be line-aligned"):
        load_corpus(src, write(tmp_path / "r1", "x\n"), gold_file)


# ----------------------------------------------------------------------------------------------------------
# pieces -> words -> links


def test_merge_matrix_sums_or_averages_a_words_pieces():
    expected = np.array([[1, 1, 0], [0, 0, 1], [0, 0, 0]], dtype=float)  # the third word has no piece
    assert np.array_equal(merge_matrix([2, 1, 0], mean=False), expected)
    assert np.array_equal(merge_matrix([2, 1, 0], mean=True), expected * [[0.5], [1], [1]])


def test_word_attention_by_hand():
    # target pieces t0 | t1 t2 (two words), source pieces s0 s1 | s2 (two words); last row/column: </s>
    weights = np.array(
        [
            [0.1, 0.2, 0.6, 0.1],
            [0.5, 0.3, 0.1, 0.1],
            [0.1, 0.1, 0.7, 0.1],
            [0.0, 0.0, 0.0, 1.0],
        ]
    )
    words = word_attention(weights, src_counts=[2, 1], tgt_counts=[1, 2])
    # source: sum of s0, s1; target: mean of t1, t2
    assert words == pytest.approx(np.array([[0.3, 0.6], [0.5, 0.4]]))
    assert predict_links(words, "argmax") == {(1, 0), (0, 1)}
    assert predict_links(words, "threshold", 0.45) == {(1, 0), (0, 1)}
    assert predict_links(words, "threshold", 0.3) == {(0, 0), (1, 0), (0, 1), (1, 1)}


def test_argmax_skips_target_words_without_weight():
    assert predict_links(np.array([[0.0, 0.0], [0.2, 0.7]]), "argmax") == {(1, 1)}
    assert predict_links(np.zeros((3, 0)), "argmax") == set()  # empty source


def test_diagonal_baseline():
    corpus = AlignmentCorpus([["a"] * 4, ["a"] * 2, []], [["b"] * 2, ["b"] * 4, ["b"]], [gold()] * 3)
    links = diagonal_links(corpus)
    assert links == [{(1, 0), (3, 1)}, {(0, 0), (0, 1), (1, 2), (1, 3)}, set()]


def test_encode_words_matches_whole_line_encoding(tiny_run_dir: Path):
    _, vocab, _ = load_trained(tiny_run_dir)
    sentences = [["the", "naïve", "zebra", "sat"], ["a"], []]
    ids, counts = encode_words(vocab.encode_src, sentences)
    assert ids == vocab.encode_src([" ".join(words) for words in sentences])
    assert counts == [[len(vocab.encode_src([word])[0]) for word in words] for words in sentences]
    assert max(counts[0]) > 1  # "zebra" is not in the tiny vocabulary: several pieces


def test_by_length_uses_the_evaluation_buckets():
    corpus = AlignmentCorpus(
        [["a"], ["a", "b", "c"], ["a", "b", "c"]], [["x"], ["x"], ["x"]], [gold({(0, 0)})] * 3
    )
    overall, by_length = score_links([{(0, 0)}, {(0, 0)}, set()], corpus, [0, 2])
    assert [row["bucket"] for row in by_length] == [b["label"] for b in bucket_labels([0, 2])]
    assert by_length == [
        {"bucket": "0-2", "aer": 0.0, "precision": 1.0, "recall": 1.0, "sentences": 1},
        {"bucket": "2+", "aer": pytest.approx(1 - 2 / 3), "precision": 1.0, "recall": 0.5, "sentences": 2},
    ]
    assert overall["sentences"] == 3 and overall["recall"] == pytest.approx(2 / 3)


def test_section_shape_and_figures():
    corpus = AlignmentCorpus([["a", "b"], ["c"]], [["x", "y"], ["z"]], [gold({(0, 0)}, {(1, 1)}), gold()])
    scores = [np.eye(2), np.ones((1, 1))]
    section = alignment_section(corpus, scores, edges=[0, 2], figures=[1])
    assert set(section) == {"method", "overall", "by_length", "baseline", "figures"}
    assert section["method"] == "argmax"
    assert section["overall"] == {
        "aer": pytest.approx(1 - 3 / 4),
        "precision": 2 / 3,
        "recall": 1.0,
        "sentences": 2,
    }
    assert section["baseline"]["sentences"] == 2
    (figure,) = section["figures"]
    assert figure["title"].startswith("sentence 1:") and figure["svg"].startswith("<svg")
    with pytest.raises(UserError, match="sentence 3 to draw"):
        alignment_section(corpus, scores, figures=[3])
    json.dumps(section)  # JSON-able


# ----------------------------------------------------------------------------------------------------------
# the command


def run_align(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str
) -> tuple[int, str, str]:
    """`seq2seq --quiet align ARGS` in this process: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["seq2seq", "--quiet", "align", *args])
    with pytest.raises(SystemExit) as stop:
        main()
    out, err = capsys.readouterr()
    return stop.value.code, out, err


def test_cli_end_to_end(tiny_run_dir: Path, tmp_path: Path, monkeypatch, capsys):
    sources = ["the cat sat on the mat", "a dog ran", "big red house to the dog ran on a mat"]
    references = ["le chat assis sur le tapis", "un chien couru à la maison", "grand rouge"]
    src, ref = (
        write(tmp_path / "s.en", "\n".join(sources) + "\n"),
        write(tmp_path / "r.fr", "\n".join(references)),
    )
    model, vocab, _ = load_trained(tiny_run_dir)
    corpus = AlignmentCorpus([s.split() for s in sources], [r.split() for r in references], [gold()] * 3)
    # gold = the model's own argmax links, every second one possible: AER 0 whatever the random weights
    links = [sorted(predict_links(m, "argmax")) for m in attention_scores(model, vocab, corpus, "cpu")]
    pharaoh = [" ".join(f"{i + 1}{'-p'[k % 2]}{j + 1}" for k, (i, j) in enumerate(row)) for row in links]
    naacl = [
        f"{n} {i + 1} {j + 1} {'SP'[k % 2]}" for n, row in enumerate(links, 1) for k, (i, j) in enumerate(row)
    ]
    pharaoh_gold = write(tmp_path / "g.pharaoh", "\n".join(pharaoh) + "\n")
    naacl_gold = write(tmp_path / "g.naacl", "\n".join(naacl) + "\n")
    out_json, heatmaps = tmp_path / "align.json", tmp_path / "maps"

    common = ("--model", str(tiny_run_dir), "--src", src, "--ref", ref, "--by-length", "--buckets", "0,5,10")
    code, out, err = run_align(
        monkeypatch, capsys, *common, "--gold", pharaoh_gold, "--one-indexed", "--heatmaps", str(heatmaps),
        "--sentences", "1,3", "--json", str(out_json),
    )  # fmt: skip
    assert code == 0, err
    section = json.loads(out_json.read_text())
    assert section["overall"] == {"aer": 0.0, "precision": 1.0, "recall": 1.0, "sentences": 3}
    assert [row["bucket"] for row in section["by_length"]] == ["0-5", "5-10", "10+"]
    assert [row["sentences"] for row in section["by_length"]] == [1, 1, 1]
    assert 0 < section["baseline"]["aer"] <= 1
    assert [figure["title"] for figure in section["figures"]] == [
        "sentence 1: attention (argmax)",
        "sentence 3: attention (argmax)",
    ]
    assert sorted(p.name for p in heatmaps.iterdir()) == ["000001.svg", "000003.svg"]
    assert (heatmaps / "000003.svg").read_text() == section["figures"][1]["svg"]
    assert out.splitlines()[3].split()[:3] == ["all", "3", "0.0"]  # bucket, sentences, AER %

    code, out, err = run_align(monkeypatch, capsys, *common, "--gold", naacl_gold, "--gold-format", "naacl")
    assert code == 0, err
    assert out.splitlines()[3].split()[:3] == ["all", "3", "0.0"]

    code, _, err = run_align(
        monkeypatch, capsys, *common, "--gold", naacl_gold, "--gold-format", "naacl", "--method", "threshold",
        "--threshold", "1.0", "--json", str(out_json),
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out_json.read_text())["overall"]["precision"] is None  # no attention weight reaches 1

    # without --buckets and --threshold: the run's own eval.buckets and eval.align_threshold
    run = with_eval_section(tiny_run_dir, tmp_path / "configured", buckets=[0, 5], align_threshold=1.0)
    code, _, err = run_align(
        monkeypatch, capsys, "--model", str(run), "--src", src, "--ref", ref, "--by-length",
        "--gold", naacl_gold, "--gold-format", "naacl", "--method", "threshold", "--json", str(out_json),
    )  # fmt: skip
    assert code == 0, err
    section = json.loads(out_json.read_text())
    assert [row["bucket"] for row in section["by_length"]] == ["0-5", "5+"]
    assert section["overall"]["precision"] is None


def test_cli_bad_gold_exits_2_naming_file_and_line(tiny_run_dir: Path, tmp_path: Path, monkeypatch, capsys):
    src, ref = write(tmp_path / "s", "the cat\na dog\n"), write(tmp_path / "r", "le chat\nun chien\n")
    for text, message in (
        ("0-0\n0-1 1_0\n", ":2: malformed link '1_0'"),
        ("0-0\n0-2\n", ":2: link '0-2' is out"),
    ):
        bad = write(tmp_path / "g", text)
        code, _, err = run_align(
            monkeypatch, capsys, "--model", str(tiny_run_dir), "--src", src, "--ref", ref, "--gold", bad
        )
        assert code == 2
        assert err.startswith(f"seq2seq: error: {bad}{message}") and len(err.splitlines()) == 1


def test_cli_refuses_a_model_without_attention(tmp_path: Path, monkeypatch, capsys):
    """An RNNencdec's "attention" is uniform: its argmax picked the source word of most pieces, an AER of
    nothing."""
    config = tiny_config(tmp_path, model={"attention": "none"})
    write_corpus(config.data_dir)
    run = make_run_dir(config)
    src, ref = write(tmp_path / "s", "the cat\n"), write(tmp_path / "r", "le chat\n")
    gold = write(tmp_path / "g", "0-0 1-1\n")
    capsys.readouterr()
    code, _, err = run_align(
        monkeypatch, capsys, "--model", str(run), "--src", src, "--ref", ref, "--gold", gold
    )
    message = f"{run}: an RNNencdec (model.attention none) has no attention to align words with"
    assert code == 2 and err == f"seq2seq: error: {message}\n"
