"""The decoders' training recurrences as autograd Functions with hand-written backward passes.

Why: teacher-forced training runs a decoder's time loop under autograd, which records some 25 small
operators per step and, in backward, multiplies every weight's gradient step by step (dW_hh += dg_i^T s_{i-1},
a (3 hidden x batch) @ (batch x hidden) product per step) and adds each step's full-size gradient of the
annotations and keys. These Functions run the same equations with a hand-written backward, as cuDNN does for
its own RNNs: the loop only carries what is recurrent, and the weight, key and annotation gradients are one
large product each after the loop, over all steps at once.

Two recurrences, both with a one-layer GRU (`applies`):
- `attentive_gru`, RNNsearch with additive attention (Bahdanau et al. 2014, eqs. 5-6 and A.1.1), step i:
      e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j),  alpha_ij = softmax_j(e_ij),  c_i = sum_j alpha_ij h_j
      [r; z; n] from x_i = (W E y_{i-1} + b) + C c_i and g_i = U s_{i-1} + b_h,  s_i = n + z (s_{i-1} - n)
  and the conditional GRU (Sennrich et al. 2017), whose step first runs GRU_1 on the word,
  s'_i = GRU_1(s_{i-1}, W_1 E y_{i-1} + b_1), queries attention with s'_i, then updates with GRU_2 as above
  (x_i = b_2 + C_2 c_i, the word being GRU_1's); either with a linguistic coverage (Tu et al. 2016), whose
  C_{i-1,j} enters the score as V_a C_{i-1,j} and grows by alpha_ij / Phi_j after each step.
- `feeding_gru`, Luong's input-feeding decoder with a dot-product score (`general`, `dot`; Luong et al. 2015,
  eqs. 5 and 8, Sec. 3.3), step t:
      x_t = (W E y_{t-1} + b) + C h~_{t-1},  h_t = GRU(h_{t-1}, x_t) as above
      e_tj = h_t . k_j (k_j = W_a h_j, or h_j),  a_t = softmax(e_t),  c_t = sum_j a_tj h_j,
      h~_t = tanh(W_c [c_t ; h_t] + b_c)
(the GRU in PyTorch's form, see recurrent.py). The decoders use them when gradients are needed; search runs
the step-by-step code. With `train.compile` RNNsearch's attention, forward (`attention.additive_attention`)
and backward (`additive_backward`), runs torch.compile'd. tests/test_fused.py checks both Functions against
the step-by-step code, values and gradients, in float64.

Precision, in both: the GRU's and the output layer's matrix products run in the compute dtype (bf16 under
autocast); attention runs in the dtype of the annotations and keys (`device.attention_dtype`: fp32 on a CPU),
as in the step path, with its softmax and the softmax's gradient in fp32 at least. RNNsearch's gradients of
the keys and of v_a, sums over all steps, are accumulated in fp32 at least: where attention runs in bf16 (on a
GPU), a bf16 running sum would lose a bit of precision at every step of a long sentence.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

from .attention import additive_attention, additive_half, dot_attention, kernel
from .recurrent import gru_gates
from .states import DecoderState, EncoderOutput


def applies(decoder) -> bool:
    """Whether this decoder's recurrence has a Function here: a one-layer GRU, a score the decoder's
    Function computes (`FUSED_SCORES`, a class attribute of each decoder) and nothing the Functions leave
    out (`fusable`: RNNsearch's neural coverage runs step by step)."""
    rnn = decoder.rnn
    fused_score = decoder.attention.kind in decoder.FUSED_SCORES
    return decoder.fusable and fused_score and not rnn.is_lstm and rnn.num_layers == 1


def used(decoder, enc: EncoderOutput, state: DecoderState) -> bool:
    """Whether the decoder's time loop runs its Function: gradients are needed (training), the state has one
    row per sentence (not beams sharing encoder rows), and the configuration `applies`."""
    return torch.is_grad_enabled() and state.hidden.size(0) == enc.mask.size(0) and applies(decoder)


def compute_dtype(static_gates: Tensor) -> torch.dtype:
    """The dtype of the Functions' matrix products: autocast's when it is on (forward runs inside it)."""
    device_type = static_gates.device.type
    autocast = torch.is_autocast_enabled(device_type)
    return torch.get_autocast_dtype(device_type) if autocast else static_gates.dtype


def autocast_off(backward: Callable) -> Callable:
    """A Function's backward, run with autocast disabled: the engine runs backward inside the caller's
    autocast block when `loss.backward()` is called in one, which would silently put its products in bf16."""

    @functools.wraps(backward)
    def run(ctx, *grads):
        with torch.autocast(grads[0].device.type, enabled=False):
            return backward(ctx, *grads)

    return run


def gru_step(s: Tensor, x: Tensor, w_hh: Tensor, b_hh: Tensor, saved: Tensor) -> Tensor:
    """s_i from s_{i-1} (batch, hidden) and the input gates x_i (batch, 3 hidden); stores r, z, n and
    U_n s_{i-1} + b_hn in `saved` (4, batch, hidden) for `gru_backward`."""
    gates_h = torch.addmm(b_hh, s, w_hh.T)  # g_i = U s_{i-1} + b_h
    r, z, n = gru_gates(x, gates_h)
    torch.stack([r, z, n, gates_h[:, 2 * s.size(1) :]], out=saved)
    return n + z * (s - n)


def gru_backward(ds: Tensor, s_prev: Tensor, saved: Tensor) -> tuple[Tensor, Tensor]:
    """d x_i and d g_i (batch, 3 hidden) from d s_i, for s_i = n + z (s_{i-1} - n), n = tanh(x_n + r h_n),
    r, z = sigmoid(.); d s_{i-1} is then ds z + d g_i U (left to the caller, with its other terms)."""
    r, z, n, h_n = saved
    d_n = ds * (1 - z) * (1 - n * n)
    d_z = ds * (s_prev - n) * z * (1 - z)
    d_r = d_n * h_n * r * (1 - r)
    return torch.cat([d_r, d_z, d_n], dim=1), torch.cat([d_r, d_z, d_n * r], dim=1)


def scores_backward(d_c: Tensor, annotations: Tensor, alpha: Tensor, d_alpha: Tensor) -> Tensor:
    """d e_i (batch, src_len) in the annotations' dtype, for c_i = sum_j alpha_ij h_j and alpha_i =
    softmax(e_i), from d c_i (batch, annotation) and any direct d alpha_i (batch, src_len). Padding has
    alpha = 0, so it gets d e = 0."""
    d_alpha = torch.bmm(d_c.unsqueeze(1), annotations.transpose(1, 2)).squeeze(1).to(alpha.dtype) + d_alpha
    return (alpha * (d_alpha - (alpha * d_alpha).sum(1, keepdim=True))).to(annotations.dtype)


def step_major(x: Tensor) -> Tensor:
    """(batch, steps, n) -> (steps * batch, n), the row order of the per-step gradients stacked in loops."""
    return x.transpose(0, 1).reshape(-1, x.size(2))


def attentive_gru(
    decoder, enc: EncoderOutput, static_gates: Tensor, state: DecoderState
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor | None]:
    """The recurrence of `RNNSearchDecoder._recur` for decoders where `applies`.

    enc: keys (batch, src_len, dim) = U_a h_j + b, annotations (batch, src_len, annotation), mask (batch,
    src_len) and a linguistic coverage's 1 / Phi_j (batch, src_len, 1); static_gates (batch, steps, 3 hidden)
    = W E y_{i-1} + b (the conditional GRU's: GRU_1's); the state before the first step: s_0 (batch, 1,
    hidden) and a linguistic coverage's C_0 (batch, src_len, 1). Returns the states that queried
    attention (s_0 .. s_{T-1}; the conditional GRU's s'_1 .. s'_T) (batch, steps, hidden), c_i (batch, steps,
    annotation), alpha_i (batch, steps, src_len), the states after each update s_1 .. s_T (batch, steps,
    hidden), s_T, and the coverage C_T (batch, src_len, 1) or None.
    """
    attention = decoder.attention
    first = (None, None, None)  # GRU_1's input gates and recurrent weights, for the conditional GRU
    if decoder.conditional:
        (layer_1,) = decoder.rnn.step_weights()
        first = (static_gates, layer_1.w_hh, layer_1.b_hh)
        (layer,) = decoder.context_rnn.step_weights()  # GRU_2: w_ih is C_2, its bias the input gates
        static_gates = decoder.context_rnn.rnn.bias_ih_l0.expand(*static_gates.shape)
    else:
        (layer,) = decoder.rnn.step_weights()  # w_ih: C, the columns reading c_i (the bias: in static_gates)
    coverage = (None, None, None)  # a linguistic coverage's C_0, 1 / Phi_j and V_a
    if decoder.coverage is not None:
        coverage = (state.coverage[..., 0], enc.coverage_source[..., 0], attention.coverage_proj.weight[:, 0])
    weights = (attention.query_proj.weight, attention.v, layer.w_ih, layer.w_hh, layer.b_hh)
    s0 = state.hidden[:, 0]
    inputs = (enc.keys, enc.annotations, enc.mask, static_gates, s0, *weights, *first, *coverage)
    *outputs, final_coverage = AttentiveGRU.apply(attention.runs_compiled, *inputs)
    return (*outputs, final_coverage.unsqueeze(-1) if decoder.coverage is not None else None)


class AttentiveGRU(torch.autograd.Function):
    """Memory: backward recomputes sigma_ij = sigmoid(2 (W_a s_{i-1} + U_a h_j [+ V_a C_{i-1,j}])) from
    the saved W_a s_{i-1} (and C_{i-1}) rather than keeping it from the forward pass: kept, it would be the
    largest tensor of an update (steps x batch x src_len x dim, 240 MB in fp32 for 64 x 60 x 60).

    The linguistic coverage (coverage.py), one number per source word: C_i = C_{i-1} + alpha_i / Phi, read
    by the score as V_a C_{i-1}. Backward carries d C_i back through the steps: it adds d C_i / Phi to
    d alpha_i and d (V_a C_{i-1,j}) . V_a to d C_{i-1}.
    """

    @staticmethod
    def forward(
        ctx,
        compiled,
        keys,
        annotations,
        mask,
        static_gates,
        s0,
        w_query,
        v,
        w_context,
        w_hh,
        b_hh,
        first_static,
        first_w_hh,
        first_b_hh,
        coverage,
        inverse_fertility,
        w_coverage,
    ):
        dtype, attention = compute_dtype(static_gates), annotations.dtype
        # Autocast would re-cast the weights at every step; cast every operand once, here, instead.
        static_gates, s, w_query, w_context, w_hh, b_hh = (
            x.to(dtype) for x in (static_gates, s0, w_query, w_context, w_hh, b_hh)
        )
        first = first_static is not None  # the conditional GRU: GRU_1 before the query
        if first:
            first_static, first_w_hh, first_b_hh = (
                x.to(dtype) for x in (first_static, first_w_hh, first_b_hh)
            )
        covered = inverse_fertility is not None  # a linguistic coverage
        v = v.to(attention)  # (keys come from Seq2Seq.encode in the annotations' dtype)
        batch, steps, hidden, src_len = static_gates.size(0), static_gates.size(1), s.size(1), mask.size(1)
        previous = static_gates.new_empty(batch, steps, hidden)  # the query states s_{i-1} (or s'_i)
        updated = static_gates.new_empty(batch, steps, hidden)  # s_i
        contexts = annotations.new_empty(batch, steps, annotations.size(2))  # c_i
        wide = torch.promote_types(attention, torch.float32)  # the softmax's dtype
        alphas = annotations.new_empty(batch, steps, src_len, dtype=wide)  # alpha_i
        gates = static_gates.new_empty(steps, 4, batch, hidden)  # r, z, n, U_n s_{i-1} + b_hn: for backward
        first_gates = static_gates.new_empty(steps, 4, batch, hidden) if first else None  # GRU_1's
        queries = keys.new_empty(steps, batch, 1, keys.size(2))  # W_a s_{i-1}, for backward
        coverages = keys.new_empty(steps, batch, src_len) if covered else None  # C_{i-1}, for backward
        if covered:  # C_0, 1 / Phi_j (batch, src_len) and V_a (dim,)
            coverage, inverse_fertility, w_coverage = (
                x.to(attention) for x in (coverage, inverse_fertility, w_coverage)
            )
        else:
            coverage = keys.new_empty(0)  # (an output all the same)
        attend = kernel(additive_attention, compiled)
        with torch.autocast(static_gates.device.type, enabled=False):
            for i in range(steps):
                if first:  # s'_i = GRU_1(s_{i-1}, W_1 E y_{i-1} + b_1)
                    s = gru_step(s, first_static[:, i], first_w_hh, first_b_hh, first_gates[i])
                previous[:, i] = s
                queries[i] = (s @ w_query.T).unsqueeze(1)
                term = None
                if covered:
                    coverages[i] = coverage
                    term = coverage_term(coverage, w_coverage)
                context, alpha = attend(
                    queries[i], keys, v, mask, annotations, term
                )  # (batch, 1, annotation)
                context = context.squeeze(1)
                s = gru_step(
                    s, torch.addmm(static_gates[:, i], context.to(dtype), w_context.T), w_hh, b_hh, gates[i]
                )
                if covered:  # C_i = C_{i-1} + alpha_i / Phi
                    coverage = coverage + alpha.squeeze(1).to(attention) * inverse_fertility
                updated[:, i] = s
                alphas[:, i] = alpha.squeeze(1)
                contexts[:, i] = context
        saved = (keys, queries, annotations, w_query, v, w_context, w_hh, previous, contexts, alphas, gates)
        ctx.save_for_backward(
            *saved, s0.to(dtype), updated, first_w_hh, first_gates, inverse_fertility, w_coverage, coverages
        )
        ctx.compiled, ctx.first, ctx.covered = compiled, first, covered
        return previous, contexts, alphas, updated, s, coverage

    @staticmethod
    @autocast_off
    def backward(ctx, *grads):
        keys, queries, annotations, w_query, v, w_context, w_hh, previous, contexts, alphas, gates, *rest = (
            ctx.saved_tensors
        )
        s0, updated, first_w_hh, first_gates, inverse_fertility, w_coverage, coverages = rest
        # (the engine casts the gradients returned below to each input's own dtype)
        dtype, attention, wide = previous.dtype, annotations.dtype, alphas.dtype
        d_previous, d_contexts, d_alphas, d_updated, ds, d_coverage = grads
        d_previous, d_updated, ds = d_previous.to(dtype), d_updated.to(dtype), ds.to(dtype)
        steps, batch, hidden = gates.size(0), gates.size(2), gates.size(3)
        d_static = previous.new_empty(batch, steps, 3 * hidden)  # d x_i (x_i = W E y_{i-1} + b + C c_i)
        d_gates_h = previous.new_empty(steps, batch, 3 * hidden)  # d g_i
        d_queries = previous.new_empty(steps, batch, w_query.size(0))  # d (W_a s_{i-1})
        d_context = annotations.new_empty(batch, steps, annotations.size(2))  # d c_i, all paths
        d_keys = torch.zeros_like(keys, dtype=wide)  # (summed over steps: see the module's docstring)
        d_v = torch.zeros_like(v, dtype=wide)
        if ctx.first:  # GRU_1's d x'_i and d g'_i
            d_first_static = previous.new_empty(batch, steps, 3 * hidden)
            d_first_gates_h = previous.new_empty(steps, batch, 3 * hidden)
        if ctx.covered:
            d_cov = d_coverage.to(wide)  # d C_i, carried back through the steps
            d_inverse_fertility = torch.zeros_like(d_cov)
            d_w_coverage = torch.zeros_like(w_coverage, dtype=wide)
        attention_backward = kernel(additive_backward, ctx.compiled)
        for i in reversed(range(steps)):
            ds = ds + d_updated[:, i]
            d_x, d_gates_h[i] = gru_backward(ds, previous[:, i], gates[i])
            d_static[:, i] = d_x
            d_c = (d_x @ w_context).to(attention) + d_contexts[:, i]  # (batch, annotation)
            d_context[:, i] = d_c
            d_alpha, term = d_alphas[:, i], None
            if ctx.covered:  # C_i = C_{i-1} + alpha_i / Phi
                d_alpha = d_alpha + d_cov * inverse_fertility
                d_inverse_fertility += d_cov * alphas[:, i]
                term = coverage_term(coverages[i], w_coverage)
            args = (queries[i], keys, v, annotations, alphas[:, i], d_c, d_alpha, d_keys, term)
            d_v_i, d_queries[i], d_pre = attention_backward(*args)  # (d_queries: cast to the compute dtype)
            d_v += d_v_i
            if ctx.covered:  # the score's V_a C_{i-1,j}: d C_{i-1,j} += d (V_a C_{i-1,j}) . V_a
                d_cov = d_cov + (d_pre @ w_coverage.to(d_pre.dtype)).to(wide)
                d_w_coverage += (d_pre * coverages[i].unsqueeze(-1).to(d_pre.dtype)).sum((0, 1))
            ds = ds * gates[i, 1] + d_gates_h[i] @ w_hh + d_queries[i] @ w_query + d_previous[:, i]
            if ctx.first:  # through s'_i = GRU_1(s_{i-1}, x'_i)
                s_before = s0 if i == 0 else updated[:, i - 1]
                d_first_static[:, i], d_first_gates_h[i] = gru_backward(ds, s_before, first_gates[i])
                ds = ds * first_gates[i, 1] + d_first_gates_h[i] @ first_w_hh
        # The weight and annotation gradients: one product each over all steps.
        flat_previous = step_major(previous)
        d_gates_h = d_gates_h.flatten(0, 1)
        d_w_hh = d_gates_h.T @ flat_previous
        d_w_query = d_queries.flatten(0, 1).T @ flat_previous
        d_w_context = d_static.flatten(0, 1).T @ contexts.flatten(0, 1).to(dtype)
        # (batch, src_len, steps) @ (batch, steps, annotation): sum_i alpha_ij d c_i
        d_annotations = torch.bmm(alphas.transpose(1, 2).to(attention), d_context)
        weights = (d_w_query, d_v, d_w_context, d_w_hh, d_gates_h.sum(0))
        first_weights = (None, None, None)
        if ctx.first:  # GRU_1 read s_0 .. s_{T-1}
            d_first_gates_h = d_first_gates_h.flatten(0, 1)
            inputs = step_major(torch.cat([s0.unsqueeze(1), updated[:, :-1]], dim=1))
            first_weights = (d_first_static, d_first_gates_h.T @ inputs, d_first_gates_h.sum(0))
        coverage_weights = (None, None, None)
        if ctx.covered:  # d C_0, d (1 / Phi), d V_a
            coverage_weights = (d_cov, d_inverse_fertility, d_w_coverage)
        return None, d_keys, d_annotations, None, d_static, ds, *weights, *first_weights, *coverage_weights


def coverage_term(coverage: Tensor, w_coverage: Tensor) -> Tensor:
    """V_a C_{i-1,j} (batch, 1, src_len, dim) of a linguistic coverage C (batch, src_len) and V_a (dim,)."""
    return (coverage.unsqueeze(-1) * w_coverage).unsqueeze(1)


def feeding_gru(
    decoder, keys: Tensor, annotations: Tensor, mask: Tensor, static_gates: Tensor, h0: Tensor, feed0: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The recurrence of `LuongDecoder._recur` for decoders where `applies`.

    keys (batch, src_len, hidden) = W_a h_j (or h_j); annotations (batch, src_len, annotation); mask
    (batch, src_len); static_gates (batch, steps, 3 hidden) = W E y_{t-1} + b; h0 and feed0 = h~_0
    (batch, hidden).
    Returns h~_1 .. h~_T (batch, steps, hidden), a_t (batch, steps, src_len) and h_T.
    """
    (layer,) = decoder.rnn.step_weights()  # w_ih: C, the columns that read h~_{t-1}
    combine = decoder.combine
    weights = (layer.w_ih, layer.w_hh, layer.b_hh, combine.weight, combine.bias)
    return FeedingGRU.apply(keys, annotations, mask, static_gates, h0, feed0, *weights)


class FeedingGRU(torch.autograd.Function):
    """Backward needs no recomputation: every per-step tensor is (batch, hidden) or (batch, src_len)."""

    @staticmethod
    def forward(
        ctx, keys, annotations, mask, static_gates, h0, feed0, w_feed, w_hh, b_hh, w_combine, b_combine
    ):
        dtype, attention = compute_dtype(static_gates), annotations.dtype
        static_gates, h, feed, w_feed, w_hh, b_hh, w_combine, b_combine = (
            x.to(dtype) for x in (static_gates, h0, feed0, w_feed, w_hh, b_hh, w_combine, b_combine)
        )
        batch, steps, hidden = static_gates.size(0), static_gates.size(1), h.size(1)
        states = static_gates.new_empty(batch, steps + 1, hidden)  # h_0 .. h_T
        feeds = static_gates.new_empty(batch, steps + 1, hidden)  # h~_0 .. h~_T
        contexts = annotations.new_empty(batch, steps, annotations.size(2))  # c_t
        wide = torch.promote_types(attention, torch.float32)  # the softmax's dtype
        alphas = annotations.new_empty(batch, steps, mask.size(1), dtype=wide)  # a_t
        gates = static_gates.new_empty(steps, 4, batch, hidden)  # r, z, n, U_n h_{t-1} + b_hn: for backward
        states[:, 0], feeds[:, 0] = h, feed
        with torch.autocast(static_gates.device.type, enabled=False):
            for t in range(steps):
                h = gru_step(h, torch.addmm(static_gates[:, t], feed, w_feed.T), w_hh, b_hh, gates[t])
                context, alpha = dot_attention(h.to(attention).unsqueeze(1), keys, mask, annotations)
                context = context.squeeze(1)  # (batch, annotation)
                feed = torch.tanh(
                    torch.addmm(b_combine, torch.cat([context.to(dtype), h], dim=1), w_combine.T)
                )
                states[:, t + 1], feeds[:, t + 1] = h, feed
                contexts[:, t], alphas[:, t] = context, alpha.squeeze(1)
        ctx.save_for_backward(
            keys, annotations, w_feed, w_hh, w_combine, states, feeds, contexts, alphas, gates
        )
        return feeds[:, 1:], alphas, h

    @staticmethod
    @autocast_off
    def backward(ctx, d_feeds, d_alphas, d_h):
        keys, annotations, w_feed, w_hh, w_combine, states, feeds, contexts, alphas, gates = ctx.saved_tensors
        dtype, attention = states.dtype, annotations.dtype
        d_feeds, d_h = d_feeds.to(dtype), d_h.to(dtype)
        steps, batch, hidden = gates.size(0), gates.size(2), gates.size(3)
        annotation = annotations.size(2)
        d_static = states.new_empty(batch, steps, 3 * hidden)  # d x_t
        d_gates_h = states.new_empty(steps, batch, 3 * hidden)  # d g_t
        d_combined = states.new_empty(batch, steps, hidden)  # d (W_c [c_t ; h_t] + b_c)
        d_context = annotations.new_empty(batch, steps, annotation)  # d c_t
        d_scores = annotations.new_empty(batch, steps, keys.size(1))  # d e_t
        d_feed = torch.zeros_like(d_h)  # d h~_t through x_{t+1}
        for t in reversed(range(steps)):
            d_u = (d_feeds[:, t] + d_feed) * (1 - feeds[:, t + 1] ** 2)  # h~_t = tanh(u_t)
            d_combined[:, t] = d_u
            d_ch = d_u @ w_combine  # (batch, annotation + hidden): d c_t, and d h_t through h~_t
            d_c = d_ch[:, :annotation].to(attention)
            d_context[:, t] = d_c
            d_e = scores_backward(d_c, annotations, alphas[:, t], d_alphas[:, t])  # (e_tj = h_t . k_j)
            d_scores[:, t] = d_e
            d_h = d_h + d_ch[:, annotation:] + torch.bmm(d_e.unsqueeze(1), keys).squeeze(1).to(dtype)
            d_x, d_gates_h[t] = gru_backward(d_h, states[:, t], gates[t])
            d_static[:, t] = d_x
            d_feed = d_x @ w_feed  # d h~_{t-1}
            d_h = d_h * gates[t, 1] + d_gates_h[t] @ w_hh  # d h_{t-1}
        # The weight, key and annotation gradients: one product each over all steps.
        d_gates_h = d_gates_h.flatten(0, 1)
        d_w_hh = d_gates_h.T @ step_major(states[:, :-1])
        d_w_feed = step_major(d_static).T @ step_major(feeds[:, :-1])
        combined_in = torch.cat([contexts.to(dtype), states[:, 1:]], dim=2).flatten(0, 1)
        d_w_combine = d_combined.flatten(0, 1).T @ combined_in
        d_keys = torch.bmm(d_scores.transpose(1, 2), states[:, 1:].to(attention))  # sum_t d e_tj h_t
        d_annotations = torch.bmm(alphas.transpose(1, 2).to(attention), d_context)  # sum_t a_tj d c_t
        weights = (d_w_feed, d_w_hh, d_gates_h.sum(0), d_w_combine, d_combined.sum((0, 1)))
        return d_keys, d_annotations, None, d_static, d_h, d_feed, *weights


def additive_backward(
    query: Tensor,
    keys: Tensor,
    v: Tensor,
    annotations: Tensor,
    alpha: Tensor,
    d_c: Tensor,
    d_alpha: Tensor,
    d_keys: Tensor,
    coverage: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The attention's part of step i's backward, from d c_i (batch, annotation) and any direct
    d alpha_i (batch, src_len), with a coverage's term V_a C_{i-1} (batch, 1, src_len, dim) or None: returns
    d v_a (dim,), d (W_a s_{i-1}) (batch, dim) and d (W_a s_{i-1} + U_a h_j + V_a C_{i-1,j}) (batch, src_len,
    dim), and adds d keys into `d_keys` (batch, src_len, dim). One function so that `kernel` can compile it
    as a whole.
    """
    d_e = scores_backward(d_c, annotations, alpha, d_alpha)
    # e_ij = 2 v.sigma_ij - sum v with sigma_ij = sigmoid(2 (q_i + k_j)). d v keeps the - sum_j d_e_ij
    # term although it is 0 in exact arithmetic: it cancels most of the rounding error of d_e.
    half = additive_half(query, keys, coverage).squeeze(1)  # (batch, src_len, dim), recomputed
    d_v = 2 * (d_e.view(1, -1) @ half.view(-1, half.size(-1))).squeeze(0) - d_e.sum()
    d_pre = torch.ops.aten.sigmoid_backward((4 * d_e).unsqueeze(2) * v, half)  # d (q_i + k_j)
    d_keys.add_(d_pre)
    return d_v, d_pre.sum(1), d_pre
