"""Ensemble decoding (decoding/ensemble.py): one beam search over the mean of several models'
log-probabilities.

An ensemble of one model, or of a model with itself, is that model (token for token, score for score, in
the library and on the command line); a step is the mean of the models' own steps; architectures and
source vocabularies may differ; target vocabularies may not (a one-line error).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    SEARCH_FAMILIES,
    assert_one_line_error,
    assert_search_is_batch_invariant,
    make_run_dir,
    random_model,
    random_sources,
    run_main,
    tiny_config,
    write_corpus,
)

from seq2seq_attn.config import DecodeConfig
from seq2seq_attn.decoding.ensemble import Ensemble, attending_models, side_fingerprint
from seq2seq_attn.decoding.loader import load_runs, load_translator
from seq2seq_attn.decoding.search import Hypothesis, pad_sources, translate_ids
from seq2seq_attn.errors import UserError
from seq2seq_attn.vocab.pieces import BOS_ID, EOS_ID

DECODE = DecodeConfig(beam_size=3, nbest=3, precision="fp32")
FAMILIES = dict(zip(["rnnsearch", "luong", "rnnencdec", "cgru-coverage"], SEARCH_FAMILIES, strict=True))
LINES = b"the cat sat on the mat\n\na big red dog ran to the house\nna\xc3\xafve cat\n"
LONG_LINE = "the naïve cat sat on the big red mat"


# ----------------------------------------------------------------------------------------------------------
# the search: tiny random models


def assert_same_nbest(got: list[list[Hypothesis]], want: list[list[Hypothesis]]) -> None:
    """The same n-best lists bit for bit: tokens, scores, log-probabilities, attention."""
    for got_hyps, want_hyps in zip(got, want, strict=True):
        assert [(h.tokens, h.score, h.log_prob) for h in got_hyps] == [
            (h.tokens, h.score, h.log_prob) for h in want_hyps
        ]
        for mine, theirs in zip(got_hyps, want_hyps, strict=True):
            np.testing.assert_array_equal(mine.attention, theirs.attention)


@torch.no_grad()
def forced_log_prob(model, src_ids: list[int], tokens: list[int]) -> float:
    """log p(tokens, EOS | source) under one model, fed one token at a time."""
    src, lengths = pad_sources([[src_ids]], "cpu")
    enc = model.encode(src, lengths)
    state, y_prev, total = model.init_state(enc), torch.tensor([BOS_ID]), 0.0
    for token in [*tokens, EOS_ID]:
        log_probs, state, _ = model.step(enc, state, y_prev)
        total += float(log_probs[0, token])
        y_prev = torch.tensor([token])
    return total


@pytest.mark.parametrize("family", FAMILIES)
def test_an_ensemble_of_one_model_or_of_a_model_with_itself_is_that_model(family):
    model = random_model(**FAMILIES[family])
    sources = random_sources(6, seed=2)
    alone = translate_ids(model, sources, DECODE, "cpu", with_attention=True)
    for members in ([model], [model, model]):
        together = translate_ids(Ensemble(members), sources, DECODE, "cpu", with_attention=True)
        assert_same_nbest(together, alone)


def test_ensemble_search_is_batch_invariant():
    models = [random_model(0, **FAMILIES["rnnsearch"]), random_model(1, **FAMILIES["luong"])]
    assert_search_is_batch_invariant(Ensemble(models), "cpu")


@torch.no_grad()
def test_a_step_is_the_mean_of_the_models_own_steps_also_after_reordering_rows():
    models = [random_model(0, **FAMILIES["rnnsearch"]), random_model(1, **FAMILIES["luong"])]
    ensemble = Ensemble(models)
    src, lengths = pad_sources([random_sources(3, seed=4)], "cpu")
    encoded = [model.encode(src, lengths) for model in models]
    states = [model.init_state(enc) for model, enc in zip(models, encoded, strict=True)]
    enc = ensemble.encode(src, lengths)
    state = ensemble.init_state(enc)
    y_prev, reorder = torch.tensor([BOS_ID, BOS_ID, BOS_ID]), torch.tensor([2, 0, 1])
    for _ in range(2):  # a step, then a step of the rows reordered as beam search reorders them
        log_probs, state, attention = ensemble.step(enc, state, y_prev)
        own = [
            model.step(own_enc, own_state, y_prev)
            for model, own_enc, own_state in zip(models, encoded, states, strict=True)
        ]
        torch.testing.assert_close(log_probs, (own[0][0] + own[1][0]) / 2, rtol=0, atol=1e-6)
        torch.testing.assert_close(attention, (own[0][2] + own[1][2]) / 2, rtol=0, atol=1e-6)
        y_prev = log_probs.argmax(dim=1).index_select(0, reorder)
        enc, state = enc.index_select(reorder), state.index_select(reorder)
        encoded = [own_enc.index_select(reorder) for own_enc in encoded]
        states = [new_state.index_select(reorder) for _, new_state, _ in own]


def test_mixed_architectures_score_each_hypothesis_by_the_mean_of_their_log_probabilities():
    models = [random_model(seed, **family) for seed, family in enumerate(SEARCH_FAMILIES)]
    sources = random_sources(4, seed=6)
    for src_ids, nbest in zip(sources, translate_ids(Ensemble(models), sources, DECODE, "cpu"), strict=True):
        assert len(nbest) == DECODE.nbest
        for hyp in nbest:
            mean = sum(forced_log_prob(model, src_ids, hyp.tokens) for model in models) / len(models)
            assert hyp.log_prob == pytest.approx(mean, rel=1e-5, abs=1e-5)


def test_each_model_reads_its_own_source_and_the_first_ones_length_bounds_the_search():
    models = [random_model(0, **FAMILIES["rnnsearch"]), random_model(1, **FAMILIES["rnnencdec"])]
    short, long = random_sources(5, seed=8, longest=4), random_sources(5, seed=9, longest=12)
    long = [ids + [5, 6, 7, 8, 9] for ids in long]  # every sentence several pieces longer
    exact = DecodeConfig(beam_size=3, nbest=3, precision="fp32", min_len_a=1.0, max_len_a=1.0, max_len_b=1)
    for first, second in ((short, long), (long, short)):
        searched = translate_ids(Ensemble(models), first, exact, "cpu", other_src_ids=[second])
        for ids, other_ids, nbest in zip(first, second, searched, strict=True):
            for hyp in nbest:
                assert len(ids) <= len(hyp.tokens) <= len(ids) + 1  # n to n + max_len_b tokens
                own = [
                    forced_log_prob(models[0], ids, hyp.tokens),
                    forced_log_prob(models[1], other_ids, hyp.tokens),
                ]
                assert hyp.log_prob == pytest.approx(sum(own) / 2, rel=1e-5, abs=1e-5)


# ----------------------------------------------------------------------------------------------------------
# trained runs: vocabularies, settings, the command line


def run_beside(tiny_run_dir: Path, root: Path, **sections: object) -> Path:
    """A run of another architecture or settings that shares `tiny_run_dir`'s data and vocabulary."""
    config = tiny_config(root, data={"dir": str(tiny_run_dir.parent / "data")}, **sections)
    return make_run_dir(config, steps=(1, 2, 3))


def spell_words_backwards(corpus: Path) -> None:
    """Rewrite a corpus file with every word spelled backwards ("the cat" -> "eht tac")."""
    lines = corpus.read_text(encoding="utf-8").splitlines()
    corpus.write_text(
        "".join(" ".join(w[::-1] for w in line.split()) + "\n" for line in lines), encoding="utf-8"
    )


@pytest.fixture(scope="module")
def runs(tiny_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Runs to ensemble with `tiny_run_dir` (an RNNsearch): on its vocabulary, a Luong LSTM (three
    checkpoints, decode.beam_size 2) and an RNNencdec; an RNNsearch on its corpus with the source words
    spelled backwards (another source vocabulary, the same target one); one on another corpus (another
    target vocabulary)."""
    made = {"rnnsearch": tiny_run_dir}
    made["luong"] = run_beside(
        tiny_run_dir, tmp_path_factory.mktemp("luong"), model=FAMILIES["luong"], decode={"beam_size": 2}
    )
    made["rnnencdec"] = run_beside(
        tiny_run_dir, tmp_path_factory.mktemp("rnnencdec"), model={"attention": "none"}
    )
    backwards = tiny_config(tmp_path_factory.mktemp("backwards"))
    write_corpus(backwards.data_dir)  # tiny_run_dir's corpus (the same seed)
    spell_words_backwards(backwards.data_dir / "train.src")
    made["backwards"] = make_run_dir(backwards)
    other = tiny_config(tmp_path_factory.mktemp("other"))
    write_corpus(other.data_dir, seed=2)
    made["other"] = make_run_dir(other)
    return made


def translate_cli(*args: str, models: list[Path], stdin: bytes = LINES) -> subprocess.CompletedProcess:
    model_args = [item for model in models for item in ("--model", str(model))]
    return run_main("--quiet", "translate", *model_args, *args, stdin=stdin)


@pytest.mark.parametrize(
    "options",
    [[], ["--scores"], ["--nbest", "3", "--beam", "3"], ["--replace-unk", "--scores", "--beam", "2"]],
)
def test_translate_with_a_run_twice_prints_what_the_run_prints(tiny_run_dir, options):
    alone = translate_cli(*options, models=[tiny_run_dir])
    twice = translate_cli(*options, models=[tiny_run_dir, tiny_run_dir])
    assert alone.returncode == twice.returncode == 0, twice.stderr
    assert twice.stdout == alone.stdout and alone.stdout.count(b"\n") >= LINES.count(b"\n")


def test_a_search_leaves_an_ensembles_models_in_eval_mode(tiny_run_dir):
    """Threads search one loaded ensemble at once (a server): a search must not switch its models' mode
    (dropout, and the gate tables a mode change drops) under the others."""
    translator = load_translator([tiny_run_dir, tiny_run_dir])
    translator.translate(["the cat sat on the mat"])
    assert not any(module.training for module in translator.model.modules())


def test_mixed_architectures_translate_on_the_command_line(runs):
    done = translate_cli("--beam", "2", models=[runs["luong"], runs["rnnsearch"], runs["rnnencdec"]])
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(b"\n") == LINES.count(b"\n")


def test_different_target_vocabularies_are_a_one_line_error(runs):
    done = translate_cli(models=[runs["rnnsearch"], runs["backwards"], runs["other"]])
    assert_one_line_error(done, f"{runs['rnnsearch']} and {runs['other']}", "different target vocabularies")


def test_average_takes_the_last_checkpoints_of_each_run(runs):
    alone = translate_cli("--average", "2", models=[runs["luong"]])
    twice = translate_cli("--average", "2", models=[runs["luong"], runs["luong"]])
    assert alone.returncode == 0, alone.stderr
    assert twice.stdout == alone.stdout
    too_few = translate_cli("--average", "2", models=[runs["luong"], runs["rnnsearch"]])
    assert_one_line_error(too_few, str(runs["rnnsearch"] / "checkpoints"), "the run has 1 step-N.pt")


def test_decode_settings_are_the_first_runs_changed_by_the_callers(runs):
    luong_first = [runs["luong"], runs["rnnsearch"]]
    assert load_translator(luong_first).cfg.beam_size == 2
    assert load_translator(luong_first[::-1]).cfg.beam_size == DecodeConfig().beam_size
    assert load_translator(luong_first, decode={"beam_size": 4, "nbest": None}).cfg.beam_size == 4
    with pytest.raises(UserError, match=r"decode.beam_size"):
        load_translator(luong_first, decode={"beam_size": 0})
    with pytest.raises(UserError, match=r"^decode.beam: no such decode key"):
        load_translator(luong_first, decode={"beam": 4})


def test_attention_is_averaged_over_the_attending_models_that_read_the_first_models_pieces(runs):
    def attending(*names: str) -> list[int]:
        loaded = load_runs([runs[name] for name in names])
        return attending_models(loaded.configs, loaded.vocabs)

    assert attending("rnnsearch", "luong", "rnnencdec") == [0, 1]
    assert attending("rnnencdec", "rnnsearch") == [1]
    assert attending("rnnencdec", "rnnencdec") == [0]  # no attention anywhere: the first model's weights
    assert attending("rnnsearch", "backwards") == [0]
    assert attending("backwards", "rnnsearch", "luong") == [0]
    assert attending("rnnencdec", "backwards") == [0]


def test_runs_with_different_source_vocabularies_each_read_their_own(runs):
    first, backwards = load_runs([runs["rnnsearch"]]), load_runs([runs["backwards"]])
    vocab, backwards_vocab = first.vocabs[0], backwards.vocabs[0]
    assert side_fingerprint(vocab, "tgt") == side_fingerprint(backwards_vocab, "tgt")
    assert side_fingerprint(vocab, "src") != side_fingerprint(backwards_vocab, "src")
    (ids,), (backwards_ids,) = vocab.encode_src([LONG_LINE]), backwards_vocab.encode_src([LONG_LINE])
    assert len(backwards_ids) > len(ids) + 1  # the test can tell whose length bounds the search
    bounds = {"min_len_a": 1.0, "max_len_a": 1.0, "max_len_b": 1, "beam_size": 2, "nbest": 2}
    for order, bounding in (
        ([runs["rnnsearch"], runs["backwards"]], ids),
        ([runs["backwards"], runs["rnnsearch"]], backwards_ids),
    ):
        translator = load_translator(order, decode=bounds)
        assert len(translator.other_src_vocabs) == 1
        translator.with_attention = True
        (translation,) = translator.translate([LONG_LINE])
        for hyp in translation.hypotheses:
            assert len(bounding) <= len(hyp.tokens) <= len(bounding) + 1
            assert hyp.attention.shape == (len(hyp.tokens) + 1, len(bounding) + 1)  # the first model's pieces
            own = [
                forced_log_prob(loaded.model, own_ids, hyp.tokens)
                for loaded, own_ids in ((first, ids), (backwards, backwards_ids))
            ]
            assert hyp.log_prob == pytest.approx(sum(own) / 2, rel=1e-5, abs=1e-5)


def test_eval_scores_an_ensemble_as_one_system(tiny_run_dir, tmp_path):
    data = tiny_run_dir.parent / "data"
    report = tmp_path / "report.json"
    common = ["--src", str(data / "test.src"), "--ref", str(data / "test.tgt"), "--output", str(report)]
    pair = f"{tiny_run_dir},{tiny_run_dir}"
    args = ["--model", str(tiny_run_dir), "--ensemble", pair, "--label", "single", "--label", "X"]
    done = run_main("--quiet", "eval", *args, *common)
    assert done.returncode == 0, done.stderr
    assert [system["label"] for system in json.loads(report.read_text())["systems"]] == ["single", "X"]
    hypotheses = (tmp_path / "test.X.hyp").read_text(encoding="utf-8")
    assert hypotheses == (tmp_path / "test.single.hyp").read_text(encoding="utf-8")
    assert_one_line_error(
        run_main("eval", "--ensemble", str(tiny_run_dir), *common), "--ensemble", "two or more"
    )
