"""Where tensors live and in which precision: one rule for every command that takes `auto | cpu | cuda`
and for both `train.precision` and `decode.precision`."""

from __future__ import annotations

import torch

from .errors import UserError


def resolve_device(choice: str, option: str, index: int = 0) -> torch.device:
    """`auto` is CUDA device `index` when one is available, else the CPU; asking for `cuda` without one is
    a one-line error naming the option (`train.device`, `--device`)."""
    if choice == "cuda" and not torch.cuda.is_available():
        raise UserError(f"{option} is 'cuda' but no CUDA device is available")
    if choice == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", index)


def uses_bf16(precision: str, device: torch.device) -> bool:
    """`bf16`, or `auto` on CUDA: bf16 autocast. `auto` stays fp32 on CPU, where exact resume and
    batch-invariant search are fp32 guarantees (bf16 there is opt-in: fast only with AVX-512 BF16 / AMX)."""
    return precision == "bf16" or (precision == "auto" and device.type == "cuda")


def bf16_autocast(device_type: str, enabled: bool) -> torch.autocast:
    """The one mixed-precision context of training, validation and search: bf16 autocast when enabled
    (see `uses_bf16`); a no-op context otherwise."""
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=enabled)


def attention_dtype(device_type: str) -> torch.dtype:
    """The dtype of attention's scores, softmax and context products under autocast.

    On a CPU these are elementwise work and small per-sentence products (batch x 1 x src_len @ src_len x
    annotation), which run faster in fp32 than in bf16 there (docs/performance.md); on a GPU, the autocast
    dtype.
    """
    return torch.float32 if device_type == "cpu" else torch.get_autocast_dtype(device_type)
