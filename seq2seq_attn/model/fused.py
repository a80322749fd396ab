"""RNNsearch's training recurrence (one-layer GRU, additive attention) as one autograd Function.

Why: teacher-forced training runs the time loop of `RNNSearchDecoder._recur` under autograd, which records
some 25 small operators per step and, in backward, multiplies every weight's gradient step by step
(dW_hh += dg_i^T s_{i-1}, a (3 hidden x batch) @ (batch x hidden) product per step) and adds each step's
full-size gradient of the annotations and keys. This Function runs the same equations with a hand-written
backward, as cuDNN does for its own RNNs: the loop only carries what is recurrent (ds_{i-1}), and the weight
and annotation gradients are one large product each after the loop, over all steps at once.

Used by the decoder when gradients are needed and the configuration is this one (`applies`); search and
every other configuration run the step-by-step code. With `train.compile` the attention's share of each
step, forward (`attention.additive_attention`) and backward (`additive_backward`), runs torch.compile'd. tests/test_fused.py checks it against that code,
values and gradients, in float64.

Forward, step i (Bahdanau et al. 2014, eqs. 5-6 and A.1.1, in PyTorch's GRU form, see recurrent.py):
    e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j),  alpha_ij = softmax_j(e_ij),  c_i = sum_j alpha_ij h_j
    [r; z; n] from x_i = (W E y_{i-1} + b) + C c_i and g_i = U s_{i-1} + b_h,  s_i = n + z (s_{i-1} - n)
"""

from __future__ import annotations

import torch
from torch import Tensor

from .attention import ADDITIVE, additive_attention, additive_half, kernel
from .recurrent import gru_gates


def applies(decoder) -> bool:
    """Whether `attentive_gru` computes this RNNsearch decoder's recurrence."""
    rnn = decoder.rnn
    return decoder.attention.kind in ADDITIVE and not rnn.is_lstm and rnn.num_layers == 1


def attentive_gru(
    decoder, keys: Tensor, annotations: Tensor, mask: Tensor, static_gates: Tensor, s0: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The recurrence of `RNNSearchDecoder._recur` for decoders where `applies`.

    keys (batch, src_len, dim) = U_a h_j + b; annotations (batch, src_len, annotation); mask (batch, src_len);
    static_gates (batch, steps, 3 hidden) = W E y_{i-1} + b; s0 (batch, hidden). Returns s_0 .. s_{T-1}
    (batch, steps, hidden), c_i (batch, steps, annotation), alpha_i (batch, steps, src_len) and s_T.
    """
    (layer,) = decoder.rnn.step_weights()  # w_ih: C, the columns that read c_i (the bias is in static_gates)
    attention = decoder.attention
    weights = (attention.query_proj.weight, attention.v, layer.w_ih, layer.w_hh, layer.b_hh)
    return AttentiveGRU.apply(attention.compiled, keys, annotations, mask, static_gates, s0, *weights)


class AttentiveGRU(torch.autograd.Function):
    """Precision: the GRU's matrix products run in the compute dtype (bf16 under autocast); attention runs
    in the dtype of the annotations and keys (`device.attention_dtype`: fp32 on a CPU), as in the step path,
    with its softmax and the softmax's gradient in fp32 at least.

    Memory: backward recomputes sigma_ij = sigmoid(2 (W_a s_{i-1} + U_a h_j)) from the saved W_a s_{i-1}
    rather than keeping it from the forward pass: kept, it would be the largest tensor of an update
    (steps x batch x src_len x dim, 240 MB in fp32 for 64 x 60 x 60).
    """

    @staticmethod
    def forward(ctx, compiled, keys, annotations, mask, static_gates, s0, w_query, v, w_context, w_hh, b_hh):
        device_type = static_gates.device.type
        autocast = torch.is_autocast_enabled(device_type)
        dtype = torch.get_autocast_dtype(device_type) if autocast else static_gates.dtype
        attention = annotations.dtype
        # Autocast would re-cast the weights at every step; cast every operand once, here, instead.
        static_gates, s, w_query, w_context, w_hh, b_hh = (
            x.to(dtype) for x in (static_gates, s0, w_query, w_context, w_hh, b_hh)
        )
        v = v.to(attention)  # (keys come from Seq2Seq.encode in the annotations' dtype)
        batch, steps, hidden = static_gates.size(0), static_gates.size(1), s.size(1)
        previous = static_gates.new_empty(batch, steps, hidden)  # s_{i-1}
        contexts = annotations.new_empty(batch, steps, annotations.size(2))  # c_i
        wide = torch.promote_types(attention, torch.float32)  # the softmax's dtype
        alphas = annotations.new_empty(batch, steps, mask.size(1), dtype=wide)  # alpha_i
        gates = static_gates.new_empty(steps, 4, batch, hidden)  # r, z, n, U_n s_{i-1} + b_hn: for backward
        queries = keys.new_empty(steps, batch, 1, keys.size(2))  # W_a s_{i-1}, for backward
        attend = kernel(additive_attention, compiled)
        with torch.autocast(device_type, enabled=False):
            for i in range(steps):
                previous[:, i] = s
                queries[i] = (s @ w_query.T).unsqueeze(1)
                context, alpha = attend(queries[i], keys, v, mask, annotations)  # (batch, 1, annotation)
                context = context.squeeze(1)
                gates_h = torch.addmm(b_hh, s, w_hh.T)
                r, z, n = gru_gates(torch.addmm(static_gates[:, i], context.to(dtype), w_context.T), gates_h)
                s = n + z * (s - n)
                alphas[:, i] = alpha.squeeze(1)
                contexts[:, i] = context
                torch.stack([r, z, n, gates_h[:, 2 * hidden :]], out=gates[i])
        saved = (keys, queries, annotations, w_query, v, w_context, w_hh, previous, contexts, alphas, gates)
        ctx.save_for_backward(*saved)
        ctx.compiled = compiled
        return previous, contexts, alphas, s

    @staticmethod
    def backward(ctx, *grads):
        with torch.autocast(grads[0].device.type, enabled=False):  # (when backward runs inside autocast)
            return AttentiveGRU._backward(ctx, *grads)

    @staticmethod
    def _backward(ctx, *grads):
        keys, queries, annotations, w_query, v, w_context, w_hh, previous, contexts, alphas, gates = (
            ctx.saved_tensors
        )
        # (the engine casts the gradients returned below to each input's own dtype)
        dtype, attention, wide = previous.dtype, annotations.dtype, alphas.dtype
        d_previous, d_contexts, d_alphas, ds = grads
        d_previous, ds = d_previous.to(dtype), ds.to(dtype)
        steps, batch, hidden = gates.size(0), gates.size(2), gates.size(3)
        d_static = previous.new_empty(batch, steps, 3 * hidden)  # d x_i (x_i = W E y_{i-1} + b + C c_i)
        d_gates_h = previous.new_empty(steps, batch, 3 * hidden)  # d g_i
        d_queries = previous.new_empty(steps, batch, w_query.size(0))  # d (W_a s_{i-1})
        d_context = annotations.new_empty(batch, steps, annotations.size(2))  # d c_i, all paths
        d_keys = torch.zeros_like(keys)
        d_v = torch.zeros_like(v, dtype=wide)
        attention_backward = kernel(additive_backward, ctx.compiled)
        for i in reversed(range(steps)):
            r, z, n, h_n = gates[i]
            s_prev = previous[:, i]
            # s_i = n + z (s_{i-1} - n); n = tanh(x_n + r h_n); r, z = sigmoid(.)
            d_n = ds * (1 - z) * (1 - n * n)
            d_z = ds * (s_prev - n) * z * (1 - z)
            d_r = d_n * h_n * r * (1 - r)
            d_x = torch.cat([d_r, d_z, d_n], dim=1)
            d_static[:, i] = d_x
            d_gates_h[i] = torch.cat([d_r, d_z, d_n * r], dim=1)
            d_c = (d_x @ w_context).to(attention) + d_contexts[:, i]  # (batch, annotation)
            d_context[:, i] = d_c
            args = (queries[i], keys, v, annotations, alphas[:, i], d_c, d_alphas[:, i], d_keys)
            d_v_i, d_queries[i] = attention_backward(*args)  # (d_queries: cast to the compute dtype)
            d_v += d_v_i
            ds = ds * z + d_gates_h[i] @ w_hh + d_queries[i] @ w_query + d_previous[:, i]
        # The weight and annotation gradients: one product each over all steps.
        flat_previous = previous.transpose(0, 1).reshape(steps * batch, hidden)  # step-major, like d_gates_h
        d_gates_h = d_gates_h.view(steps * batch, -1)
        d_w_hh = d_gates_h.T @ flat_previous
        d_w_query = d_queries.view(steps * batch, -1).T @ flat_previous
        d_w_context = d_static.flatten(0, 1).T @ contexts.flatten(0, 1).to(dtype)
        # (batch, src_len, steps) @ (batch, steps, annotation): sum_i alpha_ij d c_i
        d_annotations = torch.bmm(alphas.transpose(1, 2).to(attention), d_context)
        weights = (d_w_query, d_v, d_w_context, d_w_hh, d_gates_h.sum(0))
        return None, d_keys, d_annotations, None, d_static, ds, *weights


def additive_backward(
    query: Tensor,
    keys: Tensor,
    v: Tensor,
    annotations: Tensor,
    alpha: Tensor,
    d_c: Tensor,
    d_alpha: Tensor,
    d_keys: Tensor,
) -> tuple[Tensor, Tensor]:
    """The attention's part of step i's backward, from d c_i (batch, annotation) and any direct
    d alpha_i (batch, src_len): returns d v_a (dim,) and d (W_a s_{i-1}) (batch, dim), and adds d keys into
    `d_keys` (batch, src_len, dim). One function so that `kernel` can compile it as a whole.
    """
    # c_i = sum_j alpha_ij h_j; alpha_i = softmax(e_i) (padding has alpha = 0, so it gets d e = 0)
    d_alpha = torch.bmm(d_c.unsqueeze(1), annotations.transpose(1, 2)).squeeze(1).to(alpha.dtype) + d_alpha
    d_e = (alpha * (d_alpha - (alpha * d_alpha).sum(1, keepdim=True))).to(keys.dtype)  # (batch, src_len)
    # e_ij = 2 v.sigma_ij - sum v with sigma_ij = sigmoid(2 (q_i + k_j)). d v keeps the - sum_j d_e_ij
    # term although it is 0 in exact arithmetic: it cancels most of the rounding error of d_e.
    half = additive_half(query, keys).squeeze(1)  # (batch, src_len, dim), recomputed
    d_v = 2 * (d_e.view(1, -1) @ half.view(-1, half.size(-1))).squeeze(0) - d_e.sum()
    d_pre = torch.ops.aten.sigmoid_backward((4 * d_e).unsqueeze(2) * v, half)  # d (q_i + k_j)
    d_keys.add_(d_pre)
    return d_v, d_pre.sum(1)
