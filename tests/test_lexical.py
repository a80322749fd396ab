"""Lexical shortlists: the table learned from attention, a sentence's candidates, coverage, the file."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    SEARCH_VOCAB,
    assert_one_line_error,
    assert_search_is_batch_invariant,
    random_model,
    random_sources,
    run_main,
)

import seq2seq_attn as s2s
from seq2seq_attn.config import DecodeConfig
from seq2seq_attn.decoding.search import translate_ids
from seq2seq_attn.decoding.shortlist import Shortlisted
from seq2seq_attn.decoding.shortlist_learning import build_table, coverage, frequent_pieces, top_candidates
from seq2seq_attn.decoding.translate import Translator
from seq2seq_attn.errors import UserError
from seq2seq_attn.runs.checkpoint import load_checkpoint, save_checkpoint, weights_fingerprint
from seq2seq_attn.runs.run_folder import load_trained, point_best
from seq2seq_attn.runs.shortlist_table import SPECIAL_IDS, LexicalTable, load_table, save_table


def test_top_candidates_keep_each_source_pieces_largest_counts() -> None:
    tgt_size = 10
    counts = {(4, 7): 3.0, (4, 5): 1.0, (4, 6): 2.0, (5, 8): 0.5}  # (source id, target id): count
    keys = np.array([s * tgt_size + t for s, t in counts])
    table = top_candidates(keys, np.array(list(counts.values())), src_size=6, tgt_size=tgt_size, top_k=2)
    assert table.tolist() == [[-1, -1]] * 4 + [[7, 6], [8, -1]]


def test_frequent_pieces_and_a_sentences_candidates() -> None:
    assert frequent_pieces([[5, 6, 6], [7, 6, 5]], vocab_size=9, count=2).tolist() == [6, 5]
    table = LexicalTable(np.array([[-1, -1], [-1, -1], [-1, -1], [-1, -1], [8, -1], [9, 10]]), np.array([6]))
    assert table.sentence_candidates([4, 5]).tolist() == sorted({*SPECIAL_IDS, 6, 8, 9, 10})
    assert table.sentence_candidates([]).tolist() == sorted({*SPECIAL_IDS, 6})  # an empty source
    assert coverage(table, [[4], [5]], [[8, 6, 7], [9]]) == pytest.approx(3 / 4)


def test_a_table_learned_from_a_model_and_its_file(tiny_run_dir: Path, tmp_path: Path) -> None:
    model, vocab, _ = load_trained(tiny_run_dir)
    data = tiny_run_dir.parent / "data"
    src = vocab.encode_src((data / "train.src").read_text().splitlines()[:60], tokenized=True)
    tgt = vocab.encode_tgt((data / "train.tgt").read_text().splitlines()[:60], tokenized=True)
    table = build_table(model, vocab, src, tgt, top_k=3, frequent=5, device="cpu")
    assert table.candidates.shape == (vocab.src_size, 3) and len(table.frequent) == 5
    seen = {i for ids in src for i in ids}
    assert all((table.candidates[i] >= 0).any() for i in seen)  # every source piece of the data has some
    assert ((table.candidates[sorted(set(range(vocab.src_size)) - seen)]) == -1).all()  # the others none
    assert table.candidates.max() < vocab.tgt_size
    assert coverage(table, src, tgt) > coverage(
        LexicalTable(table.candidates[:, :0], table.frequent), src, tgt
    )
    recorded = dataclasses.replace(table, checkpoint="best.pt", weights=weights_fingerprint(model))
    assert save_table(recorded, tmp_path) == tmp_path / "lexical_shortlist.npz"
    loaded = load_table(tmp_path, vocab, tmp_path / "checkpoints" / "best.pt", recorded.weights)
    assert np.array_equal(loaded.candidates, table.candidates) and np.array_equal(
        loaded.frequent, table.frequent
    )
    assert (loaded.checkpoint, loaded.weights) == ("best.pt", weights_fingerprint(model))
    with pytest.raises(UserError, match="no lexical shortlist"):
        load_table(tmp_path / "nowhere", vocab, tmp_path / "nowhere" / "best.pt", recorded.weights)
    with pytest.raises(UserError, match="top_k must be >= 1"):
        build_table(model, vocab, src, tgt, top_k=0, frequent=5, device="cpu")


def test_a_list_of_the_whole_vocabulary_searches_as_the_full_output_layer(tiny_run_dir: Path) -> None:
    model, vocab, config = load_trained(tiny_run_dir)
    everything = LexicalTable(np.full((vocab.src_size, 1), -1), np.arange(vocab.tgt_size))
    cfg = dataclasses.replace(config.decode, beam_size=4, nbest=2, precision="fp32")
    sources = random_sources(8, seed=3, longest=10, vocab=vocab.src_size)
    full = translate_ids(model, sources, cfg, "cpu")
    listed = translate_ids(Shortlisted(model, everything), sources, cfg, "cpu")
    assert [[(h.tokens, h.score) for h in nbest] for nbest in listed] == [
        [(h.tokens, h.score) for h in nbest] for nbest in full
    ]


def test_greedy_keeps_the_full_winner_whenever_it_is_listed(tiny_run_dir: Path) -> None:
    """A list holding every step's full-vocabulary winner gives the same greedy tokens (scores differ:
    each step is normalised over the list)."""
    model, vocab, config = load_trained(tiny_run_dir)
    cfg = dataclasses.replace(config.decode, beam_size=1, nbest=1, precision="fp32")
    sources = random_sources(8, seed=4, longest=10, vocab=vocab.src_size)
    full = translate_ids(model, sources, cfg, "cpu")
    winners = np.unique([token for nbest in full for token in nbest[0].tokens]).astype(np.int32)
    table = LexicalTable(np.full((vocab.src_size, 1), -1), winners)
    listed = translate_ids(Shortlisted(model, table), sources, cfg, "cpu")
    assert [nbest[0].tokens for nbest in listed] == [nbest[0].tokens for nbest in full]
    assert vocab.tgt_size > len(winners) + len(SPECIAL_IDS)  # the list is a real restriction


def test_shortlisted_search_is_batch_invariant_and_uses_only_each_sentences_list() -> None:
    model = random_model()
    candidates = np.random.default_rng(0).integers(4, SEARCH_VOCAB, size=(SEARCH_VOCAB, 2))
    table = LexicalTable(candidates.astype(np.int32), np.array([4], np.int32))
    shortlisted = Shortlisted(model, table)
    assert_search_is_batch_invariant(shortlisted, "cpu")
    sources = random_sources(6, seed=1)
    for src, nbest in zip(
        sources, translate_ids(shortlisted, sources, DecodeConfig(beam_size=3), "cpu"), strict=True
    ):
        allowed = set(table.sentence_candidates(src).tolist())
        assert all(set(h.tokens) <= allowed for h in nbest)


def test_pathological_sources(tiny_run_dir: Path) -> None:
    model, vocab, config = load_trained(tiny_run_dir)
    table = LexicalTable(np.full((vocab.src_size, 2), -1), np.array([], dtype=np.int32))  # specials only
    cfg = dataclasses.replace(config.decode, beam_size=2)
    found = Translator(Shortlisted(model, table), vocab, cfg, "cpu").translate(
        ["", "\u4e00\u4e8c\u4e09", "the cat"]
    )
    assert found[0].texts == []
    assert all(set(h.tokens) <= set(SPECIAL_IDS) for f in found[1:] for h in f.hypotheses)


def test_lexical_shortlist_command_and_translate(tiny_run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    (tmp_path / "data").symlink_to(tiny_run_dir.parent / "data")
    source = tmp_path / "src"
    source.write_text("the cat sat\n\na dog ran to the house\n", encoding="utf-8")
    translate = ["translate", "--model", str(run), "--input", str(source), "--lexical-shortlist"]
    missing = f"{run / 'lexical_shortlist.npz'}: no lexical shortlist"
    assert_one_line_error(run_main(*translate), missing, f"`seq2seq lexical-shortlist {run}`")
    folder = tmp_path / "folder"  # a model folder cannot learn one: its run does, before the export
    assert run_main("export", str(run), "-o", str(folder)).returncode == 0
    without = run_main("translate", "--model", str(folder), "--input", str(source), "--lexical-shortlist")
    assert_one_line_error(without, "a model folder's is learned in its run")
    built = run_main(
        "lexical-shortlist", str(run), "--top-k", "3", "--frequent", "4", "--sentences", "50", text=True
    )
    assert built.returncode == 0, built.stderr
    assert f"{run / 'lexical_shortlist.npz'} from 50 training pairs" in built.stdout
    assert "dev reference pieces covered: " in built.stdout
    result = run_main(*translate, text=True)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3 and result.stdout.splitlines()[1] == ""
    api = s2s.load(run, lexical_shortlist=True)  # the Python API asks for it as a decode key
    assert api.translate(source.read_text().splitlines()) == result.stdout.splitlines()
    # threads search one model at once (a server): a search leaves every module in eval mode
    assert not any(module.training for module in api._translator.model.modules())
    ensemble = [
        "translate",
        "--model",
        str(run),
        "--model",
        str(run),
        "--input",
        str(source),
        "--lexical-shortlist",
    ]
    assert_one_line_error(run_main(*ensemble), "decode.lexical_shortlist: decode one run with it")


def test_a_table_knows_its_checkpoint_and_warns_once_for_other_weights(tiny_run_dir: Path, tmp_path: Path):
    """A table records the weights it was learned from; translating with other weights (the run trained
    on, another checkpoint) warns once per table, and `lexical-shortlist CHECKPOINT` learns that
    checkpoint's own table, which its translations then use without a warning."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    (tmp_path / "data").symlink_to(tiny_run_dir.parent / "data")
    source = tmp_path / "src"
    source.write_text("the cat sat\na dog ran to the house\n", encoding="utf-8")
    learn = ["--top-k", "3", "--frequent", "4", "--sentences", "30"]
    assert run_main("lexical-shortlist", str(run), *learn).returncode == 0
    best = run / "checkpoints" / "best.pt"
    other = run / "checkpoints" / "step-7.pt"  # other weights: best's, changed
    payload = load_checkpoint(best)
    payload["model"] = {
        name: value + 0.01 if value.is_floating_point() else value for name, value in payload["model"].items()
    }
    save_checkpoint(other, payload)

    def translate(model: Path) -> str:
        result = run_main(
            "translate", "--model", str(model), "--input", str(source), "--lexical-shortlist", text=True
        )
        assert result.returncode == 0, result.stderr
        return result.stderr

    assert "learned from" not in translate(run)  # the table's own weights
    warned = translate(other)  # falls back to the run's table, learned from best.pt
    assert f"{run / 'lexical_shortlist.npz'}: learned from best.pt as it was then" in warned
    assert "(step-7.pt)" in warned and f"seq2seq lexical-shortlist {other}" in warned
    averaged = run_main(
        "translate", "--model", str(run), "--average", "2", "--input", str(source), "--lexical-shortlist"
    )  # a table of the mean needs the mean in a file first
    assert averaged.returncode == 0 and b"-o " + bytes(run / "checkpoints" / "average.pt") in averaged.stderr
    assert warned.count("learned from") == 1

    built = run_main("lexical-shortlist", str(other), *learn, text=True)
    assert (
        built.returncode == 0
        and f"{run / 'lexical_shortlist.step-7.npz'} from 30 training pairs" in built.stdout
    )
    assert "learned from" not in translate(other)  # its own table now
    assert "learned from" not in translate(run)  # and the run's is the best checkpoint's still

    save_checkpoint(best, payload)  # the run trains on: best.pt is other weights now
    assert "learned from best.pt as it was then, not from the weights translating now (best.pt)" in translate(
        run
    )
    point_best(best.parent, other)  # best.pt links to step-7.pt now, whose own table is there
    assert "learned from" not in translate(run)
    exported = run_main("export", str(run), "-o", str(tmp_path / "folder"))
    assert exported.returncode == 0 and b"learned from" not in exported.stderr
