"""The search's decoder step on padded buffers (decoding/graphs.py, `decode.cuda_graphs`): the padding
changes no translation, the shapes are few, and the setting says where graphs can run. On a CPU the step
runs eagerly on the same buffers a CUDA graph replays from; tests/test_cuda.py replays them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from helpers import SEARCH_FAMILIES as FAMILIES
from helpers import random_model, random_sources

from seq2seq_attn.config import DecodeConfig
from seq2seq_attn.config.schema import GRAPH_AUTO_SENTENCES
from seq2seq_attn.decoding import graphs as graphs_module
from seq2seq_attn.decoding.ensemble import Ensemble
from seq2seq_attn.decoding.graphs import StepGraphs, padded_sentences, uses_step_graphs
from seq2seq_attn.decoding.search import pad_sources, search_with_retries, translate_ids
from seq2seq_attn.decoding.shortlist import Shortlisted
from seq2seq_attn.errors import UserError
from seq2seq_attn.model.states import tensor_fields
from seq2seq_attn.runs.shortlist_table import LexicalTable
from seq2seq_attn.vocab.pieces import PAD_ID

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def family_id(family: dict) -> str:
    return "-".join(str(value) for value in family.values())


def search(model, sources: list[list[int]], cfg: DecodeConfig, graphed: bool, with_attention: bool = False):
    """One batch's n-best lists, its source padded as graphs pad it."""
    src, lengths = pad_sources([sources], CPU, graphed=graphed)
    return search_with_retries(model, src, lengths, cfg, with_attention)


def assert_same_nbest(left, right) -> None:
    for mine, theirs in zip(left, right, strict=True):
        assert [h.tokens for h in mine] == [h.tokens for h in theirs]
        # products over more rows or source columns may round the last float bits differently
        assert [h.score for h in mine] == pytest.approx([h.score for h in theirs], rel=1e-5, abs=1e-6)


def test_sentences_are_padded_to_one_of_four_sizes_per_doubling():
    got = [padded_sentences(n) for n in (1, 2, 3, 5, 8, 9, 70, 80, 129)]
    assert got == [1, 2, 3, 5, 8, 10, 80, 80, 160]


def test_a_graphed_batch_has_its_source_padded_to_a_multiple_of_8():
    sources = [[5] * 3, [6] * 10]  # 4 and 11 pieces with EOS
    src, lengths = pad_sources([sources], CPU, graphed=True)
    assert src.shape == (2, 16) and lengths.tolist() == [4, 11]
    assert (src[:, 11:] == PAD_ID).all() and (src[0, 4:] == PAD_ID).all()
    assert pad_sources([sources], CPU)[0].shape == (2, 11)


@pytest.mark.parametrize("family", FAMILIES, ids=family_id)
def test_the_padded_step_gives_the_translations_of_the_model(family: dict):
    """Every decoder family (a feed state that starts empty, an LSTM cell, RNNencdec, a coverage model's
    state): searching through StepGraphs, whose rows are padded to powers of two as sentences finish,
    gives each sentence the n-best list and attention of the model searched directly."""
    model = random_model(3, **family)
    sources = random_sources(11, seed=4, longest=13)
    cfg = DecodeConfig(beam_size=3, nbest=2, precision="fp32", coverage_penalty=0.2)
    graphs = StepGraphs(model)
    padded = search(graphs, sources, cfg, graphed=True, with_attention=True)
    direct = search(model, sources, cfg, graphed=True, with_attention=True)
    assert_same_nbest(padded, direct)
    for mine, theirs in zip(padded, direct, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            assert a.attention.shape == b.attention.shape
            assert a.attention == pytest.approx(b.attention, abs=1e-5)
    rows = {key[:2] for key in graphs.slots}  # (beam rows, sentences) of the shapes the search used
    assert all(padded_sentences(n) == n and beams == 3 * n for beams, n in rows)
    assert (3 * 12, 12) in rows  # the 11 sentences, padded to 12
    assert len(graphs) == 0  # no graph is captured on a CPU


def test_the_source_padding_of_a_graphed_batch_changes_no_translation():
    model = random_model(4, **FAMILIES[0])
    sources = random_sources(9, seed=6, longest=10)
    cfg = DecodeConfig(beam_size=4, nbest=2, precision="fp32")
    assert_same_nbest(search(model, sources, cfg, graphed=True), search(model, sources, cfg, graphed=False))


def test_a_batch_keeps_its_padded_sentence_count_while_more_than_half_still_search(monkeypatch):
    """As sentences end, the step's sentence count changes only when half of those it holds have ended: a
    batch of 40 meets a handful of shapes, not one per ending sentence."""
    model = random_model(6, **FAMILIES[0])
    graphs, held = StepGraphs(model), []
    real = graphs._sentences

    def spy(sentences: int) -> int:
        held.append((sentences, real(sentences)))
        return held[-1][1]

    monkeypatch.setattr(graphs, "_sentences", spy)
    sources = random_sources(40, seed=8, longest=25)
    search(graphs, sources, DecodeConfig(beam_size=1, precision="fp32"), graphed=True)
    assert all(h // 2 < n <= h for n, h in held)
    assert len({n for n, _ in held}) > 8 >= len({h for _, h in held})  # many counts, few shapes


def test_later_batches_of_a_shape_reuse_its_buffers_and_read_their_own_sentences():
    """One StepGraphs across batches of the same shapes (as in one call to translate_ids): each batch's
    search reads its own encoder output, not the buffers' earlier one."""
    model = random_model(5, **FAMILIES[0])
    cfg = DecodeConfig(beam_size=2, precision="fp32")
    graphs = StepGraphs(model)
    batches = [random_sources(4, seed=seed, longest=6) for seed in (7, 8, 9)]
    for sources in batches:
        sources[0] = sources[0] + [4] * (6 - len(sources[0]))  # every batch 7 wide, padded to 8
        assert_same_nbest(
            search(graphs, sources, cfg, graphed=True), search(model, sources, cfg, graphed=True)
        )
    shapes_after_first = len(graphs.slots)
    assert shapes_after_first <= 2 * 3  # 4, 2 and 1 sentences, each with the feed state empty or not


def test_decode_cuda_graphs_choose_where_graphs_can_run():
    model = random_model(0, **FAMILIES[0])
    cfg, many = DecodeConfig(), GRAPH_AUTO_SENTENCES  # auto
    assert not uses_step_graphs(cfg, model, CPU, many)
    assert uses_step_graphs(cfg, model, CUDA, many)
    assert not uses_step_graphs(cfg, model, CUDA, many - 1)  # too few to pay for the captures
    assert not uses_step_graphs(dataclasses.replace(cfg, cuda_graphs="off"), model, CUDA, many)
    assert not uses_step_graphs(cfg, Ensemble([model, model]), CUDA, many)
    table = LexicalTable(np.full((1, 1), -1), np.arange(4))
    assert not uses_step_graphs(cfg, Shortlisted(model, table), CUDA, many)
    on = dataclasses.replace(cfg, cuda_graphs="on")
    assert uses_step_graphs(on, model, CUDA, 1)
    with pytest.raises(UserError, match="decode.cuda_graphs is 'on' but search runs on the cpu"):
        uses_step_graphs(on, model, CPU, many)
    with pytest.raises(UserError, match="decode.cuda_graphs is 'on' but search runs a Ensemble"):
        uses_step_graphs(on, Ensemble([model, model]), CUDA, many)


@pytest.mark.parametrize("family", FAMILIES, ids=family_id)
def test_a_state_of_another_dtype_gets_its_own_buffers(family: dict, monkeypatch):
    """Under bf16 autocast a decoder's first state can be bf16 and its next ones fp32: each is copied into
    buffers of its own dtype, never rounded into another's (the search without graphs keeps it as is)."""
    copied: list[tuple[torch.dtype, torch.dtype]] = []
    real_copy = graphs_module.copy_rows

    def spy(buffers, values) -> None:
        for name, value in tensor_fields(values).items():
            copied.append((getattr(buffers, name).dtype, value.dtype))
        real_copy(buffers, values)

    monkeypatch.setattr(graphs_module, "copy_rows", spy)
    model = random_model(3, **family)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        search(
            StepGraphs(model), random_sources(6, seed=1, longest=9), DecodeConfig(beam_size=2), graphed=True
        )
    assert copied and all(buffer == value for buffer, value in copied)


def test_translating_on_a_cpu_with_graphs_on_is_a_one_line_error():
    model = random_model(0, **FAMILIES[0])
    with pytest.raises(UserError, match="decode.cuda_graphs is 'on'"):
        translate_ids(model, [[5, 6]], DecodeConfig(cuda_graphs="on"), "cpu")
