"""The `seq2seq translate` pipeline: raw lines -> sentencepiece ids -> beam search -> detokenised text.

The contract is one output line per input line, in input order, whatever bytes come in:
- a line is what ends in "\\n" (a last line without it counts too); a trailing "\\r" is dropped;
- bytes are decoded as UTF-8, invalid sequences become U+FFFD;
- control characters (NUL, tab, ...) and Unicode line / paragraph separators become spaces, in the input
  (so they never reach the model, as in the prepared training data: data/clean.py's `plain_line`) and in
  the output (so they can never split a line downstream);
- empty or whitespace-only lines give empty output lines without running the model;
- a source longer than `decode.max_src_tokens` pieces is cut to that many, and
  only that part is translated: search time and memory grow with the source length (attention reads every
  piece at every step, and the output may be max_len_a * length + max_len_b tokens long).
Input is read in chunks of lines; each chunk is translated (sorted by length inside for speed) and its
output written and flushed before the next chunk is read, so translation streams through a pipe.

Output formats (`format_rows`):
- default: the best translation;
- with scores: `score<TAB>translation`, the normalised model score with 4 decimals (0 for empty lines);
- with nbest > 1: rows `index<TAB>rank<TAB>score<TAB>translation`, index the 0-based input line, rank
  1..nbest best first; an empty input line gives a single row (rank 1, score 0, empty translation).

UNK replacement (Jean et al. 2015; Luong et al. 2015): each generated <unk> becomes the source word that
holds the most attended source piece at that step (the source EOS is not a candidate), translated through
a dictionary (TSV: source word<TAB>target word) when it has the word, copied otherwise. An ensemble's
attention is over its first model's source pieces (ensemble.py says whose weights it averages).

Attention files: for input line i (0-based, non-empty lines only), `<dir>/<i:06d>.png`, a heat map of the
best hypothesis, and `<dir>/<i:06d>.json`: {"index", "source": pieces + </s>, "target": pieces + </s>,
"attention": one row per target piece, one column per source piece}.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from ..config import DecodeConfig
from ..console import progress
from ..data.clean import plain_line
from ..errors import UserError
from ..io import atomic_write, open_binary, read_lines
from ..model.attention import compiled_in_this_thread
from ..vocab.pieces import UNK_ID, WORD_BOUNDARY, Vocab, word_of_piece
from .search import Hypothesis, translate_ids

CHUNK_LINES = 1000  # lines translated together when reading a file or a pipe (1 on a terminal)
EOS_PIECE = "</s>"


def decode_lines(handle: BinaryIO) -> Iterator[str]:
    """Lines of a byte stream split on "\\n" only, decoded as UTF-8 with invalid bytes replaced. A read
    that fails (a truncated or corrupt .gz) is one line naming the stream's file."""
    try:
        for raw in handle:
            raw = raw.removesuffix(b"\n").removesuffix(b"\r")
            yield raw.decode("utf-8", errors="replace")
    except (OSError, EOFError) as err:  # EOFError: a .gz cut short (click would take it for Ctrl-D)
        raise UserError(f"{getattr(handle, 'name', 'the input')}: cannot read ({err})") from None


def load_dictionary(path: str | Path) -> dict[str, str]:
    """A `source word<TAB>target word` file (blank lines skipped; the first entry of a word wins)."""
    entries: dict[str, str] = {}
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        source, tab, target = line.partition("\t")
        if not tab or not source.strip() or not target.strip():
            raise UserError(f"{path}:{number}: expected `source word<TAB>target word`, got {line[:60]!r}")
        entries.setdefault(source.strip(), target.strip())
    return entries


def piece_words(pieces: Sequence[str]) -> list[str]:
    """For each source piece, the whitespace word it belongs to: ['▁new', 'ton'] -> ['newton', 'newton']."""
    owner = word_of_piece(pieces)
    words = [""] * (owner[-1] + 1 if owner else 0)
    for piece, word in zip(pieces, owner, strict=True):
        words[word] += piece.removeprefix(WORD_BOUNDARY)
    return [words[word] for word in owner]


@dataclass
class Translation:
    """One input line: the source pieces the model read (without </s>; only when attention was kept) and
    the n-best hypotheses with their detokenised texts, best first (both empty for an empty line)."""

    src_pieces: list[str]
    hypotheses: list[Hypothesis]
    texts: list[str]


class Translator:
    """A trained model (or an ensemble of them, ensemble.py), its vocabulary and the search settings,
    applied to lists of raw lines. `loader.load_translator` builds one from run folders."""

    def __init__(
        self,
        model,
        vocab: Vocab,
        decode_cfg: DecodeConfig,
        device: torch.device | str,
        with_attention: bool = False,
        other_src_vocabs: Sequence[Vocab] = (),
        dictionary: dict[str, str] | None = None,
    ) -> None:
        """vocab: the model's, or an ensemble's first model's: it reads the source (its pieces label the
        attention) and writes the target. other_src_vocabs: for an ensemble whose models read different
        source vocabularies, the further models' vocabularies, in order; each reads the source for its
        model. dictionary: `decode.unk_dictionary` already read (`with_settings`), else read here."""
        self.model, self.vocab, self.cfg, self.device = model, vocab, decode_cfg, device
        self.other_src_vocabs = list(other_src_vocabs)
        self.with_attention = with_attention or decode_cfg.replace_unk
        use_dictionary = decode_cfg.replace_unk and decode_cfg.unk_dictionary
        if dictionary is None:
            dictionary = load_dictionary(decode_cfg.unk_dictionary) if use_dictionary else {}
        self.dictionary = dictionary if use_dictionary else {}

    def translate(self, lines: Sequence[str]) -> list[Translation]:
        """One Translation per line, in order, searched CHUNK_LINES lines at a time, as the command line
        reads a file: an int8 search's results depend on the sentences searched beside them (one scale per
        input), so the API, `eval` and `translate` must search the same groups."""
        # greedy search gains nothing from compiling (too few rows per step) and would pay the compilation
        with compiled_in_this_thread(self.cfg.compile and self.cfg.beam_size > 1):
            return [
                translation
                for start in range(0, len(lines), CHUNK_LINES)
                for translation in self._translate_chunk(lines[start : start + CHUNK_LINES])
            ]

    def _translate_chunk(self, lines: Sequence[str]) -> list[Translation]:
        texts = [plain_line(line) for line in lines]
        todo = [i for i, text in enumerate(texts) if text]
        readings = [self.source_ids(vocab, [texts[i] for i in todo]) for vocab in self.source_vocabs]
        kept = [n for n, ids in enumerate(readings[0]) if ids]  # (a line can normalise to nothing)
        todo = [todo[n] for n in kept]
        ids, *other_ids = ([reading[n] for n in kept] for reading in readings)
        results = [Translation([], [], []) for _ in lines]
        searched = translate_ids(
            self.model,
            ids,
            self.cfg,
            self.device,
            with_attention=self.with_attention,
            other_src_ids=other_ids,
        )
        for i, nbest in zip(todo, searched, strict=True):
            pieces = self.vocab.src_pieces(texts[i])[: self.cfg.max_src_tokens] if self.with_attention else []
            results[i] = Translation(pieces, nbest, [self.hypothesis_text(hyp, pieces) for hyp in nbest])
        return results

    def with_settings(self, decode_cfg: DecodeConfig, with_attention: bool = False) -> Translator:
        """The same model and vocabularies searching with other settings (a server's batch, the API's
        n-best); the unknown-word dictionary is read again only when the settings name another one."""
        same = self.dictionary and decode_cfg.unk_dictionary == self.cfg.unk_dictionary
        return Translator(
            self.model,
            self.vocab,
            decode_cfg,
            self.device,
            with_attention,
            self.other_src_vocabs,
            self.dictionary if same else None,
        )

    @property
    def source_vocabs(self) -> list[Vocab]:
        """The vocabularies that read the source: the model's, or each of an ensemble's models'."""
        return [self.vocab, *self.other_src_vocabs]

    def source_ids(self, vocab: Vocab, texts: list[str]) -> list[list[int]]:
        """Each text's ids in `vocab`, cut to `decode.max_src_tokens`."""
        return [ids[: self.cfg.max_src_tokens] for ids in vocab.encode_src(texts)] if texts else []

    def hypothesis_text(self, hyp: Hypothesis, src_pieces: list[str]) -> str:
        """A hypothesis as output text: its pieces decoded and detokenised, each <unk> replaced when
        `decode.replace_unk` asks for it."""
        if not (self.cfg.replace_unk and UNK_ID in hyp.tokens):
            return plain_line(self.vocab.decode_tgt(hyp.tokens))
        words = piece_words(src_pieces)
        parts, start = [], 0
        for position, token in enumerate(hyp.tokens):
            if token == UNK_ID:
                parts.append(self.vocab.tgt_text(hyp.tokens[start:position]))
                # the attention row of this step, over the real source pieces (the last column is </s>)
                word = words[int(np.argmax(hyp.attention[position, : len(words)]))]
                parts.append(self.dictionary.get(word, word))
                start = position + 1
        parts.append(self.vocab.tgt_text(hyp.tokens[start:]))
        return plain_line(self.vocab.detokenize(" ".join(part for part in parts if part)))

    def attention(self, translation: Translation) -> tuple[np.ndarray, list[str], list[str]] | None:
        """The best hypothesis' attention (target pieces, source pieces), with the source and target
        pieces that label it (</s> included); None when nothing was attended (an empty line, or every
        continuation forbidden)."""
        if not translation.hypotheses or translation.hypotheses[0].attention is None:
            return None
        hyp = translation.hypotheses[0]
        source = [*translation.src_pieces, EOS_PIECE]
        target = [*self.vocab.tgt_pieces(hyp.tokens), EOS_PIECE]
        return hyp.attention, source, target


def format_rows(index: int, translation: Translation, nbest: int, scores: bool) -> list[str]:
    """The output line(s) of one input line (see the module docstring for the formats)."""
    pairs = list(zip(translation.hypotheses, translation.texts, strict=True)) or [(None, "")]
    score = lambda hyp: hyp.score if hyp is not None else 0.0  # noqa: E731
    if nbest > 1:
        return [nbest_row(index, rank, score(hyp), text) for rank, (hyp, text) in enumerate(pairs, start=1)]
    hyp, text = pairs[0]
    return [f"{score(hyp):.4f}\t{text}" if scores else text]


def nbest_row(index: int, rank: int, score: float, text: str) -> str:
    """One row of an n-best list: `index<TAB>rank<TAB>score<TAB>translation` (`seq2seq score --nbest`
    reads it back and writes it re-ranked)."""
    return f"{index}\t{rank}\t{score:.4f}\t{text}"


def translate_stream(
    translator: Translator,
    source: BinaryIO,
    sink: BinaryIO,
    scores: bool = False,
    each: Callable[[int, Translation], None] | None = None,
    chunk_lines: int = CHUNK_LINES,
) -> int:
    """Translate every line of `source` into `sink`, flushing after each chunk; returns the line count.

    `each(index, translation)` is called for every line, 0-based, in order (`heatmap.attention_files`
    writes each line's attention with it)."""
    lines = decode_lines(source)
    count = 0
    with progress(unit=" lines", desc="translate") as bar:
        while chunk := list(itertools.islice(lines, chunk_lines)):
            for offset, translation in enumerate(translator.translate(chunk)):
                rows = format_rows(count + offset, translation, translator.cfg.nbest, scores)
                sink.write("".join(row + "\n" for row in rows).encode("utf-8"))
                if each is not None:
                    each(count + offset, translation)
            sink.flush()
            count += len(chunk)
            bar.update(len(chunk))
    return count


def translate_file(
    translator: Translator,
    input_path: str,
    output_path: str,
    scores: bool = False,
    each: Callable[[int, Translation], None] | None = None,
) -> int:
    """`translate_stream` from a file (`.gz` read directly) or `-` (stdin) to a file, written atomically,
    or `-` (stdout); returns the line count. A person typing on stdin gets each line at once."""
    with contextlib.ExitStack() as stack:
        stdin = input_path == "-"
        source = sys.stdin.buffer if stdin else stack.enter_context(open_binary(input_path))
        sink = (
            sys.stdout.buffer if output_path == "-" else stack.enter_context(atomic_write(output_path, "wb"))
        )
        chunk = 1 if stdin and sys.stdin.isatty() else CHUNK_LINES
        return translate_stream(translator, source, sink, scores, each, chunk)
