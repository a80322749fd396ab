"""The search's decoder step replayed from CUDA graphs (`decode.cuda_graphs`): one graph per shape,
captured during one call to `translate_ids`, replayed for every later step of that shape in the call.

Why: on a GPU a search step of these models is bound by launching kernels, not by arithmetic (the
recurrence's gates, attention, the deep output, the output layer's softmax: some dozens of small kernels
per target word, docs/gpu.md). A replayed graph launches all of a step's kernels with one call. Only the
model's step is captured; what the search does between steps (top-k, finished hypotheses, dropping the
sentences that are done) reads values on the host and stays as it is.

The shapes. A graph replays fixed shapes, while a batch's rows shrink as its sentences finish
(`search.drop_done`), so:
- the source: each batch's source ids come padded to a multiple of 8 pieces (`pad_sources`, `graphed`),
  before encoding; the search masks those positions as it masks any padding;
- the sentences still searching: rounded up to one of 4 sizes per doubling (`padded_sentences`: 80 stays
  80), and held there while more than half of them still search (`StepGraphs._sentences`), each with its k
  beam rows; a padding row holds a copy of real rows' encoder output and state, so it computes finite
  numbers, and nothing reads what it computes.
One graph serves each (beam rows, sentences, source width, state fields and their dtypes): a decoder whose
state feeds the previous context (`DecoderState.feed`) has none before its first step, and in bf16 the
first state (from autocast's products) can be bf16 where the steps return fp32.

What a graph holds fixed: the addresses of its buffers (a step's encoder output, state and previous tokens
are copied into its shape's buffers before each replay; the encoder output only when the search has a new
one) and those of the tensors the model reads, its weights and the gate table it derives from them
(model/recurrent.py `static_gates`). Neither changes within one call, whose graphs end with it. A step's
first run at a new shape is eager (the capture's warm-up, on the stream the capture then uses) and its
results are used; autocast's cache of cast weights is off inside (a cast cached outside a capture would
be read by the graph after autocast freed it).

Memory: each shape keeps its outputs for the call, the log-probabilities (rows x vocabulary) the largest.

Where no graph is used (`auto` leaves them off, `on` is an error): on a CPU; for an ensemble or with a
lexical shortlist, whose steps read per-batch tables the graphs would not see change. `auto` also leaves
them off in a search of fewer than GRAPH_AUTO_SENTENCES sentences (config/schema.py), such as a server's
micro-batch. The compiled attention (`decode.compile`) compiles during a shape's warm-up and is captured
with the rest.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..config.schema import GRAPH_AUTO_SENTENCES
from ..model import DecoderState, EncoderOutput, Seq2Seq
from ..model.device import captures
from ..model.states import tensor_fields
from ..vocab.batching import graph_rows

T = TypeVar("T")


def uses_step_graphs(cfg: DecodeConfig, model: Any, device: torch.device, sentences: int) -> bool:
    """Whether a search of `sentences` replays `model`'s step from CUDA graphs (`decode.cuda_graphs`,
    module docstring): `auto` only for calls of at least GRAPH_AUTO_SENTENCES."""
    graphed = captures(cfg.cuda_graphs, "decode.cuda_graphs", _obstacle(model, device))
    return graphed and (cfg.cuda_graphs == "on" or sentences >= GRAPH_AUTO_SENTENCES)


def _obstacle(model: Any, device: torch.device) -> str | None:
    if device.type != "cuda":
        return f"search runs on the {device.type}, not on a CUDA device"
    if not isinstance(model, Seq2Seq):
        return f"search runs a {type(model).__name__} (an ensemble or a lexical shortlist), not one model"
    return None


def padded_sentences(sentences: int) -> int:
    """The sentences a step's graph holds for `sentences` still searching: one of 4 sizes per doubling."""
    return graph_rows(sentences, 4)


def first_rows(obj: T, rows: int) -> T:
    """`obj` with only the first `rows` rows of each tensor (views)."""
    return dataclasses.replace(obj, **{name: t[:rows] for name, t in tensor_fields(obj).items()})


def copy_rows(buffers: Any, values: Any) -> None:
    """The rows of `values`' tensors into the first rows of `buffers`' (a dataclass of the same fields)."""
    for name, t in tensor_fields(values).items():
        getattr(buffers, name)[: t.size(0)].copy_(t, non_blocking=True)


def padding_index(rows: int, padded: int, device: torch.device) -> Tensor:
    """rows 0 ... rows - 1, then row 0 again up to `padded` rows."""
    return torch.cat(
        [torch.arange(rows, device=device), torch.zeros(padded - rows, dtype=torch.long, device=device)]
    )


@dataclasses.dataclass(eq=False)
class _Slot:
    """One shape's buffers and, once captured, its graph and the outputs it writes."""

    enc: EncoderOutput  # (sentences, ...): the encoder output the step reads
    state: DecoderState  # (rows, ...)
    y_prev: Tensor  # (rows,)
    source: EncoderOutput  # the search's encoder output the buffers hold (its first rows)
    graph: torch.cuda.CUDAGraph | None = None
    outputs: tuple[Tensor, DecoderState, Tensor] | None = None


class StepGraphs:
    """A search model (search.SearchModel) that is `model`, its step run on padded buffers and, on a CUDA
    device, replayed from one graph per shape (module docstring). On a CPU every step runs eagerly on the
    same buffers, so that tests can compare it with `model` anywhere. One per call to `translate_ids`."""

    def __init__(self, model: Seq2Seq) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.capture = self.device.type == "cuda"
        self.stream = torch.cuda.Stream(self.device) if self.capture else None  # warm-ups and captures
        self.pool = None  # the graphs' shared memory pool, from the first capture
        self.slots: dict[tuple, _Slot] = {}
        self.held = 0  # the sentences the current batch's steps are padded to

    @property
    def training(self) -> bool:
        return self.model.training

    def eval(self) -> StepGraphs:
        self.model.eval()
        return self

    def train(self, mode: bool = True) -> StepGraphs:
        self.model.train(mode)
        return self

    def encode(self, src: Tensor, src_lengths: Tensor) -> EncoderOutput:
        self.held = 0  # a new batch: its sentences are padded afresh (`_sentences`)
        return self.model.encode(src, src_lengths)

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        return self.model.init_state(enc)

    def __len__(self) -> int:
        """Graphs captured so far."""
        return sum(slot.graph is not None for slot in self.slots.values())

    def step(
        self, enc: EncoderOutput, state: DecoderState, y_prev: Tensor
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """`model.step` for rows (sentences * k) of the search: log-probabilities (rows, vocab), the next
        state and the attention weights (rows, src_len), views of the shape's outputs that the next step
        overwrites (the search reads them, and copies what it keeps, before its next step)."""
        rows, sentences = y_prev.size(0), enc.mask.size(0)
        slot = self._load(enc, state, y_prev, self._sentences(sentences))
        if slot.graph is not None:
            slot.graph.replay()
            log_probs, next_state, weights = slot.outputs
        else:
            log_probs, next_state, weights = self._eager(slot)  # this step, and the capture's warm-up
            if self.capture:
                self._capture(slot)
        return log_probs[:rows], first_rows(next_state, rows), weights[:rows]

    def _sentences(self, sentences: int) -> int:
        """The sentences the step's graph holds: as many as the batch's steps held so far while more than
        half of those still search, else `padded_sentences`. So a batch meets a few shapes (80, 40, 20, ...),
        each replayed for many steps, rather than a new one whenever a sentence ends; padding rows cost the
        launch-bound GPU little."""
        if not self.held // 2 < sentences <= self.held:
            self.held = padded_sentences(sentences)
        return self.held

    def _load(self, enc: EncoderOutput, state: DecoderState, y_prev: Tensor, sentences: int) -> _Slot:
        """The buffers of the step's shape, holding `enc`, `state` and `y_prev` in their first rows."""
        rows = y_prev.size(0) // enc.mask.size(0) * sentences
        key = (
            rows,
            sentences,
            enc.mask.size(1),
            tuple((name, t.dtype) for name, t in tensor_fields(state).items()),
        )
        slot = self.slots.get(key)
        if slot is None:  # copies of the real rows, the first repeated as padding
            beam_rows = padding_index(y_prev.size(0), rows, self.device)
            slot = self.slots[key] = _Slot(
                enc.index_select(padding_index(enc.mask.size(0), sentences, self.device)),
                state.index_select(beam_rows),
                y_prev.index_select(0, beam_rows),
                enc,
            )
            return slot
        if slot.source is not enc:
            copy_rows(slot.enc, enc)
            slot.source = enc
        copy_rows(slot.state, state)
        slot.y_prev[: y_prev.size(0)].copy_(y_prev, non_blocking=True)
        return slot

    def _run(self, slot: _Slot) -> tuple[Tensor, DecoderState, Tensor]:
        """The model's step on the slot's buffers, autocast as outside but without its cache (module doc)."""
        kind = self.device.type
        autocast = torch.is_autocast_enabled(kind)
        with torch.autocast(kind, torch.get_autocast_dtype(kind), enabled=autocast, cache_enabled=False):
            return self.model.step(slot.enc, slot.state, slot.y_prev)

    def _eager(self, slot: _Slot) -> tuple[Tensor, DecoderState, Tensor]:
        if not self.capture:
            return self._run(slot)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            outputs = self._run(slot)
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        return outputs

    def _capture(self, slot: _Slot) -> None:
        """Record the shape's step into a graph (which runs nothing now: this step is done)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream, capture_error_mode="thread_local"):
            slot.outputs = self._run(slot)
        self.pool = self.pool or graph.pool()
        slot.graph = graph
