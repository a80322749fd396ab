"""What flows between encoder, decoder and search: two small dataclasses of batch-first tensors.

Beam search expands each sentence's decoder state into k rows (its encoder output stays one row: attention
reads it for all k beams), reorders rows after every step and drops finished sentences; `index_select`
along the batch dimension does all three, so every tensor here keeps batch as dim 0.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from torch import Tensor

T = TypeVar("T")


def tensor_fields(obj: Any) -> dict[str, Tensor]:
    """The tensor fields of dataclass `obj` by name, None fields left out."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if getattr(obj, f.name) is not None}


def index_select_batch(obj: T, index: Tensor) -> T:
    """A copy of dataclass `obj` with rows `index` of each tensor field (None fields stay None)."""
    rows = {name: t.index_select(0, index) for name, t in tensor_fields(obj).items()}
    return dataclasses.replace(obj, **rows)


@dataclass
class EncoderOutput:
    """The encoded source, plus everything attention needs that does not depend on the decoder state.

    annotations: h_j = [fwd h_j ; bwd h_j], (batch, src_len, annotation_size); zeros at padding.
    mask: (batch, src_len) bool, True at real tokens.
    final: (batch, annotation_size) the last state of each direction, [fwd h_T ; bwd h_1] (top layer).
    keys: the attention keys computed once per batch (U_a h_j for additive scores, W_a h_j for `general`,
          the annotations themselves for `dot`); None for attention `none`.
    context: the fixed context c = tanh(V [fwd h_T ; bwd h_1]) of attention `none` (batch, annotation_size);
             None otherwise.
    coverage_source: what a coverage model's update reads of each source word (coverage.py `prepare`),
             (batch, src_len, ...); None without one.
    """

    annotations: Tensor
    mask: Tensor
    final: Tensor
    keys: Tensor | None = None
    context: Tensor | None = None
    coverage_source: Tensor | None = None

    def index_select(self, index: Tensor) -> EncoderOutput:
        return index_select_batch(self, index)


@dataclass
class DecoderState:
    """The recurrent state after some target prefix.

    hidden: (batch, decoder_layers, decoder_hidden) s_{i-1} (RNNsearch) or h_{t-1} (Luong) of each layer.
    cell: (batch, decoder_layers, decoder_hidden) LSTM memory cells; None for GRU.
    feed: what the next step's recurrence reads from the previous step's attention: Luong's attentional
          vector h~_{t-1} for input feeding (batch, decoder_hidden), or RNNsearch's context c_{i-1} in the
          update_then_attend order (batch, annotation_size; None before the first step); else None.
    coverage: a coverage model's C_{i-1} (coverage.py), (batch, src_len, coverage size); None without one.
    """

    hidden: Tensor
    cell: Tensor | None = None
    feed: Tensor | None = None
    coverage: Tensor | None = None

    def index_select(self, index: Tensor) -> DecoderState:
        return index_select_batch(self, index)
