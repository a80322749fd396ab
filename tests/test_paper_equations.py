"""Bahdanau et al. 2014, Appendix A, written again in NumPy, one line per equation, from the model's own
weight matrices, and compared with the model's forward pass in float64.

Nothing here calls model code: the reference reads only the weights and runs each sentence on its own,
unbatched and unpadded, so a mistake shared by the training loop, the fused Function and search (which all
reuse the same decoder code) still shows. Both decoder step orders and both RNNencdec contexts are covered.

The GRU is the one the model runs, PyTorch's (= cuDNN's) form: its reset gate multiplies U_n s + b_n
rather than entering as U (r o s) as in A.1.1, and its gate z keeps the old state (the paper's 1 - z).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import tiny_model_config

from seq2seq_attn.model import build_model

VOCAB = 17
PAD, BOS = 0, 2


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def gru(x: np.ndarray, h: np.ndarray, w: dict) -> np.ndarray:
    """One GRU step (A.1.1, in PyTorch's form; see the module docstring)."""
    x_r, x_z, x_n = np.split(w["W"] @ x + w["b_W"], 3)  # W x (+ b) for the reset, update, proposal rows
    h_r, h_z, h_n = np.split(w["U"] @ h + w["b_U"], 3)  # U h (+ b)
    r = sigmoid(x_r + h_r)  # reset gate
    z = sigmoid(x_z + h_z)  # update gate
    proposal = np.tanh(x_n + r * h_n)  # s~
    return z * h + (1 - z) * proposal  # s


def rnn_weights(rnn: torch.nn.GRU) -> dict:
    return {
        "W": rnn.weight_ih_l0.numpy(),
        "U": rnn.weight_hh_l0.numpy(),
        "b_W": rnn.bias_ih_l0.numpy(),
        "b_U": rnn.bias_hh_l0.numpy(),
    }


def weights_of(model) -> dict:
    """Every matrix of the model as NumPy arrays, named as in the paper."""
    enc, dec = model.encoder, model.decoder
    w = {
        "E_x": enc.embed.weight.numpy(),
        "fwd": rnn_weights(enc.layers[0][0]),
        "bwd": rnn_weights(enc.layers[0][1]) if len(enc.layers[0]) == 2 else None,
        "E_y": dec.embed.weight.numpy(),
        "W_s": dec.init.proj.weight.numpy(),
        "b_s": dec.init.proj.bias.numpy(),
        "dec": rnn_weights(dec.rnn.rnn),
        "O": dec.maxout.weight.numpy(),  # [U_o V_o C_o]
        "b_O": dec.maxout.bias.numpy(),
        "W_o": dec.output.weight.numpy(),
        "b_o": dec.output.bias.numpy(),
    }
    att = dec.attention
    if att.kind == "bahdanau":
        w |= {
            "W_a": att.query_proj.weight.numpy(),
            "U_a": att.key_proj.weight.numpy(),
            "b_a": att.key_proj.bias.numpy(),
            "v_a": att.v.numpy(),
        }
    elif att.summary_proj is not None:
        w |= {"V": att.summary_proj.weight.numpy(), "b_V": att.summary_proj.bias.numpy()}
    return w


def encode(x: list[int], w: dict) -> tuple[np.ndarray, np.ndarray]:
    """Annotations h_j = [fwd h_j ; bwd h_j] (Sec. 3.2, A.2.1) and the states the decoder starts from."""
    hidden = w["fwd"]["U"].shape[1]
    fwd, bwd = [np.zeros(hidden)], [np.zeros(hidden)]
    for token in x:
        fwd.append(gru(w["E_x"][token], fwd[-1], w["fwd"]))  # fwd h_j = f(fwd h_{j-1}, E x_j)
    fwd = np.stack(fwd[1:])
    if w["bwd"] is None:
        return fwd, fwd[-1]  # h_T
    for token in reversed(x):
        bwd.append(gru(w["E_x"][token], bwd[-1], w["bwd"]))  # bwd h_j = f(bwd h_{j+1}, E x_j)
    bwd = np.stack(bwd[1:][::-1])
    return np.concatenate([fwd, bwd], axis=1), np.concatenate([fwd[-1], bwd[0]])  # h_j, [fwd h_T ; bwd h_1]


def attend(s: np.ndarray, h: np.ndarray, w: dict) -> np.ndarray:
    """c_i from the state s that queries attention (A.1.2 and eqs. 5-6)."""
    e = np.array([w["v_a"] @ np.tanh(w["W_a"] @ s + w["U_a"] @ h_j + w["b_a"]) for h_j in h])  # e_ij
    alpha = softmax(e)  # alpha_ij
    return alpha @ h  # c_i = sum_j alpha_ij h_j


def reference_log_probs(x: list[int], y_in: list[int], w: dict, update_first: bool, fixed: str) -> np.ndarray:
    """log p(y_i | y_<i, x) for every step (A.2.2), for one sentence."""
    h, last = encode(x, w)
    if fixed == "projected":
        c = np.tanh(w["V"] @ last + w["b_V"])  # RNNencdec, Cho et al.: c = tanh(V h_T)
        s = np.tanh(w["W_s"] @ c + w["b_s"])  # s_0 = tanh(W_s c)
    elif fixed == "last_state":
        c = last  # RNNencdec, Bahdanau et al.: c = h_T
        s = np.tanh(w["W_s"] @ c + w["b_s"])
    else:
        c = None
        s = np.tanh(w["W_s"] @ h[0, h.shape[1] // 2 :] + w["b_s"])  # s_0 = tanh(W_s bwd h_1)
    context = lambda state: c if c is not None else attend(state, h, w)  # noqa: E731
    out, c_prev = [], None
    for i, y_prev in enumerate(y_in):
        Ey = w["E_y"][y_prev]  # E y_{i-1}
        if update_first and i > 0:
            s = gru(np.concatenate([Ey, c_prev]), s, w["dec"])  # s = f(s, y_{i-1}, c_{i-1}): GroundHog
        c_i = context(s)  # c_i from the state before this step's update
        t_tilde = w["O"] @ np.concatenate([s, Ey, c_i]) + w["b_O"]  # t~_i = U_o s + V_o E y_{i-1} + C_o c_i
        t = t_tilde.reshape(-1, 2).max(axis=1)  # t_i,j = max(t~_i,2j-1, t~_i,2j)
        logits = w["W_o"] @ t + w["b_o"]  # W_o t_i
        out.append(logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max())  # log softmax
        if not update_first:
            s = gru(np.concatenate([Ey, c_i]), s, w["dec"])  # s_i = f(s_{i-1}, y_{i-1}, c_i): Appendix A.2.2
        c_prev = c_i
    return np.stack(out)


VARIANTS = [  # (attention, fixed_context, bidirectional)
    ("bahdanau", "projected", True),
    ("none", "projected", True),
    ("none", "last_state", False),
    ("none", "last_state", True),
]


@pytest.mark.parametrize("decoder_step", ["attend_then_update", "update_then_attend"])
@pytest.mark.parametrize(("attention", "fixed_context", "bidirectional"), VARIANTS)
@pytest.mark.parametrize("training", [False, True], ids=["search-path", "training-path"])
def test_model_computes_appendix_a(attention, fixed_context, bidirectional, decoder_step, training):
    """The model's log-probabilities, on the training path (where RNNsearch runs its fused Function) and
    on the step-by-step path, equal the NumPy reference for every sentence and step."""
    encoder = "gru-bi-1" if bidirectional else "gru-uni-1"
    cfg = tiny_model_config(encoder, attention, fixed_context=fixed_context, decoder_step=decoder_step)
    torch.manual_seed(0)
    model = build_model(cfg, VOCAB, VOCAB).double().train(training)
    generator = torch.Generator().manual_seed(4)
    lengths = torch.tensor([6, 2, 4])
    src = torch.randint(4, VOCAB, (3, 6), generator=generator)
    src[torch.arange(6) >= lengths.unsqueeze(1)] = PAD
    tgt_in = torch.randint(4, VOCAB, (3, 5), generator=generator)
    tgt_in[:, 0] = BOS
    with torch.set_grad_enabled(training):
        got = torch.log_softmax(model(src, lengths, tgt_in), dim=-1).detach().numpy()
    with torch.no_grad():
        w = weights_of(model)
    update_first = decoder_step == "update_then_attend"
    fixed = fixed_context if attention == "none" else None
    for row, n in enumerate(lengths.tolist()):
        want = reference_log_probs(src[row, :n].tolist(), tgt_in[row].tolist(), w, update_first, fixed)
        np.testing.assert_allclose(got[row], want, rtol=1e-10, atol=1e-12)


def test_the_two_step_orders_differ():
    """A guard for the test above: the orders are different models with the same weights."""
    x, y = [5, 6, 7, 3], [BOS, 8, 9, 10]
    torch.manual_seed(0)
    model = build_model(tiny_model_config(), VOCAB, VOCAB)
    with torch.no_grad():
        w = weights_of(model.double())
    appendix = reference_log_probs(x, y, w, update_first=False, fixed=None)
    authors = reference_log_probs(x, y, w, update_first=True, fixed=None)
    np.testing.assert_allclose(appendix[:1], authors[:1])  # the first step reads no word in either
    assert np.abs(appendix[1:] - authors[1:]).max() > 1e-4
