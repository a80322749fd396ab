"""The checkpoint file: atomic to write, safe to load.

A checkpoint is one `torch.save` file holding tensors and plain Python data only (no pickled classes), so
it is always loaded with `torch.load(weights_only=True)`: a crafted file carrying a pickle payload is
refused and its payload never runs. It is written to a temporary file, fsynced and renamed over the
target, so a kill at any instant leaves the previous checkpoint intact. What a run folder holds is
`run_folder.py`'s; what a training checkpoint holds, `training/state.py`'s.
"""

from __future__ import annotations

import hashlib
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from ..errors import UserError
from ..io import atomic_write


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write `payload` atomically (temp file + flush + fsync + rename)."""
    with atomic_write(path, "wb") as handle:
        torch.save(payload, handle)


class CheckpointNotFound(UserError):
    """No checkpoint file at that path (a training run may have just removed it: see `average_latest`)."""


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint safely; a missing, truncated, corrupt or unsafe file is a one-line UserError.

    The file is opened once and read through that handle, so a training run that replaces or removes it
    meanwhile (a newer `best.pt`, best-K pruning) cannot make us read parts of two files.
    """
    path = Path(path)
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the `with` below
    except (FileNotFoundError, IsADirectoryError):
        raise CheckpointNotFound(f"{path}: checkpoint not found") from None
    with handle:
        if not zipfile.is_zipfile(handle):  # every checkpoint we write is a torch zip archive
            raise UserError(f"{path}: corrupt or truncated checkpoint (not a torch zip archive)")
        handle.seek(0)
        try:
            payload = torch.load(handle, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as err:
            raise UserError(
                f"{path}: refused to load checkpoint: it holds more than tensors and plain data "
                f"({_unsafe_reason(str(err))}); load only checkpoints written by seq2seq-attn"
            ) from None
        except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as err:
            raise UserError(
                f"{path}: corrupt or truncated checkpoint ({' '.join(str(err).split())[:160]})"
            ) from None
    if not (isinstance(payload, dict) and isinstance(payload.get("model"), dict)):
        raise UserError(f"{path}: not a seq2seq-attn checkpoint (no model weights inside)")
    if not isinstance(payload.get("config"), dict):
        raise UserError(f"{path}: not a seq2seq-attn checkpoint (no config inside)")
    return payload


def _unsafe_reason(message: str) -> str:
    """What torch's weights-only unpickler refused, from its long multi-line message."""
    if match := re.search(r"Unsupported global: GLOBAL (\S+)", message):
        return f"it references the Python object {match[1]}"
    if match := re.search(r"WeightsUnpickler error:\s*(\S.*)", message):
        return match[1].strip()[:120]
    return "unsafe content"


def weights_fingerprint(model: torch.nn.Module) -> str:
    """A SHA-256 of a model's parameters and buffers, name by name: what a file derived from one set of
    weights (a lexical shortlist) records, to tell later whether it is used with the same weights."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode("utf-8"))
        digest.update(tensor.detach().to("cpu").contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
