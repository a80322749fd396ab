"""seq2seq-attn: RNN encoder-decoder NMT with attention, and BLEU by sentence length.

The Python API (api.py, docs/api.md): `load` a trained run, then `translate`, `nbest`, `score`,
`perplexity` and `attention` from Python. Its names load on first use, so `import seq2seq_attn` (and the
`seq2seq` command) stays fast: torch is imported only when a model is.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "load": "api",
    "Model": "api",
    "Candidate": "api",
    "Attention": "api",
    "Found": "api",
    "Score": "evaluation.models.likelihood",
    "UserError": "errors",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    """The API's names, imported from their modules when first used (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'seq2seq_attn' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value
