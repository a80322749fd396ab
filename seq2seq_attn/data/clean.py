"""Corpus cleaning: the rules of `data.clean`, applied in order to a stream of pairs, each one counted.

The rules run in the order of `CleanConfig` (normalise white space, drop empty, max words, length ratio,
de-duplicate), so a pair is charged to the first rule that drops it and the counts add up to
read - kept. Words are white-space separated tokens of the text as it reaches the cleaner: with
`data.tokenize: moses` that is Moses-tokenised text, where punctuation and clitics are words of their own,
the unit Bahdanau et al. counted; without it the same limit keeps somewhat longer sentences.
"""

from __future__ import annotations

import hashlib

from ..config import CleanConfig

Pair = tuple[str, str]
DROP_RULES = ("drop_empty", "max_words", "max_ratio", "dedup")


class Cleaner:
    """Cleans pairs one at a time; `normalized` and `dropped` count what each enabled rule did."""

    def __init__(self, config: CleanConfig) -> None:
        self.config = config
        self.normalized = 0  # pairs changed by normalize_whitespace
        self.dropped = {rule: 0 for rule in DROP_RULES if getattr(config, rule)}  # enabled rules only
        self._seen: set[bytes] = set()  # 8-byte digests, not the pairs: memory stays small on big corpora

    def clean(self, src: str, tgt: str) -> Pair | None:
        """The cleaned pair, or None when a rule drops it."""
        config = self.config
        if config.normalize_whitespace:
            cleaned = " ".join(src.split()), " ".join(tgt.split())
            self.normalized += cleaned != (src, tgt)
            src, tgt = cleaned
        if config.drop_empty and (not src.strip() or not tgt.strip()):
            return self._drop("drop_empty")
        shorter, longer = sorted((len(src.split()), len(tgt.split())))
        if config.max_words and longer > config.max_words:
            return self._drop("max_words")
        if config.max_ratio and longer > config.max_ratio * shorter:  # an empty side against words: dropped
            return self._drop("max_ratio")
        if config.dedup:
            key = hashlib.blake2b(f"{len(src)}:{src}{tgt}".encode(), digest_size=8).digest()
            if key in self._seen:
                return self._drop("dedup")
            self._seen.add(key)
        return src, tgt

    def _drop(self, rule: str) -> None:
        self.dropped[rule] += 1
        return None
