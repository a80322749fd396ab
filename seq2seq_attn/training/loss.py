"""The training objective of a batch: the model's summed token loss, and what an update divides it by.

The sum itself is `model/cross_entropy.py`'s, computed inside the model's `forward`; `batch_loss` is
shared by the training step and the dev loss.
"""

from __future__ import annotations

from torch import Tensor

from ..model.device import bf16_autocast
from ..vocab.batching import Batch


def batch_loss(model, batch: Batch, bf16: bool, label_smoothing: float = 0.0, static: bool = False) -> Tensor:
    """Teacher-forced forward pass (bf16 autocast when asked) and the summed token loss, in fp32.

    static: the batch is a captured update's fixed-shape buffer (training/graphs.py), whose count of real
    targets changes from batch to batch while the graph cannot: the output layer then projects every row,
    padding weighted 0, instead of the real rows the host counted (`Batch.n_tokens`).
    """
    with bf16_autocast(batch.src.device.type, bf16):
        return model(
            batch.src,
            batch.src_lengths,
            batch.tgt_in,
            batch.tgt_out,
            label_smoothing,
            n_targets=None if static else batch.n_tokens,
        )


def loss_divisor(batch: Batch, loss_norm: str, world_size: int = 1) -> float:
    """What an update divides the batch's summed loss by before backward (`train.loss_norm`), from the
    batch's counts on the host (a captured update copies it into a device tensor before each replay).

    tokens: the target tokens, so the gradient is that of the mean token loss. sentences: the sentences:
    each sentence's loss summed over its tokens, averaged over sentences. batch: nothing, the plain sum
    over every target token of the batch, as the RNNsearch authors' code trained (GroundHog flattens the
    readout to (tokens, dim) before its SoftmaxLayer, whose cost is then `cost.sum()`): the gradient is
    about the batch's target tokens times that of `tokens`, which with clipping to norm 1 means that
    nearly every update is clipped (docs/model.md). Under DDP, which averages the ranks' gradients, `batch`
    divides by 1 / world_size, so the update is that of the sum over the whole global batch; `tokens` and
    `sentences` give the mean of the ranks' means, each rank weighted alike whatever its count (the global
    mean where the ranks' batches hold as many, which token batches make about so).
    """
    if loss_norm == "tokens":
        return batch.n_tokens
    if loss_norm == "sentences":
        return batch.n_sentences  # not the rows that pad it to a fixed shape
    return 1 / world_size
