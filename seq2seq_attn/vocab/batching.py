"""A batch of training pairs as tensors: `Batch`, and `collate`, which pads id sequences into one.

Training cuts the corpus into batches (training/batches.py); the teacher-forced pass of scoring and
alignment (decoding/forced.py) uses the same tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .pieces import BOS_ID, EOS_ID, PAD_ID

# A batch's shape: (sentences, source length, target length), EOS and BOS included.
Shape = tuple[int, int, int]
# Lengths in a CUDA graph's shapes (training's both sides, search's source) are padded to a multiple of this,
# so that few shapes, each captured once, serve every batch.
GRAPH_LENGTH_STEP = 8


def graph_length(length: int) -> int:
    """`length` rounded up to a multiple of GRAPH_LENGTH_STEP."""
    return -(-length // GRAPH_LENGTH_STEP) * GRAPH_LENGTH_STEP


def graph_rows(rows: int, per_doubling: int) -> int:
    """`rows` rounded up to one of `per_doubling` (a power of two) sizes per doubling, so at most
    1 / per_doubling more: with 8, 8, 9, ..., 15, 16, 18, ..., 30, 32, 36, ..."""
    step = 1 << max(0, rows.bit_length() - per_doubling.bit_length())
    return -(-rows // step) * step


@dataclass
class Batch:
    src: torch.Tensor  # (batch, src_len) source ids + EOS, padded with PAD
    src_lengths: torch.Tensor  # (batch,) >= 1, EOS included
    tgt_in: torch.Tensor  # (batch, tgt_len) BOS + target ids, padded
    tgt_out: torch.Tensor  # (batch, tgt_len) target ids + EOS, padded
    n_tokens: int  # real target tokens (tgt_out positions that are not padding)
    n_padded: int  # all source + target positions, padding included
    n_sentences: int  # real sentences: the first rows; any after them pad the batch to a fixed shape

    def to(self, device: torch.device) -> Batch:
        """The tensors on `device`, copied asynchronously from pinned memory on CUDA, the lengths too: a
        copy the encoder made itself would wait for the GPU at every update."""
        non_blocking = device.type == "cuda"
        src, src_lengths, tgt_in, tgt_out = (
            t.to(device, non_blocking=non_blocking)
            for t in (self.src, self.src_lengths, self.tgt_in, self.tgt_out)
        )
        return Batch(src, src_lengths, tgt_in, tgt_out, self.n_tokens, self.n_padded, self.n_sentences)


def collate(
    src_seqs: list[np.ndarray],
    tgt_seqs: list[np.ndarray],
    pin: bool = False,
    pad_to: Callable[[int, int, int], Shape] | None = None,
) -> Batch:
    """Pad a list of id sequences into tensors: src + EOS, BOS + tgt, tgt + EOS.

    pad_to: the shape to pad a batch of this (sentences, source length, target length) to, for a training
    update captured in a CUDA graph (training/graphs.py). The rows added are empty sentences: a source of
    EOS alone (length 1, since the encoder reads each sentence's last word and attention normalises over
    its real words) and a target of padding only, which the loss leaves out, so they change no gradient.
    """
    n = len(src_seqs)
    shape = (n, max(len(s) for s in src_seqs) + 1, max(len(t) for t in tgt_seqs) + 1)
    rows, src_len, tgt_len = pad_to(*shape) if pad_to else shape
    src = np.full((rows, src_len), PAD_ID, dtype=np.int64)
    tgt_in = np.full((rows, tgt_len), PAD_ID, dtype=np.int64)
    tgt_out = np.full((rows, tgt_len), PAD_ID, dtype=np.int64)
    src_lengths = np.ones(rows, dtype=np.int64)
    src[n:, 0] = EOS_ID
    for row, (s, t) in enumerate(zip(src_seqs, tgt_seqs, strict=True)):
        src[row, : len(s)] = s
        src[row, len(s)] = EOS_ID
        src_lengths[row] = len(s) + 1
        tgt_in[row, 0] = BOS_ID
        tgt_in[row, 1 : len(t) + 1] = t
        tgt_out[row, : len(t)] = t
        tgt_out[row, len(t)] = EOS_ID
    tensors = [torch.from_numpy(a) for a in (src, src_lengths, tgt_in, tgt_out)]
    if pin:
        tensors = [t.pin_memory() for t in tensors]
    n_tokens = int(sum(len(t) for t in tgt_seqs)) + n
    return Batch(*tensors, n_tokens=n_tokens, n_padded=rows * (src_len + tgt_len), n_sentences=n)
