"""Lexical shortlists: the target pieces a sentence's translation is likely to use, learned once per run.

At each step the decoder's output layer scores every target piece; for a 30k-word vocabulary that is
most of a step's arithmetic. The fastest CPU decoders compute it over a per-batch shortlist instead:
the most frequent target pieces plus the likely translations of the sentence's source pieces (Marian's
and CTranslate2's vocabulary selection; Jean, Cho, Memisevic & Bengio 2015, the RNNsearch authors'
follow-up, with candidate lists from a word-alignment dictionary). This module holds that dictionary
and says which pieces a sentence may use; the search restricts the output layer to them.

The dictionary is learned from the trained model's own attention (shortlist_learning.py).

The table is kept in the run folder: `lexical_shortlist.npz` when learned from the run's best checkpoint,
`lexical_shortlist.<checkpoint>.npz` (e.g. `lexical_shortlist.step-500.npz`) when learned from another
checkpoint file. It holds `candidates` (source vocabulary, top_k) target ids (-1 where a source piece has
fewer), `frequent` (the most frequent target ids), and which weights it was learned from: the checkpoint
file's name and the weights' fingerprint (`runs/checkpoint.weights_fingerprint`). Translating with other
weights (the run trained on, another checkpoint, `--average`) uses the table still, with a warning, once
per table: the candidates of other weights are still plausible, but no longer the model's own.
`seq2seq export` copies the table into the exported model folder (model_folder.py) with what it records,
so that the check holds there against the exported weights.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from ..console import warn
from ..errors import UserError
from ..io import atomic_write
from ..model.recurrent import product
from ..model.states import DecoderState, EncoderOutput
from ..vocab.pieces import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab
from .int8 import Int8Linear, Int8Weight

TABLE_FILE = "lexical_shortlist.npz"  # the best checkpoint's (another's: lexical_shortlist.<name>.npz)
DEFAULT_CHECKPOINT = "best"  # the checkpoint whose table is TABLE_FILE
SPECIAL_IDS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)  # always candidates: the search needs EOS, <unk> may win


@dataclass(frozen=True)
class LexicalTable:
    """Per source piece its `top_k` candidate target pieces (-1: none), and the frequent target pieces."""

    candidates: np.ndarray  # (source vocabulary, top_k) int32
    frequent: np.ndarray  # (frequent,) int32, most frequent first
    checkpoint: str = ""  # the name of the checkpoint file it was learned from ("": not recorded)
    weights: str = ""  # the fingerprint of the weights it was learned from ("": not recorded)

    def sentence_candidates(self, src_ids: Sequence[int]) -> np.ndarray:
        """The sorted target ids a translation of this source may use: the frequent and special pieces and
        the candidates of each of its source pieces."""
        own = self.candidates[np.asarray(src_ids, dtype=np.int64)].ravel() if len(src_ids) else []
        chosen = np.concatenate([self.frequent, np.asarray(SPECIAL_IDS), np.asarray(own, dtype=np.int64)])
        return np.unique(chosen[chosen >= 0])


def frequent_pieces(tgt_ids: Sequence[Sequence[int]], vocab_size: int, count: int) -> np.ndarray:
    """The `count` most frequent target ids in `tgt_ids`, most frequent first (ties: the lower id)."""
    flat = np.fromiter((i for ids in tgt_ids for i in ids), dtype=np.int64)
    frequency = np.bincount(flat, minlength=vocab_size)
    order = np.lexsort((np.arange(vocab_size), -frequency))  # by frequency, then id
    return order[: min(count, vocab_size)].astype(np.int32)


def coverage(
    table: LexicalTable, src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]]
) -> float:
    """The share of reference pieces (EOS excluded) that are among their sentence's candidates."""
    covered = total = 0
    for src, tgt in zip(src_ids, tgt_ids, strict=True):
        covered += int(np.isin(np.asarray(tgt), table.sentence_candidates(src)).sum())
        total += len(tgt)
    return covered / total if total else 1.0


def table_path(run_dir: Path, checkpoint: Path) -> Path:
    """Where the table learned from `checkpoint` (a file of the run's checkpoints/ folder) is kept."""
    stem = Path(checkpoint).stem
    return Path(run_dir) / (TABLE_FILE if stem == DEFAULT_CHECKPOINT else f"lexical_shortlist.{stem}.npz")


def save_table(table: LexicalTable, run_dir: Path) -> Path:
    """Write the table atomically into the run folder, under the name of the checkpoint it records."""
    buffer = io.BytesIO()
    np.savez(
        buffer,
        candidates=table.candidates,
        frequent=table.frequent,
        checkpoint=np.array(table.checkpoint),
        weights=np.array(table.weights),
    )
    path = table_path(run_dir, Path(table.checkpoint or DEFAULT_CHECKPOINT))
    with atomic_write(path, "wb") as out:
        out.write(buffer.getvalue())
    return path


def find_table(run_dir: Path, checkpoint: Path) -> Path | None:
    """The table for translating with `checkpoint`: the one learned from it, else the run's; None when
    the run has neither."""
    for path in (table_path(run_dir, checkpoint), Path(run_dir) / TABLE_FILE):
        if path.is_file():
            return path
    return None


def load_table(
    run_dir: Path, vocab: Vocab, checkpoint: Path, weights: str, translating: str = ""
) -> LexicalTable:
    """The table for translating with `checkpoint`'s weights (fingerprint `weights`; `translating` says
    what they are, default the checkpoint's name): the one learned from that checkpoint, else the run's;
    checked against the vocabulary sizes (a one-line error when missing or built for another vocabulary),
    with a warning, once, when it was learned from other weights."""
    path = find_table(run_dir, checkpoint)
    if path is None:
        missing = Path(run_dir) / TABLE_FILE
        raise UserError(
            f"{missing}: no lexical shortlist; build it with `seq2seq lexical-shortlist {run_dir}`"
        )
    with np.load(path) as stored:
        recorded = {name: str(stored[name]) for name in ("checkpoint", "weights") if name in stored.files}
        table = LexicalTable(stored["candidates"], stored["frequent"], **recorded)
    if table.candidates.shape[0] != vocab.src_size or table.candidates.max(initial=-1) >= vocab.tgt_size:
        raise UserError(f"{path}: built for another vocabulary than {run_dir}'s; build it again")
    if table.weights != weights:
        _warn_other_weights(path, table.checkpoint, translating or Path(checkpoint).name, Path(checkpoint))
    return table


@functools.cache
def _warn_other_weights(path: Path, learned_from: str, translating: str, checkpoint: Path) -> None:
    source = f"from {learned_from} as it was then" if learned_from else "from weights it does not record"
    warn(
        f"{path}: learned {source}, not from the weights translating now ({translating}); its candidates "
        f"are not this model's own (learn them with `seq2seq lexical-shortlist {checkpoint}`)"
    )


# ----------------------------------------------------------------------------------------------------------
# searching with it

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

    def compile_attention(self, enabled: bool) -> None:
        self.model.compile_attention(enabled)

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
