"""The two decoders: Bahdanau et al. 2014's RNNsearch (and, without attention, its RNNencdec baseline) and
Luong et al. 2015's input-feeding decoder.

Both have one `forward(enc, state, tgt_in) -> (features, state, weights)` over a whole target prefix. Training
calls it on the full teacher-forced target; search calls it on one token per step (`Seq2Seq.step`), so the
two paths are the same code. Inside, everything that does not depend on the recurrent state is computed
outside the time loop: the embeddings and their gate projections before it, the deep output / attentional
layer and the vocabulary projection for all steps after it. When the recurrence does not read attention
(RNNencdec, Luong without input feeding) there is no Python loop at all: one cuDNN call runs all steps.
When training with a one-layer GRU (RNNsearch with additive attention, Luong input feeding with `general`
or `dot`), the loop is one autograd Function with a hand-written backward (fused.py); search, and every other
configuration (a coverage model and the conditional GRU among them), run it step by step.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..config import ModelConfig
from ..vocab.pieces import PAD_ID
from . import fused
from .attention import ADDITIVE, Attention
from .coverage import Coverage
from .recurrent import LayerWeights, RecurrentStack
from .states import DecoderState, EncoderOutput

# The pre-output features (batch, steps, pre_output) that `output` (after `dropout_output`) projects onto the
# vocabulary: t_i for RNNsearch, h~_t for Luong. Seq2Seq applies that projection, so that training can run it
# in chunks together with the loss. Then the state after the last step and the attention weights
# (batch, steps, src_len).
DecoderOutput = tuple[Tensor, DecoderState, Tensor]

# What RNNsearch's recurrences return: the states that queried attention and feed the deep output (batch,
# steps, hid), the contexts c_i (batch, steps, annotation), the weights alpha_i (batch, steps, src_len) and
# the state after the last step.
Recurrence = tuple[Tensor, Tensor, Tensor, DecoderState]


class InitialState(nn.Module):
    """s_0 = tanh(W_s bwd h_1) (Bahdanau et al. 2014, Appendix A.2.2), one W_s block per decoder layer.

    bwd h_1 is the backward RNN's state after reading the whole sentence; with a unidirectional encoder the
    forward RNN's last state fwd h_T plays that role. With attention `none` the source is the fixed context
    instead: s_0 = tanh(W_s c) as in Cho et al. 2014 (h'_0 = tanh(V' c)). LSTM memory cells start at 0;
    Luong's input-feeding vector h~_0 starts at 0, and so does a coverage model's C_0.
    """

    def __init__(
        self, cfg: ModelConfig, annotation_size: int, feed_size: int, coverage_size: int = 0
    ) -> None:
        super().__init__()
        self.source_size = cfg.hidden_size if cfg.attends else annotation_size
        self.use_context = not cfg.attends
        self.layers = cfg.decoder_layers
        self.hidden_size = cfg.decoder_hidden_size
        self.proj = nn.Linear(self.source_size, self.layers * self.hidden_size)  # W_s
        self.is_lstm = cfg.cell == "lstm"
        self.feed_size = feed_size
        self.coverage_size = coverage_size  # a coverage model's units per source word (0: none)

    def forward(self, enc: EncoderOutput) -> DecoderState:
        source = enc.context if self.use_context else enc.final[:, -self.source_size :]  # c, or bwd h_1
        hidden = torch.tanh(self.proj(source)).view(-1, self.layers, self.hidden_size)  # (batch, layers, hid)
        zeros = hidden.new_zeros
        coverage_shape = (*enc.mask.shape, self.coverage_size)  # (batch, src_len, size)
        return DecoderState(
            hidden=hidden,
            cell=zeros(hidden.shape) if self.is_lstm else None,
            feed=zeros(hidden.size(0), self.feed_size) if self.feed_size else None,
            coverage=enc.annotations.new_zeros(coverage_shape) if self.coverage_size else None,
        )


class RNNSearchDecoder(nn.Module):
    """Bahdanau et al. 2014, Appendix A.2.2, with the alignment model of A.1.2.

    Step i predicts y_i from the state s that queries attention, the previous word and the context c_i:
        e_ij = a(s, h_j),  alpha_ij = softmax_j(e_ij),  c_i = sum_j alpha_ij h_j            (eqs. 5, 6)
        t~_i = U_o s + V_o E y_{i-1} + C_o c_i,  t_i = maxout(t~_i),  p(y_i) = softmax(W_o t_i)  (A.2.2)
    The GRU update s' = f(s, [E y ; c]) comes in one of three orders (`model.decoder_step`, docs/model.md):
    - attend_then_update (Appendix A.2.2): s = s_{i-1}, then s_i = f(s_{i-1}, [E y_{i-1} ; c_i]). The state
      that predicts y_i has not read y_{i-1}; only the deep output's V_o E y_{i-1} has.
    - update_then_attend (the authors' GroundHog code): s first reads y_{i-1} with the previous step's
      context, s = f(s_prev, [E y_{i-1} ; c_{i-1}]), then queries attention and feeds the deep output.
      The first step reads no word (s = s_0); the context not yet read by the state travels in
      `DecoderState.feed`.
    - conditional (Nematus' cGRU, Sennrich et al. 2017, sec. 2): two transitions per step, the first
      reading the word, the second the context; the second's state feeds the deep output in place of s:
          s'_i = GRU_1(s_{i-1}, E y_{i-1}),  c_i = ATT(h, s'_i),  s_i = GRU_2(s'_i, c_i)
    With attention `none` c_i is the fixed c of the RNNencdec and the same equations apply (the first two
    orders). With a coverage model (coverage.py) attention also reads C_{i-1}, updated after each step.
    """

    FUSED_SCORES = ADDITIVE  # the attention kinds of fused.attentive_gru

    def __init__(self, cfg: ModelConfig, vocab_size: int, annotation_size: int) -> None:
        super().__init__()
        emb, hid, maxout = cfg.tgt_embed_dim, cfg.decoder_hidden_size, cfg.maxout_dim
        self.update_first = cfg.decoder_step == "update_then_attend"
        self.conditional = cfg.decoder_step == "conditional"
        self.attends = cfg.attends
        self.embed = nn.Embedding(vocab_size, emb, padding_idx=PAD_ID)  # E
        self.coverage = Coverage(cfg, annotation_size, hid) if cfg.coverage != "none" else None
        coverage_size = self.coverage.size if self.coverage is not None else 0
        self.attention = Attention(
            cfg.attention, hid, annotation_size, cfg.attention_dim, cfg.fixed_context, coverage_size
        )
        self.init = InitialState(cfg, annotation_size, feed_size=0, coverage_size=coverage_size)
        layers, dropout = cfg.decoder_layers, cfg.dropout_hidden
        # GRU_1 of the conditional GRU reads the word alone; every other order's RNN reads [E y ; c]
        read_context = 0 if self.conditional else annotation_size
        self.rnn = RecurrentStack(cfg.cell, emb, read_context, hid, layers, dropout)
        # GRU_2, reading c_i and no word (`_second_transition`)
        second = RecurrentStack(cfg.cell, 0, annotation_size, hid, 1, 0.0) if self.conditional else None
        self.context_rnn = second
        # fused.attentive_gru computes the linguistic coverage, not the neural one
        self.fusable = cfg.coverage != "neural"
        self.maxout = nn.Linear(hid + emb + annotation_size, 2 * maxout)  # [U_o V_o C_o] (one matrix)
        self.output = nn.Linear(maxout, vocab_size)  # W_o
        self.dropout_embed = nn.Dropout(cfg.dropout_embed)
        self.dropout_output = nn.Dropout(cfg.dropout_output)

    def forward(self, enc: EncoderOutput, state: DecoderState, tgt_in: Tensor) -> DecoderOutput:
        """Features t_i (batch, steps, maxout), the state after the last step and the attention weights
        (batch, steps, src_len) for the inputs y_0 .. y_{T-1} (batch, steps), y_0 = <bos>."""
        embedded = self.dropout_embed(self.embed(tgt_in))  # E y_{i-1}: (batch, steps, emb)
        if not self.attends:  # RNNencdec
            states, contexts, weights, new_state = self._fixed_context(enc, state, embedded)
        else:  # W E y_{i-1} + b for every i: (batch, steps, gates)
            static_gates = self.rnn.static_gates(self.embed, tgt_in, embedded)
            states, contexts, weights, new_state = self._recur(enc, state, static_gates)
        # Deep output (A.2.2): t~_i = U_o s + V_o E y_{i-1} + C_o c_i for all steps in one matmul.
        t_tilde = self.maxout(torch.cat([states, embedded, contexts], dim=-1))  # (batch, steps, 2 * maxout)
        t = t_tilde.unflatten(-1, (-1, 2)).amax(dim=-1)  # t_i,j = max(t~_i,2j-1, t~_i,2j)
        return t, new_state, weights  # p(y_i) = softmax(W_o t_i): Seq2Seq.logits

    def _fixed_context(self, enc: EncoderOutput, state: DecoderState, embedded: Tensor) -> Recurrence:
        """RNNencdec: c is the same at every step, so the recurrence needs no loop: one cuDNN call."""
        # `none` reads only the query's shape: c at every step, uniform weights
        contexts, weights = self.attention(embedded, enc)  # (batch, steps, annotation)
        inputs = torch.cat([embedded, contexts], dim=-1)  # [E y_{i-1} ; c]
        top = state.hidden[:, -1:]  # the top layer's state before the first step: (batch, 1, hid)
        if self.update_first:
            fresh = state.feed is None  # the first step reads no word
            outputs, hidden, cell = self.rnn.run(inputs[:, 1:] if fresh else inputs, state.hidden, state.cell)
            states = torch.cat([top, outputs], dim=1) if fresh else outputs
            return states, contexts, weights, DecoderState(hidden=hidden, cell=cell, feed=contexts[:, -1])
        outputs, hidden, cell = self.rnn.run(inputs, state.hidden, state.cell)  # s_1 .. s_T
        states = torch.cat([top, outputs[:, :-1]], dim=1)  # s_0 .. s_{T-1}
        return states, contexts, weights, DecoderState(hidden=hidden, cell=cell)

    def _recur(self, enc: EncoderOutput, state: DecoderState, static_gates: Tensor) -> Recurrence:
        """The time loop, attention and update in the configured order."""
        if fused.used(self, enc, state) and state.feed is None:  # training: backward by hand
            return self._fused(enc, state, static_gates)
        rnn_weights = self.rnn.step_weights()
        second_weights = self.context_rnn.step_weights() if self.conditional else None  # GRU_2's
        hidden = list(state.hidden.unbind(1))
        cell = list(state.cell.unbind(1)) if state.cell is not None else None
        context = state.feed  # update_then_attend: c_{i-1}, not yet read by the state (None at the start)
        coverage = state.coverage  # C_{i-1} (batch, src_len, size) of a coverage model, or None
        states, contexts, weights = [], [], []
        for gates in static_gates.unbind(1):  # one (batch, gates) tensor per step: one backward op, not T
            if self.conditional:  # s'_i = GRU_1(s_{i-1}, E y_{i-1})
                _, hidden, cell = self.rnn.step(rnn_weights, gates, None, hidden, cell)
            elif self.update_first and context is not None:  # s = f(s, [E y_{i-1} ; c_{i-1}])
                _, hidden, cell = self.rnn.step(rnn_weights, gates, context, hidden, cell)
            s = hidden[-1]  # the top layer's state that queries attention: (batch, hid)
            context, alpha = self.attention(s.unsqueeze(1), enc, coverage)  # alpha_ij, c_i: eqs. (5), (6)
            context = context.squeeze(1)  # (batch, annotation)
            if coverage is not None:  # C_i from C_{i-1} and alpha_i (coverage.py)
                coverage = self.coverage.update(coverage, alpha.squeeze(1), enc.coverage_source, enc.mask, s)
            if self.conditional:  # s_i = GRU_2(s'_i, c_i), the state the deep output reads
                s, hidden = self._second_transition(second_weights, context, hidden)
            elif not self.update_first:
                _, hidden, cell = self.rnn.step(rnn_weights, gates, context, hidden, cell)  # s_i
            states.append(s)
            contexts.append(context)
            weights.append(alpha)
        new_state = DecoderState(
            hidden=torch.stack(hidden, dim=1),  # (batch, layers, hid)
            cell=torch.stack(cell, dim=1) if cell is not None else None,
            feed=context if self.update_first else None,
            coverage=coverage,
        )
        return torch.stack(states, dim=1), torch.stack(contexts, dim=1), torch.cat(weights, dim=1), new_state

    def _second_transition(
        self, weights: list[LayerWeights], context: Tensor, hidden: list[Tensor]
    ) -> tuple[Tensor, list[Tensor]]:
        """The conditional GRU's s_i = GRU_2(s'_i, c_i) (batch, hid): GRU_2 reads no word, so its input
        gates are C_2 c_i plus its input bias alone."""
        rnn = self.context_rnn
        return rnn.step(weights, rnn.rnn.bias_ih_l0, context, hidden, None)[:2]

    def _fused(self, enc: EncoderOutput, state: DecoderState, static_gates: Tensor) -> Recurrence:
        """The loop as one autograd Function (`fused.attentive_gru`), which runs attend_then_update, or
        the conditional GRU, whose deep output reads the states after each update.

        update_then_attend is the same loop with every update one word later: the update after step i
        reads y_i, so the gates shift by one step, and the update after the last step (which nothing
        reads) gets zeros.
        """
        gates = F.pad(static_gates[:, 1:], (0, 0, 0, 1)) if self.update_first else static_gates
        queried, contexts, weights, updated, s, coverage = fused.attentive_gru(self, enc, gates, state)
        if self.update_first:
            last = DecoderState(hidden=queried[:, -1:], feed=contexts[:, -1], coverage=coverage)
            return queried, contexts, weights, last
        states = updated if self.conditional else queried  # what the deep output reads
        return states, contexts, weights, DecoderState(hidden=s.unsqueeze(1), coverage=coverage)


class LuongDecoder(nn.Module):
    """Luong et al. 2015, Sec. 3: h_t = RNN(h_{t-1}, [E y_{t-1} ; h~_{t-1}]) (input feeding, Sec. 3.3),
    attention from the current top state h_t, h~_t = tanh(W_c [c_t ; h_t]) (eq. 5), p(y_t) = softmax(W_s h~_t)
    (eq. 6). Without input feeding the RNN input is E y_{t-1} alone and every step runs in one cuDNN call,
    then attention for all steps at once."""

    FUSED_SCORES = ("general", "dot")  # the attention kinds of fused.feeding_gru

    def __init__(self, cfg: ModelConfig, vocab_size: int, annotation_size: int) -> None:
        super().__init__()
        emb, hid = cfg.tgt_embed_dim, cfg.decoder_hidden_size
        self.input_feeding = cfg.input_feeding
        feed = hid if cfg.input_feeding else 0
        self.embed = nn.Embedding(vocab_size, emb, padding_idx=PAD_ID)
        self.attention = Attention(cfg.attention, hid, annotation_size, cfg.attention_dim, cfg.fixed_context)
        self.init = InitialState(cfg, annotation_size, feed_size=feed)
        self.rnn = RecurrentStack(cfg.cell, emb, feed, hid, cfg.decoder_layers, cfg.dropout_hidden)
        self.combine = nn.Linear(annotation_size + hid, hid)  # W_c
        self.output = nn.Linear(hid, vocab_size)  # W_s
        self.coverage = None  # (a coverage model is RNNsearch's: check_model_config)
        self.fusable = True
        self.dropout_embed = nn.Dropout(cfg.dropout_embed)
        self.dropout_output = nn.Dropout(cfg.dropout_output)

    def forward(self, enc: EncoderOutput, state: DecoderState, tgt_in: Tensor) -> DecoderOutput:
        """Features h~_t (batch, steps, hid), the state after the last step and the attention weights
        (batch, steps, src_len)."""
        embedded = self.dropout_embed(self.embed(tgt_in))  # E y_{t-1}: (batch, steps, emb)
        if not self.input_feeding:
            outputs, hidden, cell = self.rnn.run(embedded, state.hidden, state.cell)  # h_t for every t
            contexts, weights = self.attention(outputs, enc)  # all steps at once
            attentional = self.attentional(contexts, outputs)  # h~_t: (batch, steps, hid)
            new_state = DecoderState(hidden=hidden, cell=cell)
        else:
            static_gates = self.rnn.static_gates(self.embed, tgt_in, embedded)  # W E y_{t-1} + b, every t
            attentional, weights, new_state = self._recur(enc, state, static_gates)
        return attentional, new_state, weights  # p(y_t) = softmax(W_s h~_t): Seq2Seq.logits

    def attentional(self, context: Tensor, h: Tensor) -> Tensor:
        return torch.tanh(self.combine(torch.cat([context, h], dim=-1)))  # h~_t = tanh(W_c [c_t ; h_t])

    def _recur(
        self, enc: EncoderOutput, state: DecoderState, static_gates: Tensor
    ) -> tuple[Tensor, Tensor, DecoderState]:
        """The input-feeding time loop: RNN step, then attention from h_t, then h~_t fed to the next step."""
        if fused.used(self, enc, state):  # training: backward by hand
            attentional, weights, h = fused.feeding_gru(
                self, enc.keys, enc.annotations, enc.mask, static_gates, state.hidden[:, 0], state.feed
            )
            return attentional, weights, DecoderState(hidden=h.unsqueeze(1), feed=attentional[:, -1])
        rnn_weights = self.rnn.step_weights()
        static_gates = static_gates.unbind(1)  # one (batch, gates) tensor per step
        hidden = list(state.hidden.unbind(1))
        cell = list(state.cell.unbind(1)) if state.cell is not None else None
        feed = state.feed  # h~_{t-1}
        attentional, weights = [], []
        for gates in static_gates:
            h, hidden, cell = self.rnn.step(rnn_weights, gates, feed, hidden, cell)  # h_t
            context, alpha = self.attention(h.unsqueeze(1), enc)  # c_t, a_t from score(h_t, h_s)
            feed = self.attentional(context.squeeze(1), h)  # h~_t
            attentional.append(feed)
            weights.append(alpha)
        new_state = DecoderState(
            hidden=torch.stack(hidden, dim=1),
            cell=torch.stack(cell, dim=1) if cell is not None else None,
            feed=feed,
        )
        return torch.stack(attentional, dim=1), torch.cat(weights, dim=1), new_state


DECODERS: dict[str, type[nn.Module]] = {"rnnsearch": RNNSearchDecoder, "luong": LuongDecoder}
