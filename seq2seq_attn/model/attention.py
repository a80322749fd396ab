"""Attention: score every annotation against a decoder query, normalise over real words, average.

One module, one interface, selected by `model.attention`:
- `bahdanau` (additive, Bahdanau et al. 2014, eq. 6 and Appendix A.1.2): e_ij = v_a^T tanh(W_a s + U_a h_j).
  With a coverage model (coverage.py, Tu et al. 2016) a third term reads each word's coverage:
  e_ij = v_a^T tanh(W_a s + U_a h_j + V_a C_{i-1,j}).
- `concat` (Luong et al. 2015, eq. 8): v_a^T tanh(W_a [h_t ; h_j]), the same additive score written with
  one matrix over the concatenation, so it shares `bahdanau`'s code (W_a [h_t ; h_j] = W_1 h_t + W_2 h_j).
- `general` (Luong): h_t^T W_a h_j.   `dot` (Luong): h_t^T h_j (query and annotation sizes must match).
- `none`: no attention, the RNNencdec baseline: one fixed context c for every step, from the encoder's last
  state h_T (= [fwd h_T ; bwd h_1] for a bidirectional encoder): c = tanh(V h_T) as in Cho et al. 2014
  (arXiv 1406.1078, `model.fixed_context: projected`) or c = h_T as in Bahdanau et al.'s RNNencdec
  (`last_state`).

Which state is the query (s_{i-1} before the RNN update in RNNsearch, h_t after it in Luong) is the decoder's
business. The key side (U_a h_j, W_a h_j) does not depend on the decoder, so `prepare` computes it once per
batch and beam search reuses it for every beam and step.

Weights: alpha_ij = softmax_j(e_ij) over real source positions only; padding gets exactly 0 (its score is
-inf before the softmax). With `none` the returned weights are uniform over the real positions (1 / length),
so every scorer's rows sum to 1; they carry no alignment information.
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import os
import tempfile
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path

import torch
from torch import Tensor, nn

from .states import EncoderOutput

ADDITIVE = ("bahdanau", "concat")


# A search's own decode.compile, for the searches of the thread that set it (None: each module's `compiled`)
_search_compiled: ContextVar[bool | None] = ContextVar("search_compiled", default=None)


@contextlib.contextmanager
def compiled_in_this_thread(enabled: bool) -> Iterator[None]:
    """Searches run in this context (this thread) run the additive attention compiled or not, as `enabled`
    says, whatever the modules' own `compiled`: a model shared by threads that search with other settings
    (a server's batches, the API's n-best beside its greedy translations) keeps each search's choice, where
    setting the module's flag would change it under the others' feet."""
    token = _search_compiled.set(enabled)
    try:
        yield
    finally:
        _search_compiled.reset(token)


class Attention(nn.Module):
    def __init__(
        self,
        kind: str,
        query_size: int,
        annotation_size: int,
        attention_dim: int,
        fixed_context: str = "projected",
        coverage_size: int = 0,
    ) -> None:
        super().__init__()
        self.kind = kind
        # V_a, for an additive score that reads a coverage vector of `coverage_size` units per source word
        self.coverage_proj = nn.Linear(coverage_size, attention_dim, bias=False) if coverage_size else None
        self.compiled = False  # run the additive score's elementwise work compiled, see `kernel`
        if kind == "none":  # V in c = tanh(V h_T); none for c = h_T
            projected = fixed_context == "projected"
            self.summary_proj = nn.Linear(annotation_size, annotation_size) if projected else None
        elif kind in ADDITIVE:
            self.key_proj = nn.Linear(annotation_size, attention_dim)  # U_a h_j (+ the score's one bias)
            self.query_proj = nn.Linear(query_size, attention_dim, bias=False)  # W_a s_{i-1}
            self.v = nn.Parameter(torch.empty(attention_dim))  # v_a
            nn.init.uniform_(self.v, -(attention_dim**-0.5), attention_dim**-0.5)  # nn.Linear's default
        elif kind == "general":
            # h_t^T W_a h_j; a bias would add the same h_t^T b to every j, which the softmax ignores.
            self.key_proj = nn.Linear(annotation_size, query_size, bias=False)
        elif kind == "dot":
            if query_size != annotation_size:
                raise ValueError(f"dot attention: query size {query_size} != annotations {annotation_size}")
        else:
            raise ValueError(f"unknown attention {kind!r}")

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}"

    def prepare(self, annotations: Tensor, final: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """Keys (batch, src_len, key_size) and, for `none`, the fixed context (batch, annotation_size)."""
        if self.kind == "none":
            if self.summary_proj is None:
                return None, final  # c = h_T
            return None, torch.tanh(self.summary_proj(final))  # c = tanh(V h_T)
        if self.kind == "dot":
            return annotations, None
        return self.key_proj(annotations), None

    def forward(
        self, query: Tensor, enc: EncoderOutput, coverage: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Contexts (rows, steps, annotation_size) and weights (rows, steps, src_len) for queries
        (rows, steps, query_size): one row per decoder step, all steps at once when they are known.

        rows is the batch, or a multiple of it: in beam search each sentence's k consecutive rows are its
        beams, and they read the sentence's annotations and keys as k more queries, so those are stored and
        read once per sentence rather than once per beam. A coverage model's C_{i-1} (rows, src_len, size)
        is per row, for one step at a time (steps = 1).
        """
        rows, steps = query.shape[:2]
        batch = enc.mask.size(0)
        query = query.reshape(batch, -1, query.size(-1))  # (batch, beams * steps, query_size)
        if coverage is not None:  # V_a C_{i-1,j}: (batch, beams, src_len, dim)
            coverage = self.coverage_proj(coverage).view(batch, query.size(1), coverage.size(1), -1)
        context, weights = self._attend(query, enc, coverage)
        return context.reshape(rows, steps, -1), weights.reshape(rows, steps, -1)

    @property
    def runs_compiled(self) -> bool:
        """Whether the additive score runs compiled now: this thread's search's choice, else `compiled`."""
        chosen = _search_compiled.get()
        return self.compiled if chosen is None else chosen

    def _attend(self, query: Tensor, enc: EncoderOutput, coverage: Tensor | None) -> tuple[Tensor, Tensor]:
        """forward's work for queries (batch, queries, query_size) of the batch's own sentences."""
        if self.kind == "none":
            queries = query.size(1)
            context = enc.context.unsqueeze(1).expand(-1, queries, -1)
            return context, uniform_weights(enc.mask, queries)
        if self.kind in ADDITIVE:
            query = self.query_proj(query)  # W_a s
        dtype = enc.annotations.dtype  # attention's own dtype, chosen at encoding (device.attention_dtype)
        with torch.autocast(query.device.type, enabled=False):
            query = query.to(dtype)
            if self.kind in ADDITIVE:
                attend = kernel(additive_attention, self.runs_compiled)
                coverage = None if coverage is None else coverage.to(dtype)
                return attend(query, enc.keys, self.v.to(dtype), enc.mask, enc.annotations, coverage)
            return dot_attention(query, enc.keys, enc.mask, enc.annotations)  # dot, general


def kernel(function: Callable, compiled: bool) -> Callable:
    """`function`, or when `compiled` its torch.compile'd copy (one per process, for all shapes).

    Why: the additive score is several full passes over (batch, queries, src_len, dim) per decoder step in
    eager PyTorch (add, sigmoid, the v_a product; six more for its gradient); compiled, each becomes one
    loop that reads the keys once. Opt-in (`train.compile`, `decode.compile`): compiling takes seconds and
    needs a C++ compiler on a CPU (Triton on a GPU).
    """
    return _compiled(function) if compiled else function


@functools.cache
def _compiled(function: Callable) -> Callable:
    separate_kernel_cache()
    return torch.compile(function, dynamic=True)


INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"  # where torch.compile keeps the kernels it built


def separate_kernel_cache() -> None:
    """One torch.compile kernel cache per ATen CPU capability (`default`, `avx2`, `avx512`, ...).

    Why: the cache does not tell them apart. Kernels built under one capability were reused under another
    on the same machine (torch 2.13, ATEN_CPU_CAPABILITY set differently from run to run), and there they
    failed to build or, worse, computed wrong numbers (NaN gradients). A folder the user set is kept; torch's
    own default, which importing torch._dynamo (as an optimiser does) writes into the variable, is not."""
    root = Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"
    chosen = os.environ.get(INDUCTOR_CACHE)
    if chosen and Path(chosen) != root:
        return
    os.environ[INDUCTOR_CACHE] = str(root / torch.backends.cpu.get_cpu_capability().lower())


def additive_attention(
    query: Tensor, keys: Tensor, v: Tensor, mask: Tensor, annotations: Tensor, coverage: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Contexts (batch, queries, annotation) and weights (batch, queries, src_len) of the additive score
    for projected queries W_a s (batch, queries, dim) and, with a coverage model, V_a C (batch, queries,
    src_len, dim); all in the annotations' dtype (the weights in fp32 at least)."""
    return weighted_sum(masked_softmax(additive_scores(query, keys, v, coverage), mask), annotations)


def dot_attention(query: Tensor, keys: Tensor, mask: Tensor, annotations: Tensor) -> tuple[Tensor, Tensor]:
    """Contexts and weights, as `additive_attention`, of the score e_ij = h_t^T k_j for queries h_t
    (batch, queries, dim) and keys k_j = W_a h_j (`general`) or h_j (`dot`) (batch, src_len, dim)."""
    return weighted_sum(masked_softmax(torch.bmm(query, keys.transpose(1, 2)), mask), annotations)


def weighted_sum(weights: Tensor, annotations: Tensor) -> tuple[Tensor, Tensor]:
    """c_i = sum_j alpha_ij h_j (batch, queries, annotation), and the weights alpha themselves."""
    return torch.bmm(weights.to(annotations.dtype), annotations), weights


def additive_scores(query: Tensor, keys: Tensor, v: Tensor, coverage: Tensor | None = None) -> Tensor:
    """e_ij = v_a^T tanh(W_a s_i + U_a h_j [+ V_a C_{i-1,j}]) (eq. 6; Tu et al. 2016) for projected queries
    W_a s (batch, queries, dim), keys U_a h_j + b (batch, src_len, dim) and coverage terms V_a C (batch,
    queries, src_len, dim) or None: (batch, queries, src_len)."""
    return 2 * (additive_half(query, keys, coverage) @ v) - v.sum()


def additive_half(query: Tensor, keys: Tensor, coverage: Tensor | None = None) -> Tensor:
    """sigma_ij = (1 + tanh(W_a s_i + U_a h_j [+ V_a C_{i-1,j}])) / 2 = sigmoid(2 (...)), (batch, queries,
    src_len, dim), so that e_ij = 2 v_a . sigma_ij - sum v_a.

    Written with tanh(x) = 2 sigmoid(2x) - 1: the same numbers, but PyTorch's CPU sigmoid is several times
    faster than its tanh, and this is the largest elementwise operation of training and search.
    """
    total = torch.add(2 * query.unsqueeze(2), keys.unsqueeze(1), alpha=2)
    if coverage is not None:
        total.add_(coverage, alpha=2)
    return total.sigmoid_()


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last dim of scores (batch, steps, src_len), exactly 0 where mask (batch, src_len)
    is False, in fp32 at least. Every row must have at least one real position."""
    dtype = torch.promote_types(scores.dtype, torch.float32)
    return scores.masked_fill(~mask.unsqueeze(1), float("-inf")).softmax(dim=-1, dtype=dtype)


def uniform_weights(mask: Tensor, steps: int) -> Tensor:
    """(batch, steps, src_len) rows of 1 / length over real positions: the `none` attention's weights."""
    weights = mask.float() / mask.sum(dim=1, keepdim=True)
    return weights.unsqueeze(1).expand(-1, steps, -1)
