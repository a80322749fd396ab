"""The coverage model (Tu et al. 2016) and the conditional GRU (Sennrich et al. 2017): their equations
against a hand computation, gradients in float64, the settings they refuse, the step path a coverage model
trains on instead of the fused Function, and the search carrying their state. The shapes, the step path
against the teacher-forced path, padding and beams are checked for them with every other variant in
test_model.py; the conditional GRU's fused training loop against the step path in test_fused.py."""

from __future__ import annotations

import pytest
import torch
from helpers import (
    DECODERS,
    SEARCH_FAMILIES,
    TINY_MODEL,
    VOCAB,
    batch,
    make_run_dir,
    random_model,
    random_sources,
    run_main,
    tiny_config,
    tiny_model,
    tiny_model_config,
    write_corpus,
)
from torch import nn
from torch.func import functional_call

import seq2seq_attn as s2s
from seq2seq_attn.config import DecodeConfig
from seq2seq_attn.decoding.search import translate_ids
from seq2seq_attn.errors import UserError
from seq2seq_attn.model import build_model, fused

torch.set_num_threads(1)

NEW = [name for name in DECODERS if "coverage" in name or "cgru" in name]
CONDITIONAL_COVERAGE = SEARCH_FAMILIES[3]


def first_step(model: nn.Module, src: torch.Tensor, lengths: torch.Tensor, y0: torch.Tensor):
    """Everything the first decoder step starts from: the encoder output, s_0 and E y_0."""
    enc = model.encode(src, lengths)
    state = model.init_state(enc)
    return enc, state, model.decoder.embed(y0)


def additive_weights(attention: nn.Module, s: torch.Tensor, enc, coverage_term: torch.Tensor | None):
    """alpha_ij = softmax_j(v_a^T tanh(W_a s + U_a h_j [+ V_a C_j])) written out, padding excluded."""
    total = attention.query_proj(s).unsqueeze(1) + enc.keys  # (batch, src_len, dim)
    if coverage_term is not None:
        total = total + coverage_term
    scores = torch.tanh(total) @ attention.v
    return scores.masked_fill(~enc.mask, float("-inf")).softmax(-1)


def test_linguistic_coverage_follows_tu_et_al_equations():
    model = tiny_model("gru-bi-1", "bahdanau", "rnnsearch-coverage-linguistic")
    src, lengths, tgt_in = batch()
    decoder = model.decoder
    with torch.no_grad():
        decoder.attention.coverage_proj.weight.normal_()  # V_a: large enough to move the weights
        enc, state, _ = first_step(model, src, lengths, tgt_in[:, 0])
        _, after_one, w1 = decoder(enc, state, tgt_in[:, :1])
        _, _, w2 = decoder(enc, after_one, tgt_in[:, 1:2])
        phi = decoder.coverage.max_fertility * torch.sigmoid(decoder.coverage.fertility(enc.annotations))
        # C_1 = alpha_1 / Phi (C_0 = 0): attend_then_update queries with s_0 at step 1
        expected_c1 = w1[:, 0].unsqueeze(-1) / phi * enc.mask.unsqueeze(-1)
        torch.testing.assert_close(after_one.coverage, expected_c1)
        # step 2 reads C_1 through V_a, with s_1 as its query
        term = decoder.attention.coverage_proj(after_one.coverage)
        expected_w2 = additive_weights(decoder.attention, after_one.hidden[:, -1], enc, term)
        torch.testing.assert_close(w2[:, 0], expected_w2)


def test_neural_coverage_is_a_gru_over_alpha_the_annotation_and_the_query():
    model = tiny_model("gru-bi-1", "bahdanau", "rnnsearch-coverage-linguistic", coverage="neural")
    coverage = model.decoder.coverage
    src, lengths, tgt_in = batch()
    with torch.no_grad():
        enc, state, _ = first_step(model, src, lengths, tgt_in[:, 0])
        _, after_one, w1 = model.decoder(enc, state, tgt_in[:, :1])
        gru = nn.GRUCell(1 + enc.annotations.size(-1) + state.hidden.size(-1), coverage.size)
        gru.weight_ih.copy_(
            torch.cat(
                [
                    coverage.weight_gates.unsqueeze(1),
                    coverage.source_gates.weight,
                    coverage.query_gates.weight,
                ],
                dim=1,
            )
        )
        gru.bias_ih.copy_(coverage.source_gates.bias)
        gru.weight_hh.copy_(coverage.coverage_gates.weight)
        gru.bias_hh.copy_(coverage.coverage_gates.bias)
        batch_size, src_len = enc.mask.shape
        s0 = state.hidden[:, -1].unsqueeze(1).expand(-1, src_len, -1)  # the query of step 1
        inputs = torch.cat([w1[:, 0].unsqueeze(-1), enc.annotations, s0], dim=-1).flatten(0, 1)
        expected = gru(inputs, torch.zeros(batch_size * src_len, coverage.size)).view(batch_size, src_len, -1)
        expected = expected * enc.mask.unsqueeze(-1)  # padding stays 0
    torch.testing.assert_close(after_one.coverage, expected)


def test_conditional_gru_is_two_transitions_around_attention():
    """s'_1 = GRU_1(s_0, E y_0), c_1 = ATT(h, s'_1), s_1 = GRU_2(s'_1, c_1); the deep output reads s_1."""
    model = tiny_model("gru-bi-1", "bahdanau", "rnnsearch-cgru")
    decoder = model.decoder
    src, lengths, tgt_in = batch()
    with torch.no_grad():
        enc, state, embedded = first_step(model, src, lengths, tgt_in[:, 0])
        t, after_one, w1 = decoder(enc, state, tgt_in[:, :1])
        first, second = nn.GRUCell(8, 24), nn.GRUCell(32, 24)
        for cell, stack in ((first, decoder.rnn), (second, decoder.context_rnn)):
            cell.load_state_dict({name.removesuffix("_l0"): p for name, p in stack.rnn.named_parameters()})
        s_prime = first(embedded, state.hidden[:, 0])
        alpha = additive_weights(decoder.attention, s_prime, enc, None)
        context = torch.bmm(alpha.unsqueeze(1), enc.annotations).squeeze(1)
        s1 = second(context, s_prime)
        t_tilde = decoder.maxout(torch.cat([s1, embedded, context], dim=-1))
    torch.testing.assert_close(w1[:, 0], alpha)
    torch.testing.assert_close(after_one.hidden[:, 0], s1)
    torch.testing.assert_close(t[:, 0], t_tilde.unflatten(-1, (-1, 2)).amax(-1))


@pytest.mark.parametrize("decoder", NEW)
def test_gradients_of_the_new_parameters_are_right_in_float64(decoder):
    """gradcheck of every decoder weight through the whole teacher-forced loss: the coverage carried over
    the steps, both GRUs (fast mode: along random directions, which a wrong gradient misses only by
    chance)."""
    model = tiny_model("gru-bi-1", "bahdanau", decoder).double().train()
    src, lengths, tgt_in = batch()
    params = dict(model.named_parameters())
    names = [name for name in params if name.startswith("decoder.")]

    def loss(*values):
        weights = {**params, **dict(zip(names, values, strict=True))}
        return functional_call(model, weights, (src, lengths, tgt_in)).log_softmax(-1)[..., 4:9].sum()

    inputs = tuple(params[name].detach().clone().requires_grad_() for name in names)
    assert torch.autograd.gradcheck(loss, inputs, eps=1e-6, atol=1e-5, fast_mode=True)


@pytest.mark.parametrize("decoder", [name for name in NEW if "neural" in name])
def test_neural_coverage_trains_on_the_step_path_not_the_fused_function(decoder, monkeypatch):
    model = tiny_model("gru-bi-1", "bahdanau", decoder).train()
    assert not fused.applies(model.decoder)

    def refuse(*args):
        raise AssertionError("AttentiveGRU ran for a decoder it does not compute")

    monkeypatch.setattr(fused.AttentiveGRU, "apply", refuse)
    src, lengths, tgt_in = batch()
    model(src, lengths, tgt_in).sum().backward()


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"coverage": "linguistic", "decoder": "luong-feed"}, "model.coverage"),
        ({"coverage": "neural", "attention": "general"}, "model.coverage"),
        ({"coverage": "linguistic", "attention": "none"}, "model.coverage"),
        ({"decoder_step": "conditional", "cell": "lstm"}, "model.decoder_step"),
        ({"decoder_step": "conditional", "decoder_layers": 2}, "model.decoder_step"),
        ({"decoder_step": "conditional", "attention": "none"}, "model.decoder_step"),
    ],
)
def test_what_does_not_apply_is_a_one_line_error(changes, key):
    config = tiny_model_config(**changes)
    with pytest.raises(UserError, match=key) as info:
        build_model(config, VOCAB, VOCAB)
    assert "\n" not in str(info.value)


def test_search_is_batch_invariant_with_coverage_and_the_conditional_gru():
    model = random_model(3, **CONDITIONAL_COVERAGE)
    sources = random_sources(7, seed=4)
    cfg = DecodeConfig(beam_size=3, nbest=2)
    together = translate_ids(model, sources, cfg, "cpu")
    for ids, hyps in zip(sources, together, strict=True):
        (alone,) = translate_ids(model, [ids], cfg, "cpu")
        assert [h.tokens for h in alone] == [h.tokens for h in hyps]
        assert [h.score for h in alone] == pytest.approx([h.score for h in hyps], abs=1e-5)


def test_the_coverage_of_a_beam_travels_with_its_hypothesis():
    """The state the search carries holds each row's own coverage: reordering rows reorders it."""
    model = tiny_model("gru-bi-1", "bahdanau", "rnnsearch-cgru-coverage-neural")
    src, lengths, tgt_in = batch()
    with torch.no_grad():
        enc = model.encode(src, lengths)
        _, state, _ = model.step(enc, model.init_state(enc), tgt_in[:, 0])
        _, state, _ = model.step(enc, state, tgt_in[:, 1])
    index = torch.tensor([2, 0, 1])
    assert torch.equal(state.index_select(index).coverage, state.coverage[index])
    assert state.coverage.abs().sum() > 0
    assert torch.all(state.coverage[1, 3:] == 0)  # sentence 1 has 3 tokens: its padding has none


@pytest.mark.slow(seconds=6)
def test_a_run_with_both_exports_and_translates_alike_through_the_api(tmp_path):
    """Export, the Python API (which serving loads through) and int8 search carry both: a run and its
    exported folder translate alike, with attention; the int8 copy translates too."""
    model = {"decoder_step": "conditional", "coverage": "neural", "coverage_dim": 4}
    config = tiny_config(tmp_path, model={**TINY_MODEL, **model})
    write_corpus(config.data_dir)
    run = make_run_dir(config)
    folder = tmp_path / "exported"
    result = run_main("export", str(run), "-o", str(folder), text=True)
    assert result.returncode == 0, result.stderr
    lines = ["the cat sat on the mat", "a big red dog"]
    from_run, from_folder = s2s.load(run, beam_size=3), s2s.load(folder, beam_size=3)
    assert from_folder.config.model.coverage == "neural"
    assert from_folder.config.model.decoder_step == "conditional"
    assert from_folder.translate(lines) == from_run.translate(lines)
    attended = [model.attention(lines[0]) for model in (from_run, from_folder)]
    assert attended[0].source == attended[1].source and attended[0].target == attended[1].target
    assert (attended[0].weights == attended[1].weights).all()
    targets = from_run.translate(lines)
    assert from_folder.score(lines, targets) == from_run.score(lines, targets)
    assert len(s2s.load(folder, beam_size=3, precision="int8").translate(lines)) == 2
