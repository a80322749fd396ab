"""Batched beam search over (sentences x beams) in one tensor; greedy search is beam size 1.

The source is encoded once; its annotations and precomputed attention keys are kept once per sentence
(the k beams of a sentence are k queries against them) and reused at every step. Each step scores all
k * V continuations of every sentence at once.

Beams shrink as in the RNNsearch authors' GroundHog (experiments/nmt/sample.py) and its successors dl4mt /
Nematus: a hypothesis that ends (emits EOS) leaves the beam and takes its slot with it, so a sentence that
has finished f hypotheses keeps k - f open ones. Hence beam 1 is exactly greedy search (the same code, not
a separate function), and every sentence ends with at most k finished hypotheses, so nbest <= beam.
GroundHog's length rules are options here: its minimum length (no EOS before half the source length) is
`min_len_a: 0.5`; at its maximum length (3 (n + 1) steps, `max_len_a: 3`, `max_len_b: 2`) it dropped
the open hypotheses and searched a sentence none of whose hypotheses had ended again with a doubled beam,
while the beam was under 500 (`at_max_len: retry`; the default, `force_eos`, forces EOS there so that
every sentence ends in one search). With `no_unk` (Table 1's "no UNK" column) <unk> is never generated,
and a sentence that finds nothing without it is searched again with it, at the same beam, as GroundHog
did (`search_with_retries`). What still differs: it searched one sentence at a time, and ran every
sentence to its maximum length, where ours stops a sentence once no open hypothesis can still win (with
`length_penalty: none`, as it used, that gives the same result).

Stopping: a sentence stops when it has no open hypothesis left, when it reaches its maximum length (EOS is
forced there), or, once it has `nbest` finished hypotheses, by the `stopping` rule, `bound` or `top`
(docs/model.md, "When search stops"; `score_bound`, `_is_done`). A stopped sentence leaves the batch: its
rows are dropped from the encoder output and the decoder state, so the remaining work shrinks.

Scores: the log-probability of a hypothesis is the sum over its tokens and its EOS; its length L counts
the tokens plus EOS. The score used for ranking is log p / lp(L) with lp = 1 (`none`), L (`average`) or
((5 + L) / 6)^alpha (`gnmt`, Wu et al. 2016, eq. 14), plus, with `decode.coverage_penalty` beta > 0, the
coverage penalty of the same equation, cp = beta * sum_j log(min(c_j, 1)): c_j, the attention all the
hypothesis' steps (its EOS included) paid source piece j (the source EOS not counted), so a translation
that leaves source pieces unattended scores lower (c_j is floored at COVERAGE_FLOOR, so an unattended
piece costs beta * log(COVERAGE_FLOOR), not minus infinity). cp <= 0, so it lowers no bound
(`score_bound`). The search keeps these sums itself (`Beams.attended`), from the weights the model
returns; a model with a coverage model of its own (`model.coverage`, model/coverage.py) keeps its
coverage vectors in its decoder state, which steer those weights. The two combine: the penalty rescores
whatever attention the model paid, steered or not.

Batch invariance: nothing in a sentence's search reads another sentence's rows: constraints, top-k,
stopping and scores are per row; padding is masked by the model. Within a sentence, ties in top-k are
resolved by the values of that sentence's row alone.

The model: the search calls it only through `SearchModel` (below): `encode` once per batch, `init_state`,
then `step` per output token, and `index_select` on what they return. `Seq2Seq` (model/seq2seq.py),
`Ensemble` (ensemble.py) and `Shortlisted` (shortlist.py) answer it, and so do their int8 search copies
(int8.py: the same classes with int8 layers); tests/test_search.py checks all of them against it.

Between steps: a search calls the hook that `between_steps` set for its thread, if any, before each step
(and a forced pass before each batch, forced.py). A server's searches take turns there (serving/turns.py:
the hook waits while another search computes) or stop (the hook raises, and the search ends with its
exception): nothing else of the search changes.

Ensembles are searched by this same code: an `Ensemble` answers `encode`, `init_state` and `step` as one
model does. When its models read different source vocabularies, the source tensor holds
each model's ids, (batch, models, src_len) (`translate_ids`'s `other_src_ids`), and the lengths that
bound the search are the first model's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor, nn

from ..config import DecodeConfig
from ..model.device import decode_precision
from ..vocab.batching import graph_length
from ..vocab.pieces import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from .graphs import StepGraphs, uses_step_graphs

if TYPE_CHECKING:
    from ..model import DecoderState, EncoderOutput

NEG_INF = float("-inf")
FORBIDDEN = (PAD_ID, BOS_ID)  # never a next token
TOPK_BLOCK = 32  # tokens per block in `top_candidates`
RETRY_BEAM_LIMIT = 500  # GroundHog doubles the beam of a sentence with no translation while under this
COVERAGE_FLOOR = 1e-6  # the least coverage a source piece counts with in the coverage penalty
_between_steps: ContextVar[Callable[[], None] | None] = ContextVar("between_steps", default=None)


@contextlib.contextmanager
def between_steps(hook: Callable[[], None]) -> Iterator[None]:
    """Every search run in this context (this thread) calls `hook()` before each of its steps: it may
    wait there, or raise to stop the search (module docstring)."""
    token = _between_steps.set(hook)
    try:
        yield
    finally:
        _between_steps.reset(token)


def hook_between_steps() -> Callable[[], None] | None:
    """The hook `between_steps` set for this thread (None: none)."""
    return _between_steps.get()


@runtime_checkable
class Rows(Protocol):
    """What a search model's encoder output and decoder state are to the search: rows (one per
    hypothesis) it can take again in any order, repeat or drop."""

    def index_select(self, index: Tensor) -> Any:
        """A copy holding rows `index` (1-D) of every tensor."""
        ...


@runtime_checkable
class SearchModel(Protocol):
    """What beam search calls a model through (module docstring). `encode` and `init_state` return
    `Rows`; `step` gives the log-probabilities of the next token (rows, vocab), the next state and the
    attention weights (rows, src_len). `eval` and `train` set the mode (search runs in eval mode)."""

    training: bool

    def encode(self, src: Tensor, src_lengths: Tensor) -> Any:
        """src (batch, src_len) ids, or (batch, models, src_len) for an ensemble; src_lengths (batch,)."""
        ...

    def init_state(self, enc: Any) -> Any:
        """The decoder's first state, one row per sentence."""
        ...

    def step(self, enc: Any, state: Any, y_prev: Tensor) -> tuple[Tensor, Any, Tensor]:
        """One output token for every row: y_prev (rows,) the previous tokens."""
        ...

    def eval(self) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...


@dataclass
class Hypothesis:
    """One translation of one sentence.

    tokens: target ids without BOS / EOS. score: the normalised score used for ranking. log_prob: the sum
    of the token and EOS log-probabilities. attention: (len(tokens) + 1, src_len + 1) weights, one row per
    target token and EOS, one column per source token and the source EOS; None unless requested.
    """

    tokens: list[int]
    score: float
    log_prob: float
    attention: np.ndarray | None = None


def length_penalty(length: int, kind: str, alpha: float) -> float:
    """The divisor lp(L) of a hypothesis' log-probability; L counts its tokens plus EOS."""
    if kind == "none":
        return 1.0
    if kind == "average":
        return float(length)
    return ((5.0 + length) / 6.0) ** alpha  # GNMT, Wu et al. 2016, eq. 14


def times_length(rate: float, src_len: int) -> Fraction:
    """rate * src_len with `rate` the decimal the config wrote (its float's shortest form), exactly: in
    floats 1.1 * 50 is 55.00000000000001 and 0.29 * 100 is 28.999999999999996, a token off once rounded."""
    return Fraction(repr(float(rate))) * src_len


def max_output_length(src_len: int, cfg: DecodeConfig) -> int:
    """Most target tokens (EOS not counted) for a source of `src_len` tokens (its EOS not counted)."""
    return math.floor(times_length(cfg.max_len_a, src_len)) + cfg.max_len_b


def min_output_length(src_len: int, cfg: DecodeConfig) -> int:
    """Fewest target tokens before EOS is allowed, for a source of `src_len` tokens (its EOS not counted).

    With min_len_a = 0.5 this is GroundHog's rule (EOS forbidden at steps k < (src_len + 1) // 2, its
    source length counting the EOS), since ceil(n / 2) = (n + 1) // 2.
    """
    return max(cfg.min_len, math.ceil(times_length(cfg.min_len_a, src_len)))


def score_bound(open_log_prob: float, max_len: int, cfg: DecodeConfig) -> float:
    """The best normalised score any completion of an open hypothesis can still reach.

    Why this is sound for every normalisation: log-probabilities are <= 0, so a completion's log p' is
    <= the open hypothesis' log p <= 0, and its length L' is at most max_len + 1 (EOS included). Its score
    log p' / lp(L') is therefore <= log p / lp(L'), and since lp is positive and non-decreasing in L and
    log p <= 0, that is largest for the largest lp, i.e. L' = max_len + 1. A shorter bound would be wrong:
    with `average` or `gnmt` a hypothesis' normalised score can still rise as it grows (log p falls by
    less than lp grows), so only the longest possible length bounds it.

    With the coverage penalty, a completion's cp is at most 0 (full coverage), so the bound adds 0.
    """
    return open_log_prob / length_penalty(max_len + 1, cfg.length_penalty, cfg.alpha) + 0.0  # + max cp


def coverage_penalty(coverage: Tensor, src_len: int, beta: float) -> float:
    """beta * sum_j log(min(c_j, 1)) over the first `src_len` source pieces (module docstring); coverage
    (src_len + 1 or more,): the attention summed over a hypothesis' steps."""
    if not beta:
        return 0.0
    covered = coverage[:src_len].clamp(min=COVERAGE_FLOOR, max=1.0)
    return beta * float(covered.log().sum())


@dataclass
class Beams:
    """The search state of a batch: k rows (beam slots) per sentence still searching.

    Rows are sentence-major: sentence a's slots are rows a*k ... a*k + k - 1. `alive[a]` is the input
    index of the a-th sentence still searching; `finished[i]` the ended hypotheses of input sentence i.
    """

    k: int
    enc: EncoderOutput  # one row per sentence still searching (its beams share it); ensembles: per model
    state: DecoderState  # (rows, ...); ensembles: one per model
    log_p: Tensor  # (sentences, k) log p of each open hypothesis; -inf marks an empty slot
    tokens: Tensor  # (rows, step) the hypotheses so far
    history: Tensor | None  # (rows, step, src_len) their attention, when asked for
    attended: Tensor | None  # (rows, src_len) their attention summed over the steps, for the coverage penalty
    y_prev: Tensor  # (rows,) the last token of each hypothesis
    max_len_rows: Tensor  # (rows,) each row's maximum output length
    min_len_rows: Tensor  # (rows,) each row's minimum output length
    forbidden: Tensor  # the FORBIDDEN ids (and <unk> with `no_unk`), on the search's device
    alive: list[int]
    finished: list[list[Hypothesis]]


@dataclass
class Candidates:
    """The k best continuations of each sentence at one step, best first: (sentences, k) each."""

    log_p: Tensor  # their log-probabilities
    token: Tensor  # the token each appends
    source_row: Tensor  # the row (hypothesis) each extends
    ends: Tensor  # True where a taken candidate is EOS: a hypothesis that ends here
    open: Tensor  # True where a taken candidate stays open


@torch.no_grad()
def beam_search(
    model: SearchModel, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig, with_attention: bool = False
) -> list[list[Hypothesis]]:
    """The `cfg.nbest` best hypotheses of each sentence, best first, in one search: a sentence with no
    hypothesis that ended within its length limit (only with `at_max_len: retry`) gets none.

    src: (batch, src_len) source ids, each sentence ending in EOS, padded with PAD, or an ensemble's
    (batch, models, src_len), one row per model (`pad_sources`). src_lengths: (batch,) including that EOS,
    the first model's for an ensemble: they set the length bounds. The model must be in eval mode (see
    `translate_ids`). Each step: score every continuation, keep each sentence's best
    (`best_continuations`), move the ended ones to `finished` (`record_finished`), let the sentences that
    are done leave the batch (`drop_done`), and extend the open hypotheses (`advance`).
    """
    src_lens = [n - 1 for n in src_lengths.tolist()]  # without the source EOS
    max_lens = [max_output_length(n, cfg) for n in src_lens]
    min_lens = [min_output_length(n, cfg) for n in src_lens]
    forbidden = FORBIDDEN + ((UNK_ID,) if cfg.no_unk else ())
    penalised = cfg.coverage_penalty > 0  # keep `Beams.attended`
    beams = start(
        model, src, src_lengths, cfg.beam_size, max_lens, min_lens, forbidden, with_attention, penalised
    )
    pause = hook_between_steps()
    step = 0
    while beams.alive:
        if pause is not None:
            pause()
        step_log_probs, beams.state, attention = model.step(beams.enc, beams.state, beams.y_prev)
        attention = attention.float() if with_attention or penalised else None  # (rows, src_len)
        top = best_continuations(beams, step_log_probs.float(), step, max_lens, min_lens, cfg)
        record_finished(beams, top, attention, src_lens, cfg)
        top = drop_done(beams, top, step, max_lens, cfg)
        advance(beams, top, attention)
        step += 1
    return [sorted(hyps, key=lambda h: h.score, reverse=True)[: cfg.nbest] for hyps in beams.finished]


def search_with_retries(
    model: SearchModel, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig, with_attention: bool = False
) -> list[list[Hypothesis]]:
    """`beam_search`, then GroundHog's retries (module docstring) for the sentences that found none, with
    the settings `_retry_config` gives. A sentence that still finds nothing gets one empty hypothesis
    scored -inf."""
    results = beam_search(model, src, src_lengths, cfg, with_attention)
    failed = [i for i, hyps in enumerate(results) if not hyps]
    again = _retry_config(cfg) if failed else None
    if again is not None:
        index = torch.tensor(failed, device=src.device)
        retried = search_with_retries(
            model, src.index_select(0, index), src_lengths.index_select(0, index), again, with_attention
        )
        for i, hyps in zip(failed, retried, strict=True):
            results[i] = hyps
    return [hyps or [Hypothesis([], NEG_INF, NEG_INF)] for hyps in results]


def _retry_config(cfg: DecodeConfig) -> DecodeConfig | None:
    """The settings of GroundHog's next attempt at a sentence that found nothing, or None: give up."""
    if cfg.no_unk:
        return dataclasses.replace(cfg, no_unk=False)
    if cfg.at_max_len == "retry" and cfg.beam_size < RETRY_BEAM_LIMIT:
        return dataclasses.replace(cfg, beam_size=2 * cfg.beam_size)
    return None


def start(
    model: SearchModel,
    src: Tensor,
    src_lengths: Tensor,
    k: int,
    max_lens: list[int],
    min_lens: list[int],
    forbidden: tuple[int, ...],
    with_attention: bool,
    attended: bool = False,
) -> Beams:
    """Encode the batch once and open one hypothesis (BOS) per sentence; keep each row's attention
    (`with_attention`) and its running sum (`attended`) when asked for.

    Only one slot of each sentence is open at the start, so that the k copies of BOS do not produce k
    identical hypotheses.
    """
    batch, device = src.size(0), src.device
    enc = model.encode(src, src_lengths)
    beam_rows = torch.arange(batch, device=device).repeat_interleave(k)  # sentence of each row
    log_p = torch.full((batch, k), NEG_INF, device=device)
    log_p[:, 0] = 0.0
    return Beams(
        k=k,
        enc=enc,
        state=model.init_state(enc).index_select(beam_rows),
        log_p=log_p,
        tokens=torch.empty((batch * k, 0), dtype=torch.long, device=device),
        history=src.new_zeros((batch * k, 0, src.size(-1)), dtype=torch.float) if with_attention else None,
        attended=src.new_zeros((batch * k, src.size(-1)), dtype=torch.float) if attended else None,
        y_prev=torch.full((batch * k,), BOS_ID, dtype=torch.long, device=device),
        max_len_rows=torch.tensor(max_lens, device=device).repeat_interleave(k),
        min_len_rows=torch.tensor(min_lens, device=device).repeat_interleave(k),
        forbidden=torch.tensor(forbidden, device=device),
        alive=list(range(batch)),
        finished=[[] for _ in range(batch)],
    )


def best_continuations(
    beams: Beams,
    step_log_probs: Tensor,
    step: int,
    max_lens: list[int],
    min_lens: list[int],
    cfg: DecodeConfig,
) -> Candidates:
    """Every continuation of every open hypothesis, constrained (`constrain_`), and each sentence's k best.

    step_log_probs (rows, V): the model's next-token log-probabilities, in fp32, constrained in place. A
    sentence with f finished hypotheses takes only its k - f best candidates.
    """
    k, device = beams.k, step_log_probs.device
    # Which length rules can apply at this step is known on the host, so most steps skip them.
    below_min = step < max(min_lens[s] for s in beams.alive)
    at_max = step >= min(max_lens[s] for s in beams.alive)
    constrain_(
        step_log_probs,
        step,
        beams.tokens,
        beams.forbidden,
        beams.min_len_rows if below_min else None,
        beams.max_len_rows if at_max and cfg.at_max_len == "force_eos" else None,
        cfg.no_repeat_ngram,
    )
    top_log_p, source_row, token = top_candidates(step_log_probs, beams.log_p, k)  # (sentences, k) each
    open_slots = torch.tensor([k - len(beams.finished[s]) for s in beams.alive], device=device)
    taken = (torch.arange(k, device=device) < open_slots.unsqueeze(1)) & (top_log_p > NEG_INF)
    ends = taken & (token == EOS_ID)
    return Candidates(top_log_p, token, source_row, ends, taken & ~ends)


def top_candidates(step_log_probs: Tensor, log_p: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """Each sentence's k best continuations, best first, (sentences, k) each: their log p, the row
    (hypothesis) each extends and the token it appends. The same as `topk(k)` over the (sentences, k * V)
    sums log_p + step_log_probs (ties apart), without forming those sums or sorting all of them.

    On a CPU an index-returning reduction (topk, max, argmax) over every score costs many times a plain
    maximum (docs/performance.md, "Search steps"), and forming the sums is one more pass. So the scores are
    cut into blocks of TOPK_BLOCK tokens, each block's best continuation is found by `amax`, and only the k
    blocks of a sentence with the best maxima are searched for its k best: any one of the k best
    continuations lies in such a block, as a block that holds it has a maximum at least as good, and fewer
    than k blocks can beat that. Each value is the same sum of the same two numbers as in the full sum (the
    maximum of x + c is the maximum of x, plus c, in floating point too), so scores are bit for bit those of
    a full `topk`.

    step_log_probs (sentences * k, V): constrained log-probabilities; log_p (sentences, k): each slot's
    log p so far, -inf for an empty slot.
    """
    rows, vocab_size = step_log_probs.shape
    n, device = rows // k, step_log_probs.device
    whole = vocab_size // TOPK_BLOCK * TOPK_BLOCK  # the columns of the full blocks; the rest is one block
    maxima = step_log_probs[:, :whole].view(rows, -1, TOPK_BLOCK).amax(dim=2)  # (rows, blocks)
    if whole < vocab_size:
        maxima = torch.cat([maxima, step_log_probs[:, whole:].amax(dim=1, keepdim=True)], dim=1)
    blocks = maxima.size(1)
    best_blocks = (maxima + log_p.view(-1, 1)).view(n, k * blocks).topk(k, dim=1).indices  # (sentences, k)
    row = (
        torch.div(best_blocks, blocks, rounding_mode="floor")
        + torch.arange(n, device=device).unsqueeze(1) * k
    )
    columns = (best_blocks % blocks).unsqueeze(2) * TOPK_BLOCK + torch.arange(TOPK_BLOCK, device=device)
    outside = columns >= vocab_size  # the short last block's missing columns: (sentences, k, TOPK_BLOCK)
    columns = columns.clamp_(max=vocab_size - 1)
    sums = log_p.view(-1)[row].unsqueeze(2) + step_log_probs[row.unsqueeze(2), columns]  # like `columns`
    sums = sums.masked_fill_(outside, NEG_INF).view(n, -1)
    top_log_p, position = sums.topk(k, dim=1)  # (sentences, k)
    source_row = row.gather(1, torch.div(position, TOPK_BLOCK, rounding_mode="floor"))
    return top_log_p, source_row, columns.view(n, -1).gather(1, position)


def record_finished(
    beams: Beams, top: Candidates, attention: Tensor | None, src_lens: list[int], cfg: DecodeConfig
) -> None:
    """Move the candidates that end (EOS) to their sentence's finished hypotheses, scored (module doc).

    What the host needs of them (their rows' tokens, log-probabilities, attention) is copied from the
    device in one transfer per kind and step, not one per hypothesis: on a GPU each copy waits for the
    device."""
    ended = top.ends.nonzero()  # (ended, 2): each ending candidate's sentence slot a and rank j
    beams.log_p = top.log_p.masked_fill(~top.open, NEG_INF)
    if not len(ended):
        return
    rows = top.source_row[ended[:, 0], ended[:, 1]]  # (ended,) the hypothesis each candidate extends
    log_probs = top.log_p[ended[:, 0], ended[:, 1]].tolist()
    words = beams.tokens.index_select(0, rows).tolist()
    weights = covered = None
    if beams.history is not None:  # every step's attention, this one's (the EOS's) last
        steps = torch.cat(
            [beams.history.index_select(0, rows), attention.index_select(0, rows).unsqueeze(1)], 1
        )
        weights = steps.cpu().numpy()  # (ended, steps, src_len)
    if beams.attended is not None:  # this step's attention (the EOS's) counts too
        covered = (beams.attended.index_select(0, rows) + attention.index_select(0, rows)).cpu()
    for i, (a, _) in enumerate(ended.tolist()):
        sentence = beams.alive[a]
        score = log_probs[i] / length_penalty(len(words[i]) + 1, cfg.length_penalty, cfg.alpha)
        if covered is not None:
            score += coverage_penalty(covered[i], src_lens[sentence], cfg.coverage_penalty)
        columns = src_lens[sentence] + 1  # the source pieces and its EOS
        attention_i = weights[i, :, :columns].copy() if weights is not None else None
        beams.finished[sentence].append(Hypothesis(words[i], score, log_probs[i], attention_i))


def drop_done(beams: Beams, top: Candidates, step: int, max_lens: list[int], cfg: DecodeConfig) -> Candidates:
    """Let the sentences that are done (`_is_done`) leave the batch; returns `top` for those that stay."""
    n = len(beams.alive)
    best_open = beams.log_p.max(dim=1).values.tolist()
    top_ended = top.ends[:, 0].tolist()  # the step's best candidate (sorted first) is EOS
    keep = [
        a
        for a, s in enumerate(beams.alive)
        if not _is_done(beams.finished[s], best_open[a], top_ended[a], step, max_lens[s], cfg)
    ]
    if len(keep) == n:
        return top
    device = beams.log_p.device
    keep_index = torch.tensor(keep, dtype=torch.long, device=device)
    kept_rows = (keep_index.unsqueeze(1) * beams.k + torch.arange(beams.k, device=device)).view(-1)
    beams.enc = beams.enc.index_select(keep_index)
    beams.max_len_rows = beams.max_len_rows.index_select(0, kept_rows)
    beams.min_len_rows = beams.min_len_rows.index_select(0, kept_rows)
    beams.alive = [beams.alive[a] for a in keep]
    beams.log_p = beams.log_p.index_select(0, keep_index)
    kept = (t.index_select(0, keep_index) for t in (top.log_p, top.token, top.source_row, top.ends, top.open))
    return Candidates(*kept)


def advance(beams: Beams, top: Candidates, attention: Tensor | None) -> None:
    """Reorder the rows to the kept candidates' hypotheses and append each candidate's token."""
    beams.y_prev = top.token.view(-1)
    if not beams.alive:
        return
    rows = top.source_row.view(-1)  # the new row order, in old row ids
    beams.state = beams.state.index_select(rows)
    beams.tokens = torch.cat([beams.tokens.index_select(0, rows), beams.y_prev.unsqueeze(1)], dim=1)
    if beams.history is not None:
        beams.history = torch.cat(
            [beams.history.index_select(0, rows), attention.index_select(0, rows).unsqueeze(1)], dim=1
        )
    if beams.attended is not None:
        beams.attended = (beams.attended + attention).index_select(0, rows)


def constrain_(
    scores: Tensor,
    step: int,
    tokens: Tensor,
    forbidden: Tensor,
    min_len_rows: Tensor | None,
    max_len_rows: Tensor | None,
    no_repeat: int,
) -> None:
    """Forbid, in place in scores (rows, V), what a hypothesis may not do next: the `forbidden` ids (PAD
    and BOS) always, EOS before its row's minimum length, anything but EOS at its maximum length (this wins
    over the minimum), and tokens that would repeat an n-gram of size `no_repeat` (0: off).

    min_len_rows, max_len_rows (rows,): each row's length limits; None where the caller knows that no row
    is below its minimum, or at its maximum, at this step.
    """
    at_max = None if max_len_rows is None else (max_len_rows <= step).nonzero().squeeze(1)  # must end now
    eos_at_max = None if at_max is None else scores[at_max, EOS_ID]  # (a copy)
    scores.index_fill_(1, forbidden, NEG_INF)
    if min_len_rows is not None:
        scores[:, EOS_ID].masked_fill_(min_len_rows > step, NEG_INF)
    if no_repeat:
        row, token = repeated_ngrams(tokens, no_repeat)
        scores[row, token] = NEG_INF
    if at_max is not None:
        scores[at_max] = NEG_INF
        scores[at_max, EOS_ID] = eos_at_max


def repeated_ngrams(tokens: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """(row, token) pairs where `token` would complete an n-gram already present in the row's tokens."""
    length = tokens.size(1)
    if length < n:  # an n-gram can only repeat once n tokens exist
        empty = tokens.new_empty(0)
        return empty, empty
    grams = tokens.unfold(1, n, 1)  # (rows, length - n + 1, n)
    context = tokens[:, length - n + 1 :]  # the last n - 1 tokens: (rows, n - 1)
    matches = (grams[:, :, :-1] == context.unsqueeze(1)).all(dim=2)  # (rows, length - n + 1)
    row, position = matches.nonzero(as_tuple=True)
    return row, grams[row, position, -1]


def _is_done(
    finished: list[Hypothesis],
    best_open: float,
    top_ended: bool,
    step: int,
    max_len: int,
    cfg: DecodeConfig,
) -> bool:
    if best_open == NEG_INF or step >= max_len:  # no open hypothesis left, or they reached the maximum
        return True
    if len(finished) < cfg.nbest:
        return False
    if cfg.stopping == "top":
        return top_ended
    nth_best = sorted((h.score for h in finished), reverse=True)[cfg.nbest - 1]
    return score_bound(best_open, max_len, cfg) <= nth_best


def translate_ids(
    model: SearchModel,
    src_ids: Sequence[Sequence[int]],
    decode_cfg: DecodeConfig,
    device: torch.device | str,
    batch_tokens: int | None = None,
    with_attention: bool = False,
    other_src_ids: Sequence[Sequence[Sequence[int]]] = (),
) -> list[list[Hypothesis]]:
    """Search every source sentence (ids without EOS); the n-best lists come back in input order.

    Sentences are sorted by length and cut into batches of at most `batch_tokens` padded source tokens
    (default `decode_cfg.batch_tokens`) and `decode_cfg.batch_sentences` sentences (0: any number), so
    little work is spent on padding. A model in training mode (validation) is put in eval mode for the
    call and back afterwards; one in eval mode is left alone, so that threads may search it at once (a
    server). With `decode.cuda_graphs` (graphs.py) its steps are replayed from CUDA graphs captured during
    the call. With bf16 (`decode.precision`) the model runs under autocast and the scores are still summed
    in fp32.

    other_src_ids: for an ensemble whose models read different source vocabularies, the same sentences
    as each further model reads them, one list like `src_ids` per model (`src_ids` being the first
    model's); a sentence then costs its longest reading.
    """
    device = torch.device(device)
    budget = batch_tokens or decode_cfg.batch_tokens
    most = decode_cfg.batch_sentences or len(src_ids)
    readings = [src_ids, *other_src_ids]  # (models, sentences, ids): each model's ids of each sentence
    lengths = [max(len(ids[i]) for ids in readings) + 1 for i in range(len(src_ids))]  # EOS included
    order = sorted(range(len(src_ids)), key=lambda i: lengths[i], reverse=True)
    results: list[list[Hypothesis]] = [[] for _ in src_ids]
    graphed = uses_step_graphs(decode_cfg, model, device, len(src_ids))
    searcher = StepGraphs(model) if graphed else model  # graphs live for this call (graphs.py)
    with evaluating(model):
        for batch in length_batches(order, lengths, budget, most):
            src, src_lengths = pad_sources([[ids[i] for i in batch] for ids in readings], device, graphed)
            with decode_precision(decode_cfg.precision, device):
                searched = search_with_retries(searcher, src, src_lengths, decode_cfg, with_attention)
            for i, hyps in zip(batch, searched, strict=True):
                results[i] = hyps
    return results


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """The model in eval mode (no dropout) for the `with` block: one in training mode (validation) is put
    back afterwards; one in eval mode is left alone, so that threads may search or score it at once."""
    if not model.training:
        yield model
        return
    model.eval()
    try:
        yield model
    finally:
        model.train()


def length_batches(order: list[int], lengths: list[int], budget: int, most: int) -> list[list[int]]:
    """Cut `order` (longest first) so that sentences x longest length <= budget and sentences <= most
    (at least one sentence)."""
    batches: list[list[int]] = []
    for i in order:
        last = batches[-1] if batches else []
        if last and len(last) < most and lengths[last[0]] * (len(last) + 1) <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def pad_sources(
    readings: Sequence[Sequence[Sequence[int]]], device: torch.device | str, graphed: bool = False
) -> tuple[Tensor, Tensor]:
    """The source tensor of a batch read by one model or more, `readings` (models, sentences, ids): each
    sentence's ids with EOS appended (as in training) and PAD after, (batch, width) for one model,
    (batch, models, width) for several, width the longest + 1, rounded up to a graph's length when
    `graphed` (graphs.py); and the first model's lengths (batch,), EOS included."""
    lengths = [[len(ids) + 1 for ids in sentences] for sentences in readings]  # (models, sentences)
    width = max(max(counts) for counts in lengths)
    width = graph_length(width) if graphed else width
    src = torch.full((len(readings[0]), len(readings), width), PAD_ID, dtype=torch.long)
    for m, sentences in enumerate(readings):
        for row, ids in enumerate(sentences):
            src[row, m, : len(ids)] = torch.as_tensor(list(ids), dtype=torch.long)
            src[row, m, len(ids)] = EOS_ID
    src = src.squeeze(1)  # one model: (batch, width); several keep their model dimension
    return src.to(device), torch.tensor(lengths[0], dtype=torch.long, device=device)
