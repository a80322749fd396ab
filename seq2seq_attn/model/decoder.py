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
configuration, run it step by step.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from . import fused
from .attention import ADDITIVE, Attention
from .encoder import PAD
from .recurrent import RecurrentStack
from .states import DecoderState, EncoderOutput

# The pre-output features (batch, steps, pre_output) that `output` (after `dropout_output`) projects onto the
# vocabulary: t_i for RNNsearch, h~_t for Luong. Seq2Seq applies that projection, so that training can run it
# in chunks together with the loss. Then the state after the last step and the attention weights
# (batch, steps, src_len).
DecoderOutput = tuple[Tensor, DecoderState, Tensor]


class InitialState(nn.Module):
    """s_0 = tanh(W_s bwd h_1) (Bahdanau et al. 2014, Appendix A.2.2), one W_s block per decoder layer.

    bwd h_1 is the backward RNN's state after reading the whole sentence; with a unidirectional encoder the
    forward RNN's last state fwd h_T plays that role. With attention `none` the source is the fixed context
    instead: s_0 = tanh(W_s c) as in Cho et al. 2014 (h'_0 = tanh(V' c)). LSTM memory cells start at 0;
    Luong's input-feeding vector h~_0 starts at 0.
    """

    def __init__(self, cfg: ModelConfig, annotation_size: int, feed_size: int) -> None:
        super().__init__()
        self.source_size = annotation_size if cfg.attention == "none" else cfg.hidden_size
        self.use_context = cfg.attention == "none"
        self.layers = cfg.decoder_layers
        self.hidden_size = cfg.decoder_hidden_size
        self.proj = nn.Linear(self.source_size, self.layers * self.hidden_size)  # W_s
        self.is_lstm = cfg.cell == "lstm"
        self.feed_size = feed_size

    def forward(self, enc: EncoderOutput) -> DecoderState:
        source = enc.context if self.use_context else enc.final[:, -self.source_size :]  # c, or bwd h_1
        hidden = torch.tanh(self.proj(source)).view(-1, self.layers, self.hidden_size)  # (batch, layers, hid)
        zeros = hidden.new_zeros
        return DecoderState(
            hidden=hidden,
            cell=zeros(hidden.shape) if self.is_lstm else None,
            feed=zeros(hidden.size(0), self.feed_size) if self.feed_size else None,
        )


class RNNSearchDecoder(nn.Module):
    """Bahdanau et al. 2014, Appendix A.2.2, with the alignment model of A.1.2.

    Step i: attention from the previous state, c_i = sum_j alpha_ij h_j, alpha_i from e_ij = a(s_{i-1}, h_j);
    s_i = GRU(s_{i-1}, [E y_{i-1} ; c_i]); deep output t~_i = U_o s_{i-1} + V_o E y_{i-1} + C_o c_i,
    t_i = max-pool over pairs of t~_i (maxout), p(y_i) = softmax(W_o t_i).
    With attention `none` the context is the fixed c of the RNNencdec and the same equations apply.
    """

    FUSED_SCORES = ADDITIVE  # the attention kinds of fused.attentive_gru

    def __init__(self, cfg: ModelConfig, vocab_size: int, annotation_size: int) -> None:
        super().__init__()
        emb, hid, maxout = cfg.tgt_embed_dim, cfg.decoder_hidden_size, cfg.maxout_dim
        self.embed = nn.Embedding(vocab_size, emb, padding_idx=PAD)  # E
        self.attention = Attention(cfg.attention, hid, annotation_size, cfg.attention_dim)
        self.init = InitialState(cfg, annotation_size, feed_size=0)
        self.rnn = RecurrentStack(cfg.cell, emb, annotation_size, hid, cfg.decoder_layers, cfg.dropout_hidden)
        self.maxout = nn.Linear(hid + emb + annotation_size, 2 * maxout)  # [U_o V_o C_o] (one matrix)
        self.output = nn.Linear(maxout, vocab_size)  # W_o
        self.dropout_embed = nn.Dropout(cfg.dropout_embed)
        self.dropout_output = nn.Dropout(cfg.dropout_output)

    def forward(self, enc: EncoderOutput, state: DecoderState, tgt_in: Tensor) -> DecoderOutput:
        """Features t_i (batch, steps, maxout), the state after the last step and the attention weights
        (batch, steps, src_len) for the inputs y_0 .. y_{T-1} (batch, steps), y_0 = <bos>."""
        embedded = self.dropout_embed(self.embed(tgt_in))  # E y_{i-1}: (batch, steps, emb)
        if self.attention.kind == "none":
            # RNNencdec: c is the same at every step, so the recurrence needs no loop: one cuDNN call.
            # `none` reads only the query's shape: c at every step, uniform weights
            contexts, weights = self.attention(embedded, enc)  # (batch, steps, annotation)
            inputs = torch.cat([embedded, contexts], dim=-1)  # [E y_{i-1} ; c]
            outputs, hidden, cell = self.rnn.run(inputs, state.hidden, state.cell)  # s_1 .. s_T
            previous = torch.cat([state.hidden[:, -1:], outputs[:, :-1]], dim=1)  # s_0 .. s_{T-1}
        else:
            previous, contexts, weights, hidden, cell = self._recur(enc, state, embedded)
        new_state = DecoderState(hidden=hidden, cell=cell)
        # Deep output (A.2.2): t~_i = U_o s_{i-1} + V_o E y_{i-1} + C_o c_i for all steps in one matmul.
        t_tilde = self.maxout(torch.cat([previous, embedded, contexts], dim=-1))  # (batch, steps, 2 * maxout)
        t = t_tilde.unflatten(-1, (-1, 2)).amax(dim=-1)  # t_i,j = max(t~_i,2j-1, t~_i,2j)
        return t, new_state, weights  # p(y_i) = softmax(W_o t_i): Seq2Seq.logits

    def _recur(
        self, enc: EncoderOutput, state: DecoderState, embedded: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
        """The time loop: attention from s_{i-1}, then s_i. Returns the stacked s_{i-1}, c_i, alpha_i and
        the final hidden and cell states."""
        static_gates = self.rnn.project_static(embedded)  # W E y_{i-1} + b for every i: (batch, steps, gates)
        if fused.used(self, enc, state):  # training: backward by hand
            s0 = state.hidden[:, 0]
            previous, contexts, weights, s = fused.attentive_gru(
                self, enc.keys, enc.annotations, enc.mask, static_gates, s0
            )
            return previous, contexts, weights, s.unsqueeze(1), None
        rnn_weights = self.rnn.step_weights()
        static_gates = static_gates.unbind(1)  # one (batch, gates) tensor per step: one backward op, not T
        hidden = list(state.hidden.unbind(1))
        cell = list(state.cell.unbind(1)) if state.cell is not None else None
        previous, contexts, weights = [], [], []
        for gates in static_gates:
            s_prev = hidden[-1]  # the top layer's s_{i-1}: (batch, hid)
            context, alpha = self.attention(s_prev.unsqueeze(1), enc)  # alpha_ij, c_i: eqs. (5), (6)
            _, hidden, cell = self.rnn.step(rnn_weights, gates, context.squeeze(1), hidden, cell)  # s_i
            previous.append(s_prev)
            contexts.append(context)
            weights.append(alpha)
        stacked_cell = torch.stack(cell, dim=1) if cell is not None else None
        return (
            torch.stack(previous, dim=1),  # (batch, steps, hid)
            torch.cat(contexts, dim=1),  # (batch, steps, annotation)
            torch.cat(weights, dim=1),  # (batch, steps, src_len)
            torch.stack(hidden, dim=1),  # (batch, layers, hid)
            stacked_cell,
        )


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
        self.embed = nn.Embedding(vocab_size, emb, padding_idx=PAD)
        self.attention = Attention(cfg.attention, hid, annotation_size, cfg.attention_dim)
        self.init = InitialState(cfg, annotation_size, feed_size=feed)
        self.rnn = RecurrentStack(cfg.cell, emb, feed, hid, cfg.decoder_layers, cfg.dropout_hidden)
        self.combine = nn.Linear(annotation_size + hid, hid)  # W_c
        self.output = nn.Linear(hid, vocab_size)  # W_s
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
            attentional, weights, new_state = self._recur(enc, state, embedded)
        return attentional, new_state, weights  # p(y_t) = softmax(W_s h~_t): Seq2Seq.logits

    def attentional(self, context: Tensor, h: Tensor) -> Tensor:
        return torch.tanh(self.combine(torch.cat([context, h], dim=-1)))  # h~_t = tanh(W_c [c_t ; h_t])

    def _recur(
        self, enc: EncoderOutput, state: DecoderState, embedded: Tensor
    ) -> tuple[Tensor, Tensor, DecoderState]:
        """The input-feeding time loop: RNN step, then attention from h_t, then h~_t fed to the next step."""
        static_gates = self.rnn.project_static(embedded)  # W E y_{t-1} + b for every t: (batch, steps, gates)
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
