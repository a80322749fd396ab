"""The Moses tokenizer and detokenizer (sacremoses), the word unit of Bahdanau et al. (2014).

The paper's 30k-word shortlists, its training limits of 30 or 50 words and the length buckets of its
Fig. 2 all count words of Moses-tokenised text, where punctuation and clitics are words of their own
("l'homme ," -> "l' homme ,"). With `data.tokenize: moses` the training text is tokenised once, when the
data is prepared; the vocabulary then tokenises every raw line the model reads and detokenises what it
writes, so users give and get the corpus' own text. `eval.words: moses` counts bucket lengths this way.

Tokenisation is tokenizer.perl's `-l LANG -no-escape`: characters stay as they are (no `&amp;`), so
sentencepiece sees the corpus' characters. It is not idempotent (tokenising "l' homme" again gives
"l ' homme"), hence the one rule: every text is tokenised exactly once.

A tokenised BLEU counts the words of a `Pipeline` of the Moses scripts: the paper's is the tokenizer
alone; a shared task's is often lowercase.perl, normalize-punctuation.perl and tokenizer.perl with its
escaping (`&apos;`, `&quot;`), the processing of the task's official references (`task_pipeline`, e.g.
Multi30k's `*.lc.norm.tok.*` files, which it reproduces line for line).

`data.tokenize: task` trains on the text in that form (`text_pipeline`), as the shared tasks' systems
did: lowercased and punctuation-normalised before the tokenizer, whose escaping alone is left out (a
one-to-one map of six characters, which the task's BLEU applies when it scores).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer


@functools.cache
def _tokenizer(lang: str) -> MosesTokenizer:
    from sacremoses import MosesTokenizer  # loaded on first use: its rule tables take a moment

    return MosesTokenizer(lang=lang)


@functools.cache
def _detokenizer(lang: str) -> MosesDetokenizer:
    from sacremoses import MosesDetokenizer

    return MosesDetokenizer(lang=lang)


@functools.cache
def _normalizer(lang: str) -> MosesPunctNormalizer:
    from sacremoses import MosesPunctNormalizer

    # perl_parity: as the script, a right single quote that is not between two ASCII letters becomes '"'
    # (Multi30k's reference "coup d &quot; œil"); sacremoses' own default makes it an apostrophe
    return MosesPunctNormalizer(lang=lang, perl_parity=True)


def tokenize_line(line: str, lang: str, keep: Sequence[str] = (), escape: bool = False) -> str:
    """One line as tokenizer.perl -l LANG -no-escape writes it (with `escape`, as tokenizer.perl -l LANG:
    `'` -> `&apos;`, `"` -> `&quot;`, ...): words separated by single spaces; the strings in `keep` (e.g.
    the vocabulary's "<unk>") stay whole."""
    protected = [re.escape(text) for text in keep] or None
    return _tokenizer(lang).tokenize(line, escape=escape, return_str=True, protected_patterns=protected)


def detokenize(line: str, lang: str) -> str:
    """Undo `tokenize_line` (detokenizer.perl -l LANG): "l' homme ," -> "l'homme,"."""
    return _detokenizer(lang).detokenize(line.split())


def word_count(line: str, lang: str) -> int:
    """The number of Moses words in a line (the paper's sentence length)."""
    return len(tokenize_line(line, lang).split())


def normalize_punctuation(line: str, lang: str) -> str:
    """One line as normalize-punctuation.perl -l LANG writes it. The script reads each line with its line
    end, and for de, es and fr it moves a period out of a closing quote when any character follows
    (`(\\.+)"(\\s*[^<])`): at the end of a line, the line end is that character. So the line is given
    with one here (sacremoses strips it again)."""
    return _normalizer(lang).normalize(line + "\n")


@dataclass(frozen=True)
class Pipeline:
    """The Moses scripts that make a tokenised BLEU's words, in the order they run: lowercase.perl,
    normalize-punctuation.perl -l LANG, tokenizer.perl -l LANG (-no-escape unless `escape`)."""

    lang: str
    lowercase: bool = False
    normalize: bool = False
    escape: bool = False

    def line(self, text: str, keep: Sequence[str] = ()) -> str:
        """One line through the scripts; the strings in `keep` stay whole (`tokenize_line`)."""
        return tokenize_line(self.before_tokenizing(text), self.lang, keep, escape=self.escape)

    def before_tokenizing(self, text: str) -> str:
        """What the scripts before tokenizer.perl make of `text`: lowercased and punctuation normalised
        where this pipeline does that (for words tokenised already, such as a gold alignment's)."""
        if self.lowercase:
            text = text.lower()
        if self.normalize:
            text = normalize_punctuation(text, self.lang)
        return text

    def __call__(self, lines: Iterable[str], keep: Sequence[str] = ()) -> list[str]:
        return [self.line(text, keep) for text in lines]

    def describe(self) -> str:
        """The steps for a score's signature: "moses-tokenizer:fr" (the paper's) or
        "lowercase+moses-punct-norm+moses-tokenizer-escape:fr" (`task_pipeline`)."""
        steps = ["lowercase"] * self.lowercase + ["moses-punct-norm"] * self.normalize
        steps.append("moses-tokenizer" + "-escape" * self.escape)
        return "+".join(steps) + f":{self.lang}"


def task_pipeline(lang: str) -> Pipeline:
    """The processing of a shared task's official references: lowercased, punctuation normalised,
    tokenised with escaping, as Multi30k's scripts/task1-tokenize.sh made its `*.lc.norm.tok.*` files,
    against which the WMT multimodal tasks scored BLEU."""
    return Pipeline(lang, lowercase=True, normalize=True, escape=True)


def text_pipeline(scheme: str, lang: str) -> Pipeline:
    """The processing that `data.tokenize: SCHEME` ("moses" or "task") gives a language's text: "moses"
    the tokenizer alone (the paper's words); "task" the shared task's processing (`task_pipeline`) without
    its escaping, so that sentencepiece sees the text's own characters."""
    if scheme == "moses":
        return Pipeline(lang)
    if scheme == "task":
        return Pipeline(lang, lowercase=True, normalize=True)
    raise ValueError(f"no Moses processing for data.tokenize {scheme!r}")
