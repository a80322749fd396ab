"""The summed token cross-entropy of the output layer, padding excluded: what every update minimises.

It lives with the model because `Seq2Seq.forward` computes it (so that DDP sees the loss inside `forward`),
and one function serves the training step and the dev loss, so the perplexity reported at validation is
the quantity training minimises (without label smoothing). `training/loss.py` builds the batch loss on it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..vocab.pieces import PAD_ID

# Logits per chunk of `summed_cross_entropy`, by device type. On a CPU the whole (tokens x vocab) block
# (2,560 x 4,000 fp32 = 41 MB for a batch of 64 x 40) and each of its copies (fp32 cast, softmax, gradients)
# is a fresh allocation far bigger than the caches; chunks of about 2^20 logits (4 MB) make the output layer
# and the loss, forward and backward, several times faster. A GPU wants few large kernels: there a chunk
# only bounds the memory of one block.
CHUNK_LOGITS = {"cpu": 2**20}
DEFAULT_CHUNK_LOGITS = 2**26


def summed_cross_entropy(
    logits_of: Callable[[Tensor], Tensor],
    features: Tensor,
    targets: Tensor,
    vocab_size: int,
    label_smoothing: float = 0.0,
    chunk_logits: int | None = None,
    n_real: int | None = None,
) -> Tensor:
    """sum_t CE(logits_of(features_t), targets_t) over the positions whose target is not PAD, in fp32.

    features (batch, steps, pre_output), targets (batch, steps). Only the rows of real targets are
    projected: the vocabulary projection is the largest matrix product of an update, and padding would
    pay for it too. The projection `logits_of` (onto `vocab_size` logits) and the softmax run on chunks
    of rows, about `chunk_logits` logits each (default: CHUNK_LOGITS for the device), so the full
    (tokens x vocab) block never exists at once in the forward pass; the sum is the same.

    n_real: how many targets are not PAD, when the caller knows it (training batches count them on the
    host). Then selecting them costs no host-device synchronisation on a GPU; without it the count is read
    from the device.
    """
    targets = targets.flatten()  # (rows,)
    padding = (targets == PAD_ID).to(torch.uint8)  # (rows,) 1 at PAD
    if n_real is None:
        n_real = targets.numel() - int(padding.sum())
    # The real positions in order: a stable sort puts them first. Unlike `nonzero`, whose output size the
    # host must read back from a GPU, its size is fixed, so the update runs on without waiting.
    real = torch.argsort(padding, stable=True)[:n_real]  # (tokens,)
    features = features.flatten(0, 1).index_select(0, real)  # (tokens, pre_output)
    targets = targets.index_select(0, real)  # (tokens,)
    budget = chunk_logits or CHUNK_LOGITS.get(features.device.type, DEFAULT_CHUNK_LOGITS)
    rows = max(1, budget // vocab_size)
    total = features.new_zeros((), dtype=torch.float32)
    for part, gold in zip(features.split(rows), targets.split(rows), strict=True):
        total = total + F.cross_entropy(
            logits_of(part).float(),
            gold,
            reduction="sum",
            label_smoothing=label_smoothing,
        )
    return total
