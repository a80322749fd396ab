"""What a server lets one request ask for, and how it batches requests: each default defined once, for
`seq2seq serve`'s options and the Python that builds a server (no web framework or torch to import)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; each refused with a 413 and a one-line reason."""

    max_body_bytes: int = 1 << 20
    max_sentences: int = 64
    max_chars: int = 2000  # characters of one sentence
    max_nbest: int = 20


@dataclass(frozen=True)
class BatchLimits:
    """When a micro-batch is full, and how long its first sentence may wait for others."""

    max_sentences: int = 32
    max_wait: float = 0.005  # seconds
