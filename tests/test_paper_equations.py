"""The model against the authors' code: GroundHog's RNNsearch and RNNencdec written again in NumPy, one line
per equation, and compared in float64 with the model's search step (`Seq2Seq.step`), its teacher-forced eval
pass and its training pass (where RNNsearch runs the fused Function), at every target position.

The reference is re-derived from GroundHog (github.com/lisa-groundhog/GroundHog at 4d2433b), not from this
project's spec; each function's docstring names the GroundHog file and function it follows:
- experiments/nmt/encdec.py: RNNEncoderDecoder.build (the annotations [forward ; backward], the backward
  encoder reading x reversed through the shared source embedder; RNNencdec's c = the last forward state),
  RecurrentLayerWithSearch.step_fprop and fprop (attention and update in one scan step), Decoder.build_decoder
  in EVALUATION mode (the scan's inputs, the shifted states, the readout, the maxout, the output layer);
- groundhog/layers/rec_layers.py RecurrentLayer.step_fprop (the gated unit); ff_layers.py MultiLayer.fprop
  (x W + b; the bias is added even with learn_bias=False, where it stays at its initial 0) and Shift;
  cost_layers.py SoftmaxLayer.fprop with rank_n_approx; experiments/nmt/state.py prototype_search_state
  (which of these are on: forward + backward annotations, bigram, deep_out, maxout_part 2);
- experiments/nmt/sample.py BeamSearch.search: step k scores the next word from the current states (the
  previous word is 0 at k = 0, masked by check_first_word), then updates them with the chosen word and the
  same context; that is the scan below, one step at a time.

Read there: the decoder's scan consumes the target words unshifted. Its step t takes the context c_t from the
state before the step, h_{t-1}, then h_t = GRU(h_{t-1}, E y_t, c_t). The readout that predicts y_t reads the
states shifted by one (the initial state first, the last one dropped), the unshifted c_t, and through Shift
E y_{t-1}, a zero vector at t = 1. So the state that predicts y_t has read y_{t-1} with the context c_{t-1}
that predicted it: our `update_then_attend`. Our `attend_then_update` (Appendix A.2.2) is the same scan fed
the shifted words E y_{t-1} instead.

Our design against GroundHog's, each difference with its own test below:
(i)   the first word: GroundHog's zero previous-word vector at step 1, ours a learned <bos> embedding (which
      the appendix order also feeds to the state at step 1); E <bos> = 0 is GroundHog's.
(ii)  the output layer: GroundHog's factors through the embedding size (500 -> 620 -> V, linear); ours is one
      matrix. The same functions when the embedding size is at least the maxout size (the paper's case, and
      these tests'); below it, ours holds more.
(iii) the attention energy: GroundHog's v^T tanh(B h + A c_j) has no bias; ours adds a key bias inside the
      tanh; b_a = 0 is GroundHog's.
(iv)  the GRU: GroundHog's (and A.1.1's) candidate tanh(W x + U (r o h)), PyTorch's
      tanh(W x + r o (U h + b_n)). They coincide only when b_n = 0 and U is diagonal; the reference runs
      either form.
Mapped, not tested as differences (`gated_layer`, `groundhog_weights`): GroundHog's update gate weighs the
new state, PyTorch's the old one (the gate's rows change sign); GroundHog's gate biases are frozen at 0 while
ours are learned (they go where GroundHog's MultiLayer adds its frozen bias); its embeddings' bias is 0 here
(ours have none); its attention size is the state size. Its RNNencdec is c = fwd h_T (`last_state`,
unidirectional); c = tanh(V h_T) (Cho et al. 2014, `projected`) and a bidirectional h_T are ours.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from helpers import tiny_model_config

from seq2seq_attn.model import build_model

VOCAB = 17
PAD, BOS = 0, 2
TGT_EMBED = 12  # rank_n_approx: between the maxout (10) and state (24) sizes, as 620 between 500 and 1000
GROUNDHOG, APPENDIX = "update_then_attend", "attend_then_update"  # our names of the two step orders
PATHS = ["search-step", "teacher-forced", "training"]
TOLERANCE = {  # Seq2Seq.step returns fp32 log-probabilities (search scores in fp32)
    "search-step": {"rtol": 0, "atol": 2e-6},
    "teacher-forced": {"rtol": 1e-10, "atol": 1e-12},
    "training": {"rtol": 1e-10, "atol": 1e-12},
}
VARIANTS = [  # (attention, fixed_context, bidirectional)
    ("bahdanau", "projected", True),
    ("none", "projected", True),
    ("none", "last_state", False),  # GroundHog's RNNencdec
    ("none", "last_state", True),
]

Params = dict[str, np.ndarray]
ResetForm = Callable[[np.ndarray, np.ndarray, Params], np.ndarray]


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


# ----------------------------------------------------------------------------------------------------------
# GroundHog's model, in NumPy, on column vectors (GroundHog multiplies row vectors: x W is W^T x here)


def groundhog_reset(r: np.ndarray, h: np.ndarray, layer: Params) -> np.ndarray:
    """rec_layers.RecurrentLayer.step_fprop: TT.dot(reseter * state_before, W_hh), the paper's U (r o h)."""
    return layer["W_hh"] @ (r * h)


def pytorch_reset(r: np.ndarray, h: np.ndarray, layer: Params) -> np.ndarray:
    """Ours by design (iv): PyTorch's (= cuDNN's) r o (U h + b_n)."""
    return r * (layer["W_hh"] @ h + layer["b_n"])


def gated_unit(
    state_below: np.ndarray,
    gater_below: np.ndarray,
    reseter_below: np.ndarray,
    state_before: np.ndarray,
    layer: Params,
    reset: ResetForm,
) -> np.ndarray:
    """rec_layers.RecurrentLayer.step_fprop, also the update in encdec.RecurrentLayerWithSearch.step_fprop."""
    reseter = sigmoid(layer["R_hh"] @ state_before + reseter_below)  # r
    h = np.tanh(reset(reseter, state_before, layer) + state_below)  # h~ = tanh(U (r o h) + W x + b)
    updater = sigmoid(layer["G_hh"] @ state_before + gater_below)  # z
    return updater * h + (1 - updater) * state_before  # z o h~ + (1 - z) o h


def embedder_signals(x: np.ndarray, layer: Params) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The input, update and reset embedders (EncoderDecoderBase._create_embedding_layers; MultiLayer.fprop)
    on the approx embedding x: (input_signals, update_signals, reset_signals), each (dim,)."""
    return (
        layer["W_in"] @ x + layer["b_in"],
        layer["W_upd"] @ x + layer["b_upd"],
        layer["W_rst"] @ x + layer["b_rst"],
    )


def encoder_states(embedded: np.ndarray, layer: Params, reset: ResetForm) -> np.ndarray:
    """Encoder.build_encoder(return_hidden_layers=True): the gated layer's scan from a zero state
    (RecurrentLayer.fprop's init_state). embedded (len, emb) -> states (len, dim)."""
    h, states = np.zeros(layer["W_hh"].shape[0]), []
    for x in embedded:
        h = gated_unit(*embedder_signals(x, layer), h, layer, reset)
        states.append(h)
    return np.stack(states)


def encoder_directions(x: list[int], w: Params, reset: ResetForm) -> tuple[np.ndarray, np.ndarray | None]:
    """RNNEncoderDecoder.build: the forward states and the backward encoder's, which reads x[::-1] through
    the forward encoder's approx_embedder and is reversed back; None with one direction. (len, dim) each."""
    embedded = w["E_x"][x]  # approx_embedder(x): (len, emb)
    forward = encoder_states(embedded, w["enc_fwd"], reset)
    if "enc_bwd" not in w:
        return forward, None
    return forward, encoder_states(embedded[::-1], w["enc_bwd"], reset)[::-1]


def search_context(state_before: np.ndarray, c: np.ndarray, w: Params) -> np.ndarray:
    """RecurrentLayerWithSearch.step_fprop: the context from the state before the step."""
    p_from_h = w["B_hp"] @ state_before  # (att,)
    p_from_c = c @ w["A_cp"].T + w["key_bias"]  # (len, att); GroundHog: A_cp c_j, no bias (iii)
    energy = np.exp(np.tanh(p_from_h + p_from_c) @ w["D_pe"])  # (len,)
    probs = energy / energy.sum()
    return probs @ c  # ctx = sum_j probs_j c_j


def decoder_scan(
    fed: np.ndarray, h0: np.ndarray, c: np.ndarray, fixed_c: np.ndarray | None, w: Params, reset: ResetForm
) -> tuple[np.ndarray, np.ndarray]:
    """RecurrentLayerWithSearch.fprop / step_fprop over the fed embeddings (steps, emb); with a fixed
    context (RNNencdec) GroundHog's RecurrentLayer, whose inputs Decoder.build_decoder adds
    decode_inputers(c) to: the same step. Returns the states before each step, which is build_decoder's
    hidden_layers (the initial state prepended, the last state dropped), and the contexts: (steps, dim),
    (steps, c_dim)."""
    dec, h, before, contexts = w["dec"], h0, [], []
    for x in fed:
        ctx = search_context(h, c, w) if fixed_c is None else fixed_c  # from state_before
        state_below, gater_below, reseter_below = embedder_signals(x, dec)
        state_below = state_below + dec["C_in"] @ ctx  # c_inputer (decode_inputers, no bias)
        gater_below = gater_below + dec["C_upd"] @ ctx  # c_updater
        reseter_below = reseter_below + dec["C_rst"] @ ctx  # c_reseter
        before.append(h)
        contexts.append(ctx)
        h = gated_unit(state_below, gater_below, reseter_below, h, dec, reset)
    return np.stack(before), np.stack(contexts)


def shift(rows: np.ndarray, first: np.ndarray) -> np.ndarray:
    """ff_layers.Shift (n = 1) on (steps, ...): row t holds row t-1; row 0 holds `first`, zeros in GroundHog
    (i). GroundHog shifts prev_word_readout(E y); shifting E y first is the same, that layer being linear
    (its bias stays 0)."""
    return np.concatenate([first[None], rows[:-1]])


def deep_softmax_logits(t: np.ndarray, w: Params) -> np.ndarray:
    """cost_layers.SoftmaxLayer.fprop with rank_n_approx (the `deep_softmax` of
    Decoder._create_readout_layers): t W1 W2 + b, rank_n_activ the identity. (steps, m) -> (steps, V)."""
    return (t @ w["W1"].T) @ w["W2"].T + w["b_out"]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    top = logits.max(axis=-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))


def readout_log_probs(
    before: np.ndarray, contexts: np.ndarray, previous: np.ndarray, w: Params
) -> np.ndarray:
    """Decoder.build_decoder after the scan: repr_readout(ctx) + hid_readout(h) (the one learned readout
    bias) + the bigram term prev_word_readout(approx embedding of the previous word), then Maxout(2) over
    consecutive units, the deep_softmax, and the log. (steps, ...) -> (steps, V)."""
    t_tilde = contexts @ w["C_o"].T + before @ w["U_o"].T + w["b_o"] + previous @ w["V_o"].T  # (steps, 2m)
    t = t_tilde.reshape(len(t_tilde), -1, 2).max(axis=2)  # Maxout(2): (steps, m)
    return log_softmax(deep_softmax_logits(t, w))


def groundhog_log_probs(
    x: list[int], y: list[int], w: Params, order: str, fixed: str | None, reset: ResetForm = pytorch_reset
) -> np.ndarray:
    """log p(y_t | y_<t, x) for t = 1..T (rows), one sentence, target y = y_1..y_T: RNNEncoderDecoder.build
    and Decoder.build_decoder (EVALUATION), with our by-design parts of `w` and `reset`. `order` GROUNDHOG
    feeds the scan E y_t, as GroundHog does; APPENDIX feeds it E y_{t-1} (Appendix A.2.2). `fixed` (None
    with attention) is the RNNencdec's context: `last_state` c = h_T (GroundHog's, with one direction) or
    ours, `projected` c = tanh(V h_T)."""
    forward, backward = encoder_directions(x, w, reset)
    c = forward if backward is None else np.concatenate([forward, backward], axis=1)  # c_j: (len, c_dim)
    if fixed is None:
        fixed_c, source = None, backward[0]  # init_c = c[0, -dim:], the backward h_1
    else:
        last = forward[-1] if backward is None else np.concatenate([forward[-1], backward[0]])  # h_T
        fixed_c = np.tanh(w["V"] @ last + w["b_V"]) if fixed == "projected" else last
        source = fixed_c  # GroundHog's c[0, -dim:] is all of c = fwd h_T; ours reads all of c too
    h0 = np.tanh(w["W_init"] @ source + w["b_init"])  # the initializer MultiLayer (bias_code)
    embedded = w["E_y"][y]  # approx_embedder(y): (T, emb)
    previous = shift(embedded, w["first_word"])  # E y_{t-1}: (T, emb)
    fed = embedded if order == GROUNDHOG else previous
    before, contexts = decoder_scan(fed, h0, c, fixed_c, w, reset)
    return readout_log_probs(before, contexts, previous, w)


# ----------------------------------------------------------------------------------------------------------
# our model's weights under GroundHog's names


def array(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().copy()


def gated_layer(gru: torch.nn.GRU, inputs: int | None = None) -> Params:
    """One nn.GRU as GroundHog's gated layer: RecurrentLayer's W_hh, G_hh, R_hh and the input, update and
    reset embedders' W_*, b_* (the first `inputs` input columns; the decoder's decode_* layers, C_*, take
    the others). GroundHog's update gate weighs the new state and PyTorch's the old one, so its rows change
    sign (sigmoid(-a) = 1 - sigmoid(a)). The gate biases (PyTorch's two per gate) go to the update and reset
    embedders' biases, which GroundHog adds but keeps at 0. b_n is ours (iv)."""
    wi_r, wi_z, wi_n = np.split(array(gru.weight_ih_l0), 3)  # PyTorch's rows: reset, update, new
    wh_r, wh_z, wh_n = np.split(array(gru.weight_hh_l0), 3)
    bi_r, bi_z, bi_n = np.split(array(gru.bias_ih_l0), 3)
    bh_r, bh_z, bh_n = np.split(array(gru.bias_hh_l0), 3)
    inputs = inputs or wi_n.shape[1]
    return {
        "W_in": wi_n[:, :inputs],
        "b_in": bi_n,
        "W_upd": -wi_z[:, :inputs],
        "b_upd": -(bi_z + bh_z),
        "W_rst": wi_r[:, :inputs],
        "b_rst": bi_r + bh_r,
        "C_in": wi_n[:, inputs:],
        "C_upd": -wi_z[:, inputs:],
        "C_rst": wi_r[:, inputs:],
        "W_hh": wh_n,
        "G_hh": -wh_z,
        "R_hh": wh_r,
        "b_n": bh_n,
    }


def groundhog_weights(model) -> Params:
    """Every weight of our RNNsearch / RNNencdec under GroundHog's names, (out, in) for column vectors."""
    enc, dec = model.encoder, model.decoder
    emb, hid = dec.embed.embedding_dim, dec.rnn.rnn.hidden_size
    readout = array(dec.maxout.weight)  # our one matrix over [s ; E y ; c]
    w_out = array(dec.output.weight)  # (V, m)
    w1 = np.random.default_rng(0).standard_normal((emb, w_out.shape[1]))  # any full-rank (r, m), r >= m
    w = {
        "E_x": array(enc.embed.weight),
        "enc_fwd": gated_layer(enc.layers[0][0]),
        "E_y": array(dec.embed.weight),
        "first_word": array(dec.embed.weight[BOS]),  # ours (i); GroundHog: zeros
        "W_init": array(dec.init.proj.weight),
        "b_init": array(dec.init.proj.bias),
        "dec": gated_layer(dec.rnn.rnn, inputs=emb),
        "U_o": readout[:, :hid],  # hid_readout
        "b_o": array(dec.maxout.bias),
        "V_o": readout[:, hid : hid + emb],  # prev_word_readout
        "C_o": readout[:, hid + emb :],  # repr_readout
        "W1": w1,
        "W2": w_out @ np.linalg.pinv(w1),  # W2 W1 = W_o (ii)
        "b_out": array(dec.output.bias),
    }
    if len(enc.layers[0]) == 2:
        w["enc_bwd"] = gated_layer(enc.layers[0][1])
    att = dec.attention
    if att.kind == "bahdanau":
        w |= {
            "B_hp": array(att.query_proj.weight),
            "A_cp": array(att.key_proj.weight),
            "key_bias": array(att.key_proj.bias),  # ours (iii); GroundHog: none
            "D_pe": array(att.v),
        }
    elif att.summary_proj is not None:
        w |= {"V": array(att.summary_proj.weight), "b_V": array(att.summary_proj.bias)}
    return w


# ----------------------------------------------------------------------------------------------------------
# our model: the search step, the teacher-forced eval pass, the training pass


def tiny(
    attention: str = "bahdanau", fixed: str = "projected", bidirectional: bool = True, order: str = GROUNDHOG
) -> torch.nn.Module:
    """A float64 tiny RNNsearch / RNNencdec with the sizes' order of the paper: maxout < embedding < state."""
    encoder = "gru-bi-1" if bidirectional else "gru-uni-1"
    cfg = tiny_model_config(
        encoder, attention, fixed_context=fixed, decoder_step=order, tgt_embed_dim=TGT_EMBED
    )
    torch.manual_seed(0)
    return build_model(cfg, VOCAB, VOCAB).double()


def sentences() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sources (3, 6) of lengths 6, 2, 4 padded with PAD, and targets y (3, 5) (GroundHog's y_1..y_T)."""
    generator = torch.Generator().manual_seed(4)
    lengths = torch.tensor([6, 2, 4])
    src = torch.randint(4, VOCAB, (3, 6), generator=generator)
    src[torch.arange(6) >= lengths.unsqueeze(1)] = PAD
    return src, lengths, torch.randint(4, VOCAB, (3, 5), generator=generator)


def model_log_probs(
    model, src: torch.Tensor, lengths: torch.Tensor, y: torch.Tensor, path: str
) -> np.ndarray:
    """Our log p(y_t | y_<t, x), (batch, T, V), from the inputs <bos> y_1..y_{T-1}: one `Seq2Seq.step` per
    word as search runs it (eval, no grad), or `forward` in eval mode or in training mode (with gradients,
    where RNNsearch runs the fused Function)."""
    tgt_in = torch.cat([torch.full_like(y[:, :1], BOS), y[:, :-1]], dim=1)
    if path == "search-step":
        model.eval()
        with torch.no_grad():
            enc = model.encode(src, lengths)
            state, steps = model.init_state(enc), []
            for y_prev in tgt_in.unbind(1):
                log_probs, state, _ = model.step(enc, state, y_prev)
                steps.append(log_probs)
        return torch.stack(steps, dim=1).double().numpy()
    training = path == "training"
    model.train(training)
    with torch.set_grad_enabled(training):
        return torch.log_softmax(model(src, lengths, tgt_in), dim=-1).detach().numpy()


def reference(
    model, src, lengths, y, fixed: str | None, reset: ResetForm = pytorch_reset, **ours
) -> np.ndarray:
    """`groundhog_log_probs` for every sentence, (batch, T, V), from the model's weights, with `ours`
    replacing by-design weights (e.g. GroundHog's first_word = 0)."""
    with torch.no_grad():
        w = groundhog_weights(model) | ours
    order = GROUNDHOG if model.decoder.update_first else APPENDIX
    return np.stack(
        [
            groundhog_log_probs(src[row, :n].tolist(), y[row].tolist(), w, order, fixed, reset)
            for row, n in enumerate(lengths.tolist())
        ]
    )


# ----------------------------------------------------------------------------------------------------------
# the tests


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("order", [GROUNDHOG, APPENDIX])
@pytest.mark.parametrize(("attention", "fixed", "bidirectional"), VARIANTS)
def test_model_computes_groundhogs_recurrences(attention, fixed, bidirectional, order, path):
    """Both paths give GroundHog's log-probabilities, with our by-design parts, for every sentence and
    position, in both step orders, for RNNsearch and the RNNencdec contexts."""
    model = tiny(attention, fixed, bidirectional, order)
    src, lengths, y = sentences()
    got = model_log_probs(model, src, lengths, y, path)
    want = reference(model, src, lengths, y, fixed if attention == "none" else None)
    np.testing.assert_allclose(got, want, **TOLERANCE[path])


def test_the_two_step_orders_differ():
    """A guard for the test above: GroundHog's order and the appendix's are different models with the same
    weights, equal only at step 1, where GroundHog's scan has not yet fed the state a word."""
    src, lengths, y = sentences()
    groundhog = reference(tiny(order=GROUNDHOG), src, lengths, y, None)
    appendix = reference(tiny(order=APPENDIX), src, lengths, y, None)
    np.testing.assert_allclose(appendix[:, 0], groundhog[:, 0])
    assert np.abs(appendix[:, 1:] - groundhog[:, 1:]).max() > 1e-3


def test_learned_bos_embedding_replaces_groundhogs_zero_first_word():
    """(i) With E <bos> = 0 our model is GroundHog's (the reference with its zero Shift row). A learned
    E <bos> changes only the first position in GroundHog's order, where the state never reads it."""
    model = tiny()
    src, lengths, y = sentences()
    learned = model_log_probs(model, src, lengths, y, "teacher-forced")
    with torch.no_grad():
        model.decoder.embed.weight[BOS] = 0
    zeroed = model_log_probs(model, src, lengths, y, "teacher-forced")
    groundhog = reference(model, src, lengths, y, None, first_word=np.zeros(TGT_EMBED))
    np.testing.assert_allclose(zeroed, groundhog, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(learned[:, 1:], zeroed[:, 1:], rtol=1e-10, atol=1e-12)
    assert np.abs(learned[:, 0] - zeroed[:, 0]).max() > 1e-3


def test_one_output_matrix_against_groundhogs_factored_softmax():
    """(ii) GroundHog's output layer is W2 W1 t + b through the embedding size r; ours W_o t + b. Any
    GroundHog factoring is one of our matrices: with W_o = W2 W1 (a random GroundHog layer) the logits
    agree. The converse needs r at least the maxout size m (the paper's 620 >= 500, and TGT_EMBED here);
    with r < m (the default tiny sizes) ours has rank m and has no GroundHog factoring."""
    model = tiny()
    generator = np.random.default_rng(5)
    m, vocab = model.decoder.output.in_features, model.decoder.output.out_features
    w = {"W1": generator.standard_normal((TGT_EMBED, m)), "W2": generator.standard_normal((vocab, TGT_EMBED))}
    w["b_out"] = generator.standard_normal(vocab)
    with torch.no_grad():
        model.decoder.output.weight.copy_(torch.from_numpy(w["W2"] @ w["W1"]))
        model.decoder.output.bias.copy_(torch.from_numpy(w["b_out"]))
    t = generator.standard_normal((4, m))
    with torch.no_grad():
        ours = model.logits(torch.from_numpy(t)).numpy()
    np.testing.assert_allclose(ours, deep_softmax_logits(t, w), rtol=1e-10, atol=1e-10)
    small = build_model(tiny_model_config(), VOCAB, VOCAB)  # tgt_embed_dim 8 < maxout_dim 10
    rank = np.linalg.matrix_rank(array(small.decoder.output.weight))
    assert rank == small.decoder.output.in_features > small.decoder.embed.embedding_dim


def test_attention_key_bias_is_ours_groundhog_has_none():
    """(iii) Our energy v^T tanh(W_a s + U_a h_j + b_a) is the reference's with the key bias inside the
    tanh; with b_a = 0 it is GroundHog's energy exactly. A bias of order 1 (the untrained one is small)
    shows it is a parameter GroundHog lacks: inside the tanh it changes the weights, not their offset."""
    model = tiny()
    src, lengths, y = sentences()
    key_bias = model.decoder.attention.key_proj.bias
    with torch.no_grad():
        key_bias.normal_(generator=torch.Generator().manual_seed(3))
    with_bias = model_log_probs(model, src, lengths, y, "teacher-forced")
    np.testing.assert_allclose(with_bias, reference(model, src, lengths, y, None), rtol=1e-10, atol=1e-12)
    with torch.no_grad():
        key_bias.zero_()
    without = model_log_probs(model, src, lengths, y, "teacher-forced")
    groundhog = reference(model, src, lengths, y, None, key_bias=np.zeros(len(key_bias)))
    np.testing.assert_allclose(without, groundhog, rtol=1e-10, atol=1e-12)
    assert np.abs(with_bias - without).max() > 1e-3


def test_gru_reset_gate_pytorch_form_equals_groundhogs_only_with_diagonal_u_and_no_b_n():
    """(iv) One nn.GRU step is the reference's PyTorch form; GroundHog's U (r o h) differs from it even with
    b_n = 0 (r o (U h) is not U (r o h)), and equals it when moreover U is diagonal."""
    gru = tiny().encoder.layers[0][0]
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(gru.input_size, generator=generator).double()
    h = torch.randn(gru.hidden_size, generator=generator).double()

    def step(reset: ResetForm) -> tuple[np.ndarray, np.ndarray]:  # (ours, GroundHog's gated_unit)
        with torch.no_grad():
            ours = gru(x[None, None], h[None, None])[1].reshape(-1).numpy()
            layer = gated_layer(gru)
        return ours, gated_unit(*embedder_signals(x.numpy(), layer), h.numpy(), layer, reset)

    np.testing.assert_allclose(*step(pytorch_reset), rtol=1e-12, atol=1e-14)
    with torch.no_grad():
        gru.bias_hh_l0[2 * gru.hidden_size :] = 0  # b_n = 0
    assert np.abs(np.subtract(*step(groundhog_reset))).max() > 1e-3
    with torch.no_grad():
        u_n = gru.weight_hh_l0[2 * gru.hidden_size :]
        u_n.copy_(torch.diag(torch.diagonal(u_n)))
    np.testing.assert_allclose(*step(groundhog_reset), rtol=1e-12, atol=1e-14)


def test_model_with_diagonal_u_and_no_b_n_runs_groundhogs_gru():
    """(iv) With every GRU's b_n = 0 and U diagonal, both orders of our model give the reference with
    GroundHog's own reset form: nothing else in the GRUs differs."""
    src, lengths, y = sentences()
    for order in (GROUNDHOG, APPENDIX):
        model = tiny(order=order)
        with torch.no_grad():
            for gru in (*model.encoder.layers[0], model.decoder.rnn.rnn):
                gru.bias_hh_l0[2 * gru.hidden_size :] = 0
                u_n = gru.weight_hh_l0[2 * gru.hidden_size :]
                u_n.copy_(torch.diag(torch.diagonal(u_n)))
        got = model_log_probs(model, src, lengths, y, "teacher-forced")
        want = reference(model, src, lengths, y, None, reset=groundhog_reset)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
