"""The training objective of a batch: the model's summed token loss, and what an update divides it by.

The sum itself is `model/cross_entropy.py`'s, computed inside the model's `forward`; `batch_loss` is
shared by the training step and the dev loss.
"""

from __future__ import annotations

from torch import Tensor

from .batching import Batch
from .device import bf16_autocast


def batch_loss(model, batch: Batch, bf16: bool, label_smoothing: float = 0.0) -> Tensor:
    """Teacher-forced forward pass (bf16 autocast when asked) and the summed token loss, in fp32."""
    with bf16_autocast(batch.src.device.type, bf16):
        return model(
            batch.src,
            batch.src_lengths,
            batch.tgt_in,
            batch.tgt_out,
            label_smoothing,
            n_targets=batch.n_tokens,
        )


def loss_divisor(batch: Batch, loss_norm: str) -> int:
    """What an update divides the batch's summed loss by before backward (`train.loss_norm`).

    tokens: the target tokens, so the gradient is that of the mean token loss. sentences: the sentences,
    as the RNNsearch authors' code (GroundHog) did: each sentence's loss summed over its tokens, averaged
    over sentences. The two gradients differ by the batch's target tokens per sentence, which matters
    with Adadelta and norm clipping: steps of small gradients scale with them (see docs/model.md).
    """
    return batch.n_tokens if loss_norm == "tokens" else batch.src.size(0)
