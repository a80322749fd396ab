"""The decoder's stacked GRU / LSTM, runnable over all time steps at once or one step at a time.

Both paths use the same `nn.GRU` / `nn.LSTM` weights:
- `run` hands every time step to the library RNN in one call (cuDNN on GPU). Decoders use it whenever the
  recurrence does not depend on attention: the RNNencdec (its context is fixed) and Luong without input
  feeding.
- `step` advances one time step, for the recurrences that read what attention computed from the state
  (RNNsearch's c_i, Luong's input feeding h~_{t-1}). Layer 0's input is [static ; dynamic]: the static part
  (the target embedding E y_{i-1}) is known for every step in advance, so its gate pre-activations for all
  steps are one batched matmul before the time loop (`project_static`; in search a row lookup in a table
  of every target piece's row, `static_gates`); only the dynamic part (c_i or h~_{t-1}) and the recurrent
  term are multiplied inside the loop.

The cell arithmetic is PyTorch's (= cuDNN's): the GRU reset gate multiplies (U_n s + b_n) rather than
entering as U (r * s) as in Bahdanau et al., Appendix A.1.1 and the authors' code. They are different
functions (neither can be rewritten as the other); this form is the one the library RNNs (cuDNN, oneDNN)
run, which the encoder and the attention-free decoders use. The paper's separate input matrices W (for
E y) and C (for c) are the two column blocks of `weight_ih_l0`, which is the same linear map as one matrix
applied to the concatenated input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .device import onednn_lacks_bf16

RNN_CLASSES: dict[str, type[nn.RNNBase]] = {"gru": nn.GRU, "lstm": nn.LSTM}


def run_library(
    rnn: nn.RNNBase, inputs: Tensor, state: Tensor | tuple[Tensor, Tensor] | None = None
) -> tuple[Tensor, Tensor | tuple[Tensor, Tensor]]:
    """rnn(inputs, state); an LSTM in fp32 on a CPU under autocast where oneDNN has no bf16 kernels.

    Autocast hands the CPU LSTM's oneDNN kernel bf16 whether or not the CPU has one, and without one it
    fails ("could not create a primitive descriptor for the LSTM forward propagation primitive"). The GRU
    has no oneDNN kernel: its products run in bf16 under autocast on every CPU."""
    cpu_autocast = inputs.device.type == "cpu" and torch.is_autocast_enabled("cpu")
    if not (cpu_autocast and isinstance(rnn, nn.LSTM) and onednn_lacks_bf16()):
        return rnn(inputs, state)
    if state is not None:
        state = tuple(s.float() for s in state)
    with torch.autocast("cpu", enabled=False):
        return rnn(inputs.float(), state)


@dataclass
class LayerWeights:
    """One layer's matrices for `step`; layer 0's input matrix holds only the dynamic-input columns.
    A matrix may also be a packed product (int8.Int8Weight) holding its bias, which is then None."""

    w_ih: Tensor | Callable[[Tensor], Tensor] | None
    b_ih: Tensor | None
    w_hh: Tensor | Callable[[Tensor], Tensor]
    b_hh: Tensor | None


def product(x: Tensor, weight: Tensor | Callable[[Tensor], Tensor], bias: Tensor | None = None) -> Tensor:
    """x W^T + b: F.linear, or a packed weight's own product (its bias packed with it)."""
    return F.linear(x, weight, bias) if isinstance(weight, Tensor) else weight(x)


class RecurrentStack(nn.Module):
    def __init__(
        self,
        cell: str,
        static_size: int,
        dynamic_size: int,
        hidden_size: int,
        num_layers: int,
        dropout: float,
    ) -> None:
        super().__init__()
        self.rnn = RNN_CLASSES[cell](
            static_size + dynamic_size,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.is_lstm = cell == "lstm"
        self.static_size = static_size
        self.dynamic_size = dynamic_size
        self.num_layers = num_layers
        self.dropout = dropout if num_layers > 1 else 0.0
        # see `static_gates`: (key, table), one attribute so that threads searching at once read a pair
        self._gate_table: tuple[tuple, Tensor] | None = None
        self.int8_weights: list[LayerWeights] | None = None  # a search copy's (int8.quantized)

    def train(self, mode: bool = True) -> RecurrentStack:
        """Also forgets the gate table (`static_gates`) when the mode changes: weights that a training update
        replayed from a CUDA graph changed keep their version, so only the mode tells that they may have."""
        if mode != self.training:
            self._gate_table = None
        return super().train(mode)

    def run(
        self, inputs: Tensor, hidden: Tensor, cell: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """All steps in one library call. inputs (batch, steps, input); hidden, cell (batch, layers, hidden).

        Returns the top layer's outputs (batch, steps, hidden) and the new hidden and cell states.
        """
        if not inputs.size(1):  # no step to run (the library RNNs refuse empty sequences)
            return inputs.new_empty(inputs.size(0), 0, self.rnn.hidden_size), hidden, cell
        h0 = hidden.transpose(0, 1).contiguous()  # (layers, batch, hidden)
        if self.is_lstm:
            outputs, (h, c) = run_library(self.rnn, inputs, (h0, cell.transpose(0, 1).contiguous()))
            return outputs, h.transpose(0, 1), c.transpose(0, 1)
        outputs, h = run_library(self.rnn, inputs, h0)
        return outputs, h.transpose(0, 1), None

    def project_static(self, static: Tensor) -> Tensor:
        """Layer 0's gate pre-activations from the static input, all steps at once: W E y + b.

        static (batch, steps, static_size) -> (batch, steps, gates * hidden).
        """
        return F.linear(static, self.rnn.weight_ih_l0[:, : self.static_size], self.rnn.bias_ih_l0)

    def static_gates(self, embed: nn.Embedding, ids: Tensor, embedded: Tensor) -> Tensor:
        """`project_static(embedded)` for embedded = embed(ids), ids (batch, steps).

        Without gradients or dropout (search, scoring), W E y + b depends on the id alone, so it is read
        from a table of every id's row, (vocab, gates * hidden), made once per version of the weights: a
        row lookup instead of a matrix product at every search step."""
        if torch.is_grad_enabled() or self.training:
            return self.project_static(embedded)
        weight, bias = self.rnn.weight_ih_l0, self.rnn.bias_ih_l0
        key = tuple((t.data_ptr(), t._version) for t in (embed.weight, weight, bias))
        key += (torch.is_autocast_enabled(ids.device.type),)
        cached = self._gate_table
        if cached is None or cached[0] != key:
            cached = self._gate_table = (key, self.project_static(embed.weight))
        return F.embedding(ids, cached[1])

    def step_weights(self) -> list[LayerWeights]:
        """The matrices `step` needs, sliced once per sequence (a slice per step would cost a full-size
        gradient buffer per step in backward); int8 ones in a search copy made by int8.quantized."""
        if self.int8_weights is not None:
            return self.int8_weights
        layers = []
        for k in range(self.num_layers):
            w_ih = getattr(self.rnn, f"weight_ih_l{k}")
            b_ih = getattr(self.rnn, f"bias_ih_l{k}")
            if k == 0:  # the static columns and the bias are already in project_static's output
                w_ih = w_ih[:, self.static_size :] if self.dynamic_size else None
                b_ih = None
            w_hh = getattr(self.rnn, f"weight_hh_l{k}")
            layers.append(LayerWeights(w_ih, b_ih, w_hh, getattr(self.rnn, f"bias_hh_l{k}")))
        return layers

    def step(
        self,
        weights: list[LayerWeights],
        static_gates: Tensor,
        dynamic: Tensor | None,
        hidden: list[Tensor],
        cell: list[Tensor] | None,
    ) -> tuple[Tensor, list[Tensor], list[Tensor] | None]:
        """One time step of every layer.

        static_gates (batch, gates * hidden) from project_static; dynamic (batch, dynamic_size) or None;
        hidden, cell: one (batch, hidden) tensor per layer. Returns the top output and the new states.
        """
        new_hidden, new_cell = [], [] if cell is not None else None
        x = dynamic
        for k, w in enumerate(weights):
            if k == 0:
                gates_x = static_gates if w.w_ih is None else static_gates + product(x, w.w_ih)
            else:
                x = F.dropout(x, self.dropout, self.training)
                gates_x = product(x, w.w_ih, w.b_ih)
            gates_h = product(hidden[k], w.w_hh, w.b_hh)
            if self.is_lstm:
                h, c = lstm_update(gates_x, gates_h, cell[k])
                new_cell.append(c)
            else:
                h = gru_update(gates_x, gates_h, hidden[k])
            new_hidden.append(h)
            x = h
        return x, new_hidden, new_cell


def gru_update(gates_x: Tensor, gates_h: Tensor, h: Tensor) -> Tensor:
    """h' = (1 - z) * n + z * h."""
    _, z, n = gru_gates(gates_x, gates_h)
    return n + z * (h - n)


def gru_gates(gates_x: Tensor, gates_h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z); n = tanh(x_n + r * h_n)."""
    x_r, x_z, x_n = gates_x.chunk(3, dim=-1)
    h_r, h_z, h_n = gates_h.chunk(3, dim=-1)
    r = torch.sigmoid(x_r + h_r)
    z = torch.sigmoid(x_z + h_z)
    return r, z, torch.tanh(x_n + r * h_n)


def lstm_update(gates_x: Tensor, gates_h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """c' = f * c + i * g, h' = o * tanh(c') with PyTorch's gate order i, f, g, o."""
    i, f, g, o = (gates_x + gates_h).chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c
