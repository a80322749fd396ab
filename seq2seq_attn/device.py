"""Where tensors live: one rule for every command that takes `auto | cpu | cuda`."""

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
