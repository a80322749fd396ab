"""The training objective: summed cross-entropy of the target tokens of a batch, padding excluded.

One function for the training step and the dev loss, so the perplexity reported at validation is the
quantity training minimises (without label smoothing).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .batching import Batch
from .vocab import PAD_ID


def batch_loss(model, batch: Batch, bf16: bool, label_smoothing: float = 0.0) -> torch.Tensor:
    """Teacher-forced forward pass (bf16 autocast when asked) and the summed token loss, in fp32."""
    with torch.autocast(batch.src.device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(batch.src, batch.src_lengths, batch.tgt_in)  # (batch, tgt_len, vocab)
    return F.cross_entropy(
        logits.float().flatten(0, 1),
        batch.tgt_out.flatten(),
        ignore_index=PAD_ID,
        reduction="sum",
        label_smoothing=label_smoothing,
    )
