"""A batch of training pairs as tensors: `Batch`, and `collate`, which pads id sequences into one.

Training cuts the corpus into batches (training/batches.py); the teacher-forced pass of scoring and
alignment (decoding/forced.py) uses the same tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .pieces import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    src: torch.Tensor  # (batch, src_len) source ids + EOS, padded with PAD
    src_lengths: torch.Tensor  # (batch,)
    tgt_in: torch.Tensor  # (batch, tgt_len) BOS + target ids, padded
    tgt_out: torch.Tensor  # (batch, tgt_len) target ids + EOS, padded
    n_tokens: int  # real target tokens (tgt_out positions that are not padding)
    n_padded: int  # all source + target positions, padding included

    def to(self, device: torch.device) -> Batch:
        """Move the id tensors (asynchronously from pinned memory on CUDA); lengths stay on the CPU, where
        packing the encoder input needs them, so no device round trip."""
        non_blocking = device.type == "cuda"
        src, tgt_in, tgt_out = (
            t.to(device, non_blocking=non_blocking) for t in (self.src, self.tgt_in, self.tgt_out)
        )
        return Batch(src, self.src_lengths, tgt_in, tgt_out, self.n_tokens, self.n_padded)


def collate(src_seqs: list[np.ndarray], tgt_seqs: list[np.ndarray], pin: bool = False) -> Batch:
    """Pad a list of id sequences into tensors: src + EOS, BOS + tgt, tgt + EOS."""
    n = len(src_seqs)
    src_len = max(len(s) for s in src_seqs) + 1
    tgt_len = max(len(t) for t in tgt_seqs) + 1
    src = np.full((n, src_len), PAD_ID, dtype=np.int64)
    tgt_in = np.full((n, tgt_len), PAD_ID, dtype=np.int64)
    tgt_out = np.full((n, tgt_len), PAD_ID, dtype=np.int64)
    src_lengths = np.empty(n, dtype=np.int64)
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
    return Batch(*tensors, n_tokens=n_tokens, n_padded=n * (src_len + tgt_len))
