"""Length buckets: which bucket of sentence length each sentence falls in, one rule for BLEU by length
(by_length.py), perplexity by length (models/likelihood.py) and AER by length (models/align.py).

A sentence's length is its number of words in the source (or in the reference with
bucket_by="reference"): white-space separated, or with words="moses" the Moses tokenizer's words, the
paper's unit (the report's "words" says which, e.g. "moses:en"). Edges [0, 10, 20, ..., 60] define
half-open buckets [edge_i, edge_i+1): a 9-word sentence is in "0-10", a 10-word one in "10-20", and
the last bucket [60, inf) is labelled "60+". Empty buckets are kept (count 0, scores null); buckets with
fewer than min_bucket_size sentences are kept and flagged ("few": true), never hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...config import EvalConfig
from ...config.schema import check_edges
from ...data import moses
from ...errors import UserError, setting


def parse_edges(text: str) -> list[int]:
    """'0,10,20' -> [0, 10, 20], the `eval.buckets` the caller gives as text, checked by `check_edges`."""
    key = setting("eval.buckets")
    try:
        edges = [int(part) for part in text.split(",")]
    except ValueError:
        raise UserError(f"{key} {text!r}: expected comma-separated whole numbers, e.g. 0,10,20,30") from None
    return check_edges(edges, key)


def bucket_index(lengths: np.ndarray, edges: Sequence[int]) -> np.ndarray:
    """Bucket i of each length, edges[i] <= length < edges[i+1]; the last bucket is open-ended."""
    return np.searchsorted(np.asarray(edges), lengths, side="right") - 1


def bucket_labels(edges: Sequence[int]) -> list[dict[str, Any]]:
    """[0, 10, 60] -> 0-10, 10-60, 60+ ("10-60" holds 10 to 59 words)."""
    highs = [*edges[1:], None]
    return [
        {"label": f"{low}-{high}" if high is not None else f"{low}+", "low": low, "high": high}
        for low, high in zip(edges, highs, strict=True)
    ]


def word_counts(lines: Sequence[str], moses_lang: str | None = None) -> np.ndarray:
    """Words per line: white-space separated, or the Moses tokenizer's words of language `moses_lang`."""
    if moses_lang:
        return np.array([moses.word_count(line, moses_lang) for line in lines], dtype=np.int64)
    return np.array([len(line.split()) for line in lines], dtype=np.int64)


def words_unit(config: EvalConfig, words_lang: str | None) -> str | None:
    """The Moses language bucket lengths are counted in, or None for white-space words (`eval.words`)."""
    if config.words == "whitespace":
        return None
    if not words_lang:
        raise UserError(f"eval.words: moses needs the language of the {config.bucket_by} sentences")
    return words_lang
