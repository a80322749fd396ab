"""What a server lets one request ask for, how it batches requests, and what it allows a connection: each
default defined once, for `seq2seq serve`'s options and the Python that builds a server (no web framework
or torch to import); and the checks that refuse a request over them."""

from __future__ import annotations

import resource
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; each refused with a 413 and a one-line reason. A request's work
    grows with its sentences, their lengths and its n-best (a wider beam), and an attention answer with
    the square of each sentence's length (a weight per source piece per target piece): `max_request_chars`
    and `max_attention_chars` bound both, whatever the sentences' number and lengths. Characters are
    counted as the model reads them (`characters`)."""

    max_body_bytes: int = 1 << 20
    max_sentences: int = 64
    max_chars: int = 2000  # characters of one sentence
    max_nbest: int = 20
    max_request_chars: int = 16_000  # characters of a request's sentences, each counted n-best times
    max_attention_chars: int = 4000  # characters of a request's sentences when it asks for attention


@dataclass(frozen=True)
class BatchLimits:
    """When a micro-batch is full, and how long its first sentence may wait for others."""

    max_sentences: int = 32
    max_wait: float = 0.005  # seconds
    max_chars: int = 32_000  # sentences x the longest one's characters x the beam searched


def _half_the_open_files() -> int:
    """Half the process's open-file limit, at most 1,000: the other half for the models, logs and threads."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1000 if soft == resource.RLIM_INFINITY else max(16, min(1000, soft // 2))


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a client may take (seconds), how many connections may be open at once, and how long a
    stopping server takes to answer the requests in flight (at most 20 s: Kubernetes kills at 30 s)."""

    header_timeout: float = 10.0  # from a connection's opening, or its last answer, to the end of headers
    body_timeout: float = 30.0  # from the end of the headers to the end of the body
    keep_alive: float = 5.0  # an idle connection between two requests
    max_connections: int = field(default_factory=_half_the_open_files)
    grace: float = 15.0
    answer_timeout: float = 30.0  # an answer stuck unsent (its client not reading) before it is dropped


class Refusal(Exception):
    """A request refused with `status` and a one-line reason (answered as `{"error", "status"}`)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def characters(sentence: str) -> int:
    """A sentence's characters as the model reads them: after sentencepiece's NFKC normalisation, which
    makes some characters many (U+FDFA is 18), so that no spelling gets past the limits on the work."""
    return max(len(sentence), len(unicodedata.normalize("NFKC", sentence)))


def check_sentences(limits: Limits, sentences: Sequence[str], what: str = "sentences") -> None:
    """Refuse (413) more sentences than `limits` allow, or a sentence longer than they allow."""
    if len(sentences) > limits.max_sentences:
        raise Refusal(413, f"{len(sentences)} {what}: at most {limits.max_sentences} per request")
    for n, sentence in enumerate(sentences):
        if (count := characters(sentence)) > limits.max_chars:
            raise Refusal(413, f"{what}[{n}]: {count} characters, at most {limits.max_chars}")


def check_nbest(limits: Limits, n: int) -> None:
    if n > limits.max_nbest:
        raise Refusal(413, f"nbest {n}: at most {limits.max_nbest}")


def check_work(limits: Limits, sentences: Sequence[str], nbest: int = 1, attention: bool = False) -> None:
    """Refuse (413) a request whose work or attention answer is over `limits` (see `Limits`)."""
    chars = sum(map(characters, sentences))
    if chars * nbest > limits.max_request_chars:
        raise Refusal(
            413, f"{chars} characters x nbest {nbest}: at most {limits.max_request_chars} per request"
        )
    if attention and chars > limits.max_attention_chars:
        raise Refusal(
            413, f"attention for {chars} characters: at most {limits.max_attention_chars} per request"
        )
