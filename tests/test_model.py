"""The model zoo on tiny sizes: every encoder x attention x decoder variant has the right shapes, attention
that ignores padding, a step path equal to the teacher-forced path, gradients everywhere, and can learn."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import (
    ATTENTIONS,
    BOS,
    DECODERS,
    ENCODERS,
    PAD,
    VOCAB,
    batch,
    tiny_model,
    tiny_model_config,
    variants,
)
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seq2seq_attn.errors import UserError
from seq2seq_attn.model import build_model, recurrent
from seq2seq_attn.model.recurrent import RNN_CLASSES, RecurrentStack

torch.set_num_threads(1)

ALL = variants(ENCODERS, ATTENTIONS, DECODERS)


def run_steps(model, src, lengths, tgt_in) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities and attention weights of the step-by-step (search) path, stacked over time."""
    enc = model.encode(src, lengths)
    state = model.init_state(enc)
    log_probs, weights = [], []
    for y_prev in tgt_in.unbind(1):
        lp, state, alpha = model.step(enc, state, y_prev)
        log_probs.append(lp)
        weights.append(alpha)
    return torch.stack(log_probs, 1), torch.stack(weights, 1)


@pytest.mark.parametrize(("encoder", "attention", "decoder"), ALL)
def test_shapes_and_attention_rows(encoder, attention, decoder):
    model = tiny_model(encoder, attention, decoder)
    src, lengths, tgt_in = batch()
    logits, weights = model(src, lengths, tgt_in, return_attention=True)
    assert logits.shape == (3, 6, VOCAB)
    assert weights.shape == (3, 6, 7)
    real = (torch.arange(7) < lengths.unsqueeze(1)).unsqueeze(1).expand_as(weights)
    assert torch.all(weights[~real] == 0)  # exactly zero on padding
    assert torch.all(weights >= 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 6))
    if attention == "none":  # documented: uniform over the real positions
        torch.testing.assert_close(weights[real], (1 / lengths.float()).repeat_interleave(6 * lengths))

    enc = model.encode(src, lengths)
    annotation = 16 * (2 if ENCODERS[encoder][1] else 1)
    assert enc.annotations.shape == (3, 7, annotation)
    assert enc.mask.tolist() == real[:, 0].tolist()
    assert (enc.keys is None) == (attention == "none")
    assert (enc.context is None) == (attention != "none")
    log_probs, state, alpha = model.step(enc, model.init_state(enc), tgt_in[:, 0])
    assert log_probs.shape == (3, VOCAB) and alpha.shape == (3, 7)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(3))
    assert state.hidden.shape == (3, ENCODERS[encoder][2], model.decoder.init.hidden_size)


@pytest.mark.parametrize(("encoder", "attention", "decoder"), ALL)
def test_step_path_equals_teacher_forced_path(encoder, attention, decoder):
    model = tiny_model(encoder, attention, decoder)
    src, lengths, tgt_in = batch()
    logits, weights = model(src, lengths, tgt_in, return_attention=True)
    step_log_probs, step_weights = run_steps(model, src, lengths, tgt_in)
    torch.testing.assert_close(step_log_probs, logits.log_softmax(-1), atol=1e-5, rtol=0)
    torch.testing.assert_close(step_weights, weights, atol=1e-6, rtol=0)


@pytest.mark.parametrize(("encoder", "attention", "decoder"), ALL)
def test_padding_content_and_amount_never_change_outputs(encoder, attention, decoder):
    model = tiny_model(encoder, attention, decoder)
    src, lengths, tgt_in = batch()
    # Pad to length 11 with random non-pad ids in every padding position.
    noisy = torch.randint(4, VOCAB, (3, 11), generator=torch.Generator().manual_seed(9))
    noisy[:, :7] = torch.where(src == PAD, noisy[:, :7], src)
    logits, weights = model(noisy, lengths, tgt_in, return_attention=True)
    for i, n in enumerate(lengths.tolist()):  # each sentence alone, no padding at all
        one = slice(i, i + 1)
        alone, alone_weights = model(src[one, :n], lengths[one], tgt_in[one], return_attention=True)
        torch.testing.assert_close(logits[one], alone, atol=1e-6, rtol=0)
        torch.testing.assert_close(weights[one, :, :n], alone_weights, atol=1e-7, rtol=0)
        assert torch.all(weights[i, :, n:] == 0)


@pytest.mark.parametrize(("encoder", "attention", "decoder"), ALL)
def test_gradients_reach_every_parameter(encoder, attention, decoder):
    # PyTorch init: the paper's sets v_a = 0, which gives W_a and U_a exactly zero gradient at the first step.
    model = tiny_model(encoder, attention, decoder).train()
    src, lengths, tgt_in = batch()
    logits = model(src, lengths, tgt_in)
    F.cross_entropy(logits.reshape(-1, VOCAB), tgt_in.roll(-1, 1).reshape(-1)).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert param.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    ("encoder", "attention", "decoder"),
    variants(["gru-bi-1", "lstm-uni-2"], ["general", "bahdanau"], DECODERS),
)
def test_index_select_reorders_like_the_batch(encoder, attention, decoder):
    """What beam search does: expand / reorder / drop rows of the encoder output and the state."""
    model = tiny_model(encoder, attention, decoder)
    src, lengths, tgt_in = batch()
    enc = model.encode(src, lengths)
    _, state, _ = model.step(enc, model.init_state(enc), tgt_in[:, 0])
    y = tgt_in[:, 1]
    log_probs, _, weights = model.step(enc, state, y)
    index = torch.tensor([2, 0, 0, 2])
    picked, _, picked_weights = model.step(enc.index_select(index), state.index_select(index), y[index])
    torch.testing.assert_close(picked, log_probs[index])
    torch.testing.assert_close(picked_weights, weights[index])


@pytest.mark.parametrize(("encoder", "attention", "decoder"), variants(["gru-bi-1"], ATTENTIONS, DECODERS))
def test_beams_share_one_encoder_row_per_sentence(encoder, attention, decoder):
    """k state rows per sentence against one encoder row give what k copies of that row give."""
    model = tiny_model(encoder, attention, decoder)
    src, lengths, tgt_in = batch()
    enc = model.encode(src, lengths)
    k = 3
    rows = torch.arange(3).repeat_interleave(k)  # sentence of each state row: 0 0 0 1 1 1 2 2 2
    state = model.init_state(enc).index_select(rows)
    # give the beams of a sentence different histories, so that a mix-up of rows would show
    y = tgt_in[:, 1:4].flatten()  # (9,)
    _, state, _ = model.step(enc.index_select(rows), state, y)
    y_next = tgt_in[:, 2:5].flatten()
    shared_lp, _, shared_w = model.step(enc, state, y_next)
    copied_lp, _, copied_w = model.step(enc.index_select(rows), state, y_next)
    assert shared_lp.shape == (9, VOCAB) and shared_w.shape == (9, 7)
    torch.testing.assert_close(shared_lp, copied_lp)
    torch.testing.assert_close(shared_w, copied_w)


@pytest.mark.parametrize("encoder", ["gru-bi-1", "lstm-bi-2", "gru-uni-2"])
def test_encoder_equals_the_library_packed_rnn(encoder):
    """The per-direction, unpacked encoder computes what one packed multi-layer library RNN with the same
    weights computes (its `{weight,bias}_{ih,hh}_l{k}[_reverse]` are layer k's forward [backward] RNN)."""
    cell, bidirectional, layers = ENCODERS[encoder]
    model = tiny_model(encoder, "bahdanau", "rnnsearch")
    library = RNN_CLASSES[cell](8, 16, num_layers=layers, bidirectional=bidirectional, batch_first=True)
    for key, value in library.state_dict().items():
        name, layer = key.removesuffix("_reverse").rsplit("_l", 1)
        direction = 1 if key.endswith("_reverse") else 0
        model.encoder.layers[int(layer)][direction].get_parameter(f"{name}_l0").data.copy_(value)

    src, lengths, _ = batch()
    annotations, _, final = model.encoder(src, lengths)
    packed = pack_padded_sequence(model.encoder.embed(src), lengths, batch_first=True, enforce_sorted=False)
    outputs, last = library(packed)
    expected, _ = pad_packed_sequence(outputs, batch_first=True, total_length=src.size(1))
    last = last[0] if cell == "lstm" else last  # LSTM: (h, c)
    directions = 2 if bidirectional else 1
    torch.testing.assert_close(annotations, expected)
    torch.testing.assert_close(final, torch.cat(list(last[-directions:]), dim=-1))


def test_autocast_encodes_what_attention_reads_once_in_its_dtype():
    """Under bf16 autocast on a CPU the annotations and keys are fp32 (device.attention_dtype), cast once at
    encoding, so no decoder step casts them again; the GRU's products still run in bf16."""
    model = tiny_model("gru-bi-1", "bahdanau", "rnnsearch")
    src, lengths, tgt_in = batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        enc = model.encode(src, lengths)
        features, state, weights = model.decoder(enc, model.init_state(enc), tgt_in)
    assert enc.annotations.dtype == enc.keys.dtype == torch.float32
    assert (enc.annotations[1, 3:] == 0).all()  # padding stays exactly zero
    assert weights.dtype == torch.float32 and (weights[1, :, 3:] == 0).all()
    assert features.dtype == state.hidden.dtype == torch.bfloat16


def library_rnn_outputs(model, src, lengths, tgt_in, state) -> tuple[torch.Tensor, torch.Tensor]:
    """The annotations, and the outputs of a decoder run over all steps at once from `state`."""
    annotations = model.encode(src, lengths).annotations
    outputs, _, _ = model.decoder.rnn.run(model.decoder.embed(tgt_in), state.hidden, state.cell)
    return annotations, outputs


@pytest.mark.parametrize("onednn_lacks_bf16", [False, True])
def test_an_lstm_runs_under_cpu_autocast_on_every_cpu(onednn_lacks_bf16, monkeypatch):
    """Autocast hands the CPU LSTM's oneDNN kernel bf16, which CPUs without AVX-512 (AMD Zen 3) cannot
    build: there (the True case, as such a CPU answers) the encoder's and a whole-sequence decoder's LSTMs
    run in fp32 and give exactly the fp32 results; elsewhere within bf16's rounding of them."""
    if onednn_lacks_bf16:
        monkeypatch.setattr(recurrent, "onednn_lacks_bf16", lambda: True)
    model = tiny_model("lstm-bi-2", "general", "luong-nofeed")
    src, lengths, tgt_in = batch()
    state = model.init_state(model.encode(src, lengths))  # in fp32
    fp32 = library_rnn_outputs(model, src, lengths, tgt_in, state)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = library_rnn_outputs(model, src, lengths, tgt_in, state)
    for mine, theirs in zip(autocast, fp32, strict=True):
        if onednn_lacks_bf16:
            assert mine.dtype == torch.float32 and torch.equal(mine, theirs)
        else:
            torch.testing.assert_close(mine.float(), theirs, atol=0.05, rtol=0.05)


OVERFIT = variants(["gru-bi-1"], ATTENTIONS, DECODERS) + [
    ("lstm-uni-2", "bahdanau", "rnnsearch"),
    ("lstm-bi-1", "general", "luong-feed"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("encoder", "attention", "decoder"), OVERFIT)
def test_each_variant_overfits_a_tiny_batch(encoder, attention, decoder):
    """Learning to reverse four short sentences: the loss must fall below 0.05 within 500 Adam steps."""
    torch.manual_seed(0)
    model = build_model(tiny_model_config(encoder, attention, decoder, init="paper"), VOCAB, VOCAB).train()
    src = torch.randint(4, VOCAB, (4, 6), generator=torch.Generator().manual_seed(3))
    lengths = torch.tensor([6, 6, 5, 4])
    src[torch.arange(6) >= lengths.unsqueeze(1)] = PAD
    gold = torch.stack(
        [torch.cat([s[:n].flip(0), torch.tensor([3]), s[n:]]) for s, n in zip(src, lengths, strict=True)]
    )
    tgt_in = torch.cat([torch.full((4, 1), BOS), gold[:, :-1]], dim=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(500):
        logits = model(src, lengths, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), gold.reshape(-1), ignore_index=PAD)
        if loss.item() < 0.05:
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_recurrent_step_equals_library_rnn(cell):
    """The hand-written cell arithmetic matches nn.GRU / nn.LSTM on the same weights (2 layers)."""
    torch.manual_seed(0)
    stack = RecurrentStack(cell, static_size=5, dynamic_size=3, hidden_size=7, num_layers=2, dropout=0.0)
    static, dynamic = torch.randn(4, 6, 5), torch.randn(4, 6, 3)
    hidden = torch.randn(4, 2, 7)
    cell0 = torch.randn(4, 2, 7) if cell == "lstm" else None
    outputs, last_hidden, last_cell = stack.run(torch.cat([static, dynamic], -1), hidden, cell0)
    weights = stack.step_weights()
    h, c = list(hidden.unbind(1)), list(cell0.unbind(1)) if cell0 is not None else None
    for t, gates in enumerate(stack.project_static(static).unbind(1)):
        top, h, c = stack.step(weights, gates, dynamic[:, t], h, c)
        torch.testing.assert_close(top, outputs[:, t])
    torch.testing.assert_close(torch.stack(h, 1), last_hidden)
    if cell == "lstm":
        torch.testing.assert_close(torch.stack(c, 1), last_cell)


@pytest.mark.parametrize("decoder", ["rnnsearch", "luong-feed"])
def test_tied_embeddings_share_one_matrix(decoder):
    output_size = {"rnnsearch": "maxout_dim", "luong-feed": "decoder_hidden_size"}[decoder]
    untied = tiny_model("gru-bi-1", "general", decoder, **{output_size: 8})
    tied = tiny_model("gru-bi-1", "general", decoder, tie_embeddings=True, **{output_size: 8})
    assert tied.decoder.output.weight is tied.decoder.embed.weight
    saved = sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters())
    assert saved == VOCAB * 8
    src, lengths, tgt_in = batch()
    assert tied(src, lengths, tgt_in).shape == (3, 6, VOCAB)


@pytest.mark.parametrize("decoder", ["rnnsearch", "luong-feed"])
def test_the_last_state_context_is_the_encoders_last_state_in_every_decoder(decoder):
    """`fixed_context: last_state`: c = h_T itself, no projection V (a decoder ignoring it learned one)."""
    model = tiny_model("gru-bi-1", "none", decoder, fixed_context="last_state")
    assert model.decoder.attention.summary_proj is None
    annotations, final = torch.randn(2, 5, 8), torch.randn(2, 8)
    assert model.decoder.attention.prepare(annotations, final)[1] is final


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"tie_embeddings": True, "maxout_dim": 10}, "model.tie_embeddings"),
        ({"attention": "dot", "decoder_hidden_size": 24}, "model.attention"),
    ],
)
def test_impossible_sizes_are_one_line_user_errors(changes, key):
    cfg = dataclasses.replace(tiny_model_config(), **changes)
    with pytest.raises(UserError, match=key) as info:
        build_model(cfg, VOCAB, VOCAB)
    assert "\n" not in str(info.value)
