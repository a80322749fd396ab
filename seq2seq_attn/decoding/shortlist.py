"""Lexical shortlists: the target pieces a sentence's translation is likely to use, learned once per run.

At each step the decoder's output layer scores every target piece; for a 30k-word vocabulary that is
most of a step's arithmetic. The fastest CPU decoders compute it over a per-batch shortlist instead:
the most frequent target pieces plus the likely translations of the sentence's source pieces (Marian's
and CTranslate2's vocabulary selection; Jean, Cho, Memisevic & Bengio 2015, the RNNsearch authors'
follow-up, with candidate lists from a word-alignment dictionary). This module searches with that
dictionary: the search restricts the output layer to the pieces a sentence may use.

The dictionary is learned from the trained model's own attention (shortlist_learning.py) and kept in the
run folder (runs/shortlist_table.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from ..model.recurrent import product
from ..model.states import DecoderState, EncoderOutput
from ..runs.shortlist_table import LexicalTable
from .int8 import Int8Linear, Int8Weight

PAD_TO = 8  # the candidate count is padded to a multiple of this, for the matrix product's kernels


@dataclass
class ShortlistedEncoding:
    """What `Shortlisted.encode` gives the search: the model's encoder output, the batch's candidates
    (the union of its sentences' lists) with their rows of the output layer, and which candidates each
    sentence may use. The search selects rows of it as of any encoder output."""

    inner: EncoderOutput
    candidates: Tensor  # (U,) target ids, U a multiple of PAD_TO
    weight: Tensor | Int8Weight  # (U, pre_output) the output layer's rows of the candidates
    bias: Tensor | None  # (U,); None when packed with an int8 weight
    allowed: Tensor  # (batch, U) bool: the candidates of each sentence's own list

    def index_select(self, index: Tensor) -> ShortlistedEncoding:
        return dataclasses.replace(
            self, inner=self.inner.index_select(index), allowed=self.allowed.index_select(0, index)
        )


class Shortlisted(nn.Module):
    """A model whose search steps score only the batch's lexical candidates.

    The output layer runs over the union of the batch's candidate lists; each sentence's log-softmax is
    then taken over its own list alone (the others' candidates masked), so that its translation does not
    depend on its batch-mates. The search sees full-vocabulary rows, -inf outside the list."""

    def __init__(self, model: nn.Module, table: LexicalTable) -> None:
        super().__init__()
        self.model, self.table = model, table
        self.eval()  # searched only: a search leaves an eval-mode model's mode alone (search.translate_ids)

    def encode(self, src: Tensor, src_lengths: Tensor) -> ShortlistedEncoding:
        """src (batch, src_len) ids ending in EOS, PAD after; src_lengths (batch,) EOS included."""
        lists = [
            self.table.sentence_candidates(row[: length - 1].tolist())
            for row, length in zip(src.cpu(), src_lengths.tolist(), strict=True)
        ]
        union = np.unique(np.concatenate(lists))
        output = self.model.decoder.output
        missing = -len(union) % PAD_TO
        spare = np.setdiff1d(np.arange(output.out_features), union)[:missing]  # no sentence's candidate
        padded = np.concatenate([union, spare])
        candidates = torch.as_tensor(padded, device=src.device)
        allowed = torch.as_tensor(np.stack([np.isin(padded, own) for own in lists]), device=src.device)
        weight, bias = output.weight.index_select(0, candidates), output.bias.index_select(0, candidates)
        if isinstance(output, Int8Linear):  # an int8 search copy: the candidates' rows int8 too
            weight, bias = Int8Weight(weight, bias), None
        return ShortlistedEncoding(self.model.encode(src, src_lengths), candidates, weight, bias, allowed)

    def init_state(self, enc: ShortlistedEncoding) -> DecoderState:
        return self.model.init_state(enc.inner)

    def step(
        self, enc: ShortlistedEncoding, state: DecoderState, y_prev: Tensor
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """As `Seq2Seq.step`, with the output layer over the candidates: (rows, vocab) log-probabilities,
        -inf outside each sentence's list."""
        features, state, weights = self.model.step_features(enc.inner, state, y_prev)
        features = self.model.decoder.dropout_output(features)
        logits = product(features, enc.weight, enc.bias).float()  # (rows, U)
        # rows: each sentence's beams, consecutive (as attention reads them): (sentences, beams, U)
        by_sentence = logits.view(len(enc.allowed), -1, logits.size(-1))
        logits = by_sentence.masked_fill(~enc.allowed.unsqueeze(1), float("-inf")).view_as(logits)
        log_probs = torch.full(
            (len(logits), self.model.decoder.output.out_features), float("-inf"), device=logits.device
        )
        log_probs[:, enc.candidates] = torch.log_softmax(logits, dim=-1)
        return log_probs, state, weights
