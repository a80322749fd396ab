"""A translation lexicon learned from a trained model's own attention: the candidates of shortlist.py, the
most frequent target pieces beside them, and the share of a dev set's reference pieces they cover.

For a sample of training pairs, each reference piece y_i is forced through the model and adds its
attention weight alpha_ij to the count of every source piece x_j it attended: count(x_j, y_i) +=
alpha_ij. A source piece's candidates are the `top_k` target pieces with the largest counts. Attention is
the paper's soft alignment, so no separate aligner is needed (the maintained fast_align successor,
eflomal, ships only as C source to build at install); a model without attention attends uniformly,
which makes the counts plain co-occurrences.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..config.constants import SIDES
from ..console import progress
from ..errors import UserError
from ..io import read_lines
from ..runs.checkpoint import weights_fingerprint
from ..runs.run_folder import data_dir_of, load_trained, resolve_checkpoint, run_dir_of
from ..runs.shortlist_table import LexicalTable, save_table
from ..vocab.pieces import Vocab, data_file
from .forced import by_source_length, forced_pass

CHUNK_PAIRS = 2000  # pairs forced through the model between two merges of the counts


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


def attention_counts(
    model: nn.Module,
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    device: torch.device | str,
) -> tuple[np.ndarray, np.ndarray]:
    """The attention-weighted co-occurrences of the pairs, as (keys, weights): key s * V + t for source
    id s and target id t (V the target vocabulary), one entry per distinct pair of ids."""
    vocab_size = model.decoder.output.out_features
    keys, weights = [np.zeros(0, dtype=np.int64)], [np.zeros(0)]
    with progress(total=len(src_ids), unit=" pairs", desc="lexicon") as bar:
        for start in range(0, len(src_ids), CHUNK_PAIRS):
            src_chunk, tgt_chunk = src_ids[start : start + CHUNK_PAIRS], tgt_ids[start : start + CHUNK_PAIRS]
            forced = forced_pass(
                model, src_chunk, tgt_chunk, device, by_source_length(src_chunk), attention=True
            )
            for src, tgt, pair in zip(src_chunk, tgt_chunk, forced, strict=True):
                alpha = pair.attention
                # alpha: (target pieces + EOS, source pieces + EOS); the EOS row and column carry no word
                keys.append(
                    np.add.outer(np.asarray(tgt, dtype=np.int64), np.asarray(src) * vocab_size).ravel()
                )
                weights.append(alpha[: len(tgt), : len(src)].ravel())
            merged, inverse = np.unique(np.concatenate(keys), return_inverse=True)  # one count per id pair
            keys, weights = [merged], [np.bincount(inverse, weights=np.concatenate(weights))]
            bar.update(len(src_chunk))
    return keys[0], weights[0]


def top_candidates(
    keys: np.ndarray, weights: np.ndarray, src_size: int, tgt_size: int, top_k: int
) -> np.ndarray:
    """(src_size, top_k) the target ids of each source id's largest counts, -1 where it has fewer."""
    sources, targets = keys // tgt_size, keys % tgt_size
    order = np.lexsort((targets, -weights, sources))  # by source, then largest count, then id
    sources, targets = sources[order], targets[order]
    rank = np.arange(len(order)) - np.searchsorted(sources, sources)  # position within its source
    kept = rank < top_k
    table = np.full((src_size, top_k), -1, dtype=np.int32)
    table[sources[kept], rank[kept]] = targets[kept]
    return table


def build_table(
    model: nn.Module,
    vocab: Vocab,
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    top_k: int,
    frequent: int,
    device: torch.device | str,
) -> LexicalTable:
    """The lexical table of `model` learned from the (training) pairs `src_ids`, `tgt_ids`."""
    if top_k < 1 or frequent < 0:
        raise UserError(
            f"lexical shortlist: top_k must be >= 1 and frequent >= 0, got {top_k} and {frequent}"
        )
    keys, weights = attention_counts(model, src_ids, tgt_ids, device)
    return LexicalTable(
        top_candidates(keys, weights, vocab.src_size, vocab.tgt_size, top_k),
        frequent_pieces(tgt_ids, vocab.tgt_size, frequent),
    )


@dataclass(frozen=True)
class Built:
    """What `build_for_run` did: the table's file, the training pairs it was learned from, and the share
    of the dev set's reference pieces among their sentence's candidates."""

    path: Path
    pairs: int
    valid_coverage: float


def build_for_run(
    run: Path, top_k: int, frequent: int, sentences: int, device: torch.device | str = "cpu", seed: int = 1
) -> Built:
    """Learn the lexical table of a run's checkpoint (`run`: the run folder for its best checkpoint, or a
    checkpoint file) from a seeded sample of `sentences` pairs of its prepared training data (all of them
    when there are fewer), write it into the run folder under the checkpoint's name (shortlist.py) and
    measure it on the dev set."""
    model, vocab, config = load_trained(run, device)
    checkpoint = resolve_checkpoint(run)
    data = dataclasses.replace(config.data, dir=str(data_dir_of(config, run_dir_of(checkpoint))))
    config = dataclasses.replace(config, data=data)
    train = [list(read_lines(data_file(config, f"train.{side}"))) for side in SIDES]
    chosen = sorted(random.Random(seed).sample(range(len(train[0])), min(sentences, len(train[0]))))
    src = vocab.encode_src([train[0][i] for i in chosen], tokenized=True)  # prepared: tokenised already
    tgt = vocab.encode_tgt([train[1][i] for i in chosen], tokenized=True)
    table = build_table(model, vocab, src, tgt, top_k, frequent, device)
    table = dataclasses.replace(table, checkpoint=checkpoint.name, weights=weights_fingerprint(model))
    path = save_table(table, run_dir_of(checkpoint))
    valid = [list(read_lines(data_file(config, f"valid.{side}"))) for side in SIDES]
    covered = coverage(table, vocab.encode_src(valid[0]), vocab.encode_tgt(valid[1]))
    return Built(path, len(chosen), covered)
