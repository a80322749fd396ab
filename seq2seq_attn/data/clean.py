"""Corpus cleaning: the rules of `data.clean`, applied in order to a stream of pairs, each one counted.

The rules run in the order of `CleanConfig` (normalise white space, drop empty, max words, length ratio,
de-duplicate), so a pair is charged to the first rule that drops it and the counts add up to
read - kept. Words are white-space separated tokens of the text as it reaches the cleaner: with
`data.tokenize: moses` that is Moses-tokenised text, where punctuation and clitics are words of their own,
the unit Bahdanau et al. counted; without it the same limit keeps somewhat longer sentences.
"""

from __future__ import annotations

import hashlib
import unicodedata

from ..config import CleanConfig

Pair = tuple[str, str]
DROP_RULES = ("drop_empty", "max_words", "max_ratio", "dedup")
BREAKING = {"Cc", "Zl", "Zp"}  # control characters, line and paragraph separators


def without_breaks(text: str) -> str:
    """`text` with control characters (tab, NUL, ...) and line and paragraph separators turned into
    spaces: what the model reads of a line, in every prepared split (cleaning counts the white space it
    then normalises) and in every line translated or scored (`plain_line`), so that training and use see
    one text (sentencepiece and Moses would delete some of these characters and keep others)."""
    if text.isprintable():
        return text
    return "".join(" " if unicodedata.category(c) in BREAKING else c for c in text)


def plain_line(text: str) -> str:
    """A line as translation and scoring read it: `without_breaks`, stripped."""
    return without_breaks(text).strip()


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
