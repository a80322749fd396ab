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

    features (batch, steps, pre_output), targets (batch, steps). The projection `logits_of` (onto
    `vocab_size` logits) and the softmax run on chunks of rows, about `chunk_logits` logits each (default:
    CHUNK_LOGITS for the device), so the full (tokens x vocab) block never exists at once in the forward
    pass; the sum is the same.

    n_real: how many targets are not PAD, when the caller knows it (training batches count them on the
    host). Then only those rows are projected: the vocabulary projection is the largest matrix product of
    an update, and padding would pay for it too. Without it (None) every row is projected and the PAD
    targets weigh 0: more arithmetic, but no count, so nothing is read back from a GPU and the shapes stay
    those of the batch, which a training update captured in a CUDA graph needs (training/graphs.py).
    """
    targets = targets.flatten()  # (rows,)
    features = features.flatten(0, 1)  # (rows, pre_output)
    if n_real is not None:
        # The real positions in order: a stable sort puts them first. Unlike `nonzero`, whose output size
        # the host must read back from a GPU, its size is known, so the update runs on without waiting.
        real = torch.argsort((targets == PAD_ID).to(torch.uint8), stable=True)[:n_real]  # (tokens,)
        features, targets = features.index_select(0, real), targets.index_select(0, real)
    budget = chunk_logits or CHUNK_LOGITS.get(features.device.type, DEFAULT_CHUNK_LOGITS)
    rows = max(1, budget // vocab_size)
    total = features.new_zeros((), dtype=torch.float32)
    for part, gold in zip(features.split(rows), targets.split(rows), strict=True):
        total = total + F.cross_entropy(
            logits_of(part).float(),
            gold,
            ignore_index=PAD_ID,
            reduction="sum",
            label_smoothing=label_smoothing,
        )
    return total
