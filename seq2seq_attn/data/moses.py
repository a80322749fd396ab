"""The Moses tokenizer and detokenizer (sacremoses), the word unit of Bahdanau et al. (2014).

The paper's 30k-word shortlists, its training limits of 30 or 50 words and the length buckets of its
Fig. 2 all count words of Moses-tokenised text, where punctuation and clitics are words of their own
("l'homme ," -> "l' homme ,"). With `data.tokenize: moses` the training text is tokenised once, when the
data is prepared; the vocabulary then tokenises every raw line the model reads and detokenises what it
writes, so users give and get the corpus' own text. `eval.words: moses` counts bucket lengths this way.

Tokenisation is tokenizer.perl's `-l LANG -no-escape`: characters stay as they are (no `&amp;`), so
sentencepiece sees the corpus' characters. It is not idempotent (tokenising "l' homme" again gives
"l ' homme"), hence the one rule: every text is tokenised exactly once.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sacremoses import MosesDetokenizer, MosesTokenizer


@functools.cache
def _tokenizer(lang: str) -> MosesTokenizer:
    from sacremoses import MosesTokenizer  # loaded on first use: its rule tables take a moment

    return MosesTokenizer(lang=lang)


@functools.cache
def _detokenizer(lang: str) -> MosesDetokenizer:
    from sacremoses import MosesDetokenizer

    return MosesDetokenizer(lang=lang)


def tokenize_line(line: str, lang: str, keep: Sequence[str] = ()) -> str:
    """One line as tokenizer.perl -l LANG -no-escape writes it: words separated by single spaces; the
    strings in `keep` (e.g. the vocabulary's "<unk>") stay whole."""
    protected = [re.escape(text) for text in keep] or None
    return _tokenizer(lang).tokenize(line, escape=False, return_str=True, protected_patterns=protected)


def tokenize(lines: Iterable[str], lang: str, keep: Sequence[str] = ()) -> list[str]:
    return [tokenize_line(line, lang, keep) for line in lines]


def detokenize(line: str, lang: str) -> str:
    """Undo `tokenize_line` (detokenizer.perl -l LANG): "l' homme ," -> "l'homme,"."""
    return _detokenizer(lang).detokenize(line.split())


def word_count(line: str, lang: str) -> int:
    """The number of Moses words in a line (the paper's sentence length)."""
    return len(tokenize_line(line, lang).split())
