"""The teacher-forced pass: pairs run through a trained model with the target given, and what it predicted.

Forced decoding feeds the reference y_<i at every step instead of the model's own choice and reads off,
for each target piece y_i (and the final EOS), its log-probability log p(y_i | y_<i, x) and the attention
alpha_ij over the source pieces x_j. Three readers share this one pass: `seq2seq score` sums the
log-probabilities (evaluation/models/likelihood.py), `seq2seq align` turns the attention into word links
(evaluation/models/align.py) and the lexical shortlist counts attention-weighted co-occurrences
(shortlist_learning.py). Validation during training is not a reader: its dev loss goes through the
training loss with training batching (training/validate.py).

The pass runs the model in eval mode without gradients (search.py's `evaluating`), on batches its caller
plans: `by_tokens` (longest pairs first, at most `decode.batch_tokens` padded pieces per batch, the search's
rule) or `by_source_length` (shortest sources first, a fixed number of pairs per batch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..model.device import decode_precision
from ..vocab.batching import collate
from .search import evaluating, hook_between_steps, length_batches

ATTENTION_BATCH = 32  # pairs per batch where attention is read (`by_source_length`)


@dataclass(frozen=True)
class Forced:
    """One pair's forced pass: the log-probability of each target piece, EOS last (None when not asked
    for), and the attention (target pieces + EOS, source pieces + EOS) (None when not asked for)."""

    log_probs: list[float] | None
    attention: np.ndarray | None


def by_tokens(lengths: Sequence[int], batch_tokens: int, batch_sentences: int = 0) -> list[list[int]]:
    """Batches of pair indices, longest first, of at most `batch_tokens` padded pieces (`lengths` per pair)
    and `batch_sentences` pairs (0: no limit)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    return length_batches(order, list(lengths), batch_tokens, batch_sentences or len(lengths))


def by_source_length(src_ids: Sequence[Sequence[int]], size: int = ATTENTION_BATCH) -> list[list[int]]:
    """Batches of `size` pair indices, shortest source first."""
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    return [order[start : start + size] for start in range(0, len(order), size)]


def forced_pass(
    model: nn.Module,
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    device: torch.device | str,
    batches: Iterable[Sequence[int]],
    *,
    log_probs: bool = False,
    attention: bool = False,
    precision: str = "fp32",
    done: Callable[[int], object] | None = None,
) -> list[Forced]:
    """Every pair forced through `model`, batch by batch as planned; per pair what was asked for. Sources
    must not be empty. The model runs in `precision` (`decode.precision`: bf16 autocast or TF32 products where
    it asks for them; log-probabilities in fp32); `done` is told the size of each finished batch (a progress
    bar). Before each batch it calls the thread's `between_steps` hook, as a search does before each step (a
    server's scoring takes turns there, or stops)."""
    device = torch.device(device)
    results: list[Forced] = [Forced(None, None)] * len(src_ids)
    pause = hook_between_steps()
    with evaluating(model), torch.inference_mode():
        for batch_ids in batches:
            if pause is not None:
                pause()
            batch = collate(
                [np.asarray(src_ids[i], dtype=np.int64) for i in batch_ids],
                [np.asarray(tgt_ids[i], dtype=np.int64) for i in batch_ids],
            ).to(device)
            with decode_precision(precision, device):
                output = model(batch.src, batch.src_lengths, batch.tgt_in, return_attention=attention)
            logits, weights = output if attention else (output, None)  # (batch, tgt_len + 1, vocab)
            picked = None
            if log_probs:
                scores = torch.log_softmax(logits.float(), dim=-1)
                picked = (
                    scores.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1).cpu()
                )  # (batch, tgt_len + 1)
            if weights is not None:
                weights = weights.float().cpu().numpy()  # (batch, tgt_len + 1, src_len + 1)
            for row, i in enumerate(batch_ids):
                tgt_len, src_len = len(tgt_ids[i]) + 1, len(src_ids[i]) + 1  # EOS included
                results[i] = Forced(
                    None if picked is None else picked[row, :tgt_len].tolist(),
                    None if weights is None else weights[row, :tgt_len, :src_len],
                )
            if done is not None:
                done(len(batch_ids))
    return results
