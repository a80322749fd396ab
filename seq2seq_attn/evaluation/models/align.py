"""Does attention align? Alignment error rate of a model's attention against hand-made word alignments.

Bahdanau et al. 2014 (Fig. 3) show attention matrices as soft alignments but never measure them. Here each
reference is forced through a trained model (teacher forcing), its attention is turned into links between
the whitespace-separated words of the source and the reference, and those links A are scored against gold
sure links S and possible links P (P includes S), as Och & Ney (2003) define:

    precision = |A ∩ P| / |A|     recall = |A ∩ S| / |S|     AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

The four counts are summed over the corpus (or a length bucket) before dividing, as Och & Ney do, so a long
sentence weighs more than a short one. A value whose denominator is 0 is None: precision with no predicted
link, recall with no sure link, AER with neither. AER, precision and recall are fractions in [0, 1].

Gold files. A link is (source word, target word).
- `pharaoh`: line k holds the links of sentence pair k, space-separated: `i-j` is sure, `i?j` or `ipj`
  possible (the `p` of the WPT Hansards set as distributed with awesome-align). Word numbers count from 0
  (Pharaoh, fast_align), or from 1 with `one_indexed`.
- `naacl` (HLT-NAACL 2003 / WPT shared tasks): one link per line, `sentence source target [S|P] [confidence]`,
  all counting from 1 (sentence k is line k of the source and reference files); without S/P a link is sure;
  word 0 is NULL and such links are skipped, as the WPT scorer does.
A malformed link or a word number outside the sentence is an error naming the file and line.

From attention to word links. The model reads sentencepiece pieces. Each word is encoded on its own, so
which pieces belong to which word is known exactly; sentencepiece splits lines on whitespace before anything
else, so the concatenation is what it gives for the whole line. The piece matrix alpha (target pieces x
source pieces) becomes a word matrix as `diagnostics.word_attention` forms it (the sum over a source
word's pieces, the mean over a target word's pieces, the </s> row and column dropped).

Links. `argmax`: every target word links to its most attended source word, one link per target word (the
rule of Garg et al. 2019 and of most attention-alignment work). `threshold`: every pair whose word-level
weight is at least the threshold, so a target word may link to several source words or to none. The
diagonal baseline links target word j (of m) to the source word at the same relative position, source word
floor((j + 1/2) n / m) of n.

Buckets by source length in words use the evaluation's own definition (`evaluate.bucket_index`).
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from ...config import EvalConfig
from ...decoding.forced import by_source_length, forced_pass
from ...errors import UserError
from ...io import read_lines
from ..metrics.buckets import bucket_index, bucket_labels, word_counts
from ..metrics.diagnostics import word_attention

GOLD_FORMATS = ("pharaoh", "naacl")
METHODS = ("argmax", "threshold")
DEFAULT_THRESHOLD = EvalConfig().align_threshold
PHARAOH_LINK = re.compile(r"([0-9]+)([-p?])([0-9]+)")
NAACL_USAGE = "expected `sentence source target [S|P] [confidence]`"
SURE_STYLE = {"marker": "s", "facecolors": "none", "edgecolors": "tab:red", "linewidths": 1.5}
POSSIBLE_STYLE = {"marker": "o", "facecolors": "none", "edgecolors": "tab:orange", "linewidths": 1.2}

Link = tuple[int, int]  # (source word, target word), both counted from 0


@dataclass(frozen=True)
class GoldLinks:
    """The hand-made links of one sentence pair: S and P (P includes S)."""

    sure: frozenset[Link]
    possible: frozenset[Link]


@dataclass(frozen=True)
class AlignmentCorpus:
    """Line-aligned sources and references, split into words, with their gold links."""

    src_words: list[list[str]]
    tgt_words: list[list[str]]
    gold: list[GoldLinks]


class GoldLink(NamedTuple):
    """One link as read from a gold file, already counted from 0, with where it was read (for errors)."""

    sentence: int
    src: int
    tgt: int
    sure: bool
    where: str
    text: str


# ----------------------------------------------------------------------------------------------------------
# gold files


def pharaoh_links(path: str, lines: Sequence[str], one_indexed: bool) -> Iterator[GoldLink]:
    """The links of a Pharaoh file's lines, line k being sentence pair k."""
    base = 1 if one_indexed else 0
    for number, line in enumerate(lines, start=1):
        for token in line.split():
            match = PHARAOH_LINK.fullmatch(token)
            if match is None:
                raise UserError(
                    f"{path}:{number}: malformed link {token!r}: expected i-j (sure), i?j or ipj (possible)"
                )
            src, tgt = int(match[1]) - base, int(match[3]) - base
            yield GoldLink(number - 1, src, tgt, match[2] == "-", f"{path}:{number}", token)


def naacl_links(path: str, lines: Sequence[str]) -> Iterator[GoldLink]:
    """The links of a NAACL file's lines, one a line (blank lines skipped, NULL links dropped)."""
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            continue
        where = f"{path}:{number}"
        kind, parsed = _naacl_extras(fields[3:])
        if len(fields) < 3 or not all(field.isdecimal() for field in fields[:3]) or not parsed:
            raise UserError(f"{where}: malformed link {line.strip()!r}: {NAACL_USAGE}")
        sentence, src, tgt = (int(field) for field in fields[:3])
        if src and tgt:  # word 0 is NULL
            yield GoldLink(sentence - 1, src - 1, tgt - 1, kind != "P", where, " ".join(fields[:3]))


def _naacl_extras(extras: Sequence[str]) -> tuple[str, bool]:
    """(S or P, whether the rest parses) from the optional `[S|P] [confidence]` fields."""
    kind = "S"
    if extras and extras[0].upper() in ("S", "P"):
        kind, extras = extras[0].upper(), extras[1:]
    try:
        return kind, len(extras) <= 1 and all(float(extra) >= 0 for extra in extras)
    except ValueError:
        return kind, False


def read_gold(
    path: str, fmt: str, shapes: Sequence[tuple[int, int]], one_indexed: bool = False
) -> list[GoldLinks]:
    """The gold links of each sentence pair; `shapes` are the (source, target) word counts of each pair."""
    lines = list(read_lines(path))
    if fmt == "pharaoh":
        if len(lines) != len(shapes):
            raise UserError(
                f"{path} has {len(lines)} lines but there are {len(shapes)} sentence pairs: a Pharaoh gold "
                "file holds one line per pair"
            )
        links = pharaoh_links(path, lines, one_indexed)
    elif fmt == "naacl":
        links = naacl_links(path, lines)
    else:
        raise UserError(f"gold alignment format {fmt!r}: expected one of {', '.join(GOLD_FORMATS)}")
    sure: list[set[Link]] = [set() for _ in shapes]
    possible: list[set[Link]] = [set() for _ in shapes]
    for link in links:
        if not 0 <= link.sentence < len(shapes):
            raise UserError(
                f"{link.where}: sentence {link.sentence + 1} is out of range: there are {len(shapes)} "
                "sentence pairs"
            )
        src_count, tgt_count = shapes[link.sentence]
        if not (0 <= link.src < src_count and 0 <= link.tgt < tgt_count):
            counted = "1" if one_indexed or fmt == "naacl" else "0"
            raise UserError(
                f"{link.where}: link {link.text!r} is out of range: sentence pair {link.sentence + 1} has "
                f"{src_count} source and {tgt_count} target words (counted from {counted})"
            )
        possible[link.sentence].add((link.src, link.tgt))
        if link.sure:
            sure[link.sentence].add((link.src, link.tgt))
    return [GoldLinks(frozenset(s), frozenset(p)) for s, p in zip(sure, possible, strict=True)]


def load_corpus(
    src: str, ref: str, gold: str, fmt: str = "pharaoh", one_indexed: bool = False
) -> AlignmentCorpus:
    """Read line-aligned source, reference and gold-alignment files."""
    src_words = [line.split() for line in read_lines(src)]
    tgt_words = [line.split() for line in read_lines(ref)]
    if len(src_words) != len(tgt_words):
        raise UserError(
            f"{src} has {len(src_words)} lines but {ref} has {len(tgt_words)}: they must be line-aligned"
        )
    if not src_words:
        raise UserError(f"{src}: no sentence pairs to align")
    shapes = [(len(s), len(t)) for s, t in zip(src_words, tgt_words, strict=True)]
    return AlignmentCorpus(src_words, tgt_words, read_gold(gold, fmt, shapes, one_indexed))


# ----------------------------------------------------------------------------------------------------------
# attention -> word scores


def encode_words(
    encode: Callable[[list[str]], list[list[int]]], sentences: Sequence[Sequence[str]]
) -> tuple[list[list[int]], list[list[int]]]:
    """(piece ids of each sentence, number of pieces of each of its words), every word encoded on its own."""
    pieces = iter(encode([word for words in sentences for word in words]))  # one batched call
    ids, counts = [], []
    for words in sentences:
        encoded = [next(pieces) for _ in words]
        ids.append([i for word in encoded for i in word])
        counts.append([len(word) for word in encoded])
    return ids, counts


def as_read(vocab, side: int, sentences: list[list[str]]) -> list[list[str]]:
    """Gold words (tokenised already) as the model reads its text: lowercased and punctuation normalised
    where its vocabulary's processing does that (`data.tokenize: task`), or a cased word would be <unk>."""
    if vocab.text is None:
        return sentences
    pipeline = vocab.text[side]
    return [[pipeline.before_tokenizing(word) for word in words] for words in sentences]


def attention_scores(model, vocab, corpus: AlignmentCorpus, device: torch.device | str) -> list[np.ndarray]:
    """The model's word-level attention (target words, source words) for every pair, references forced."""
    # the gold sentences come word-tokenised: a word is read as it is (Moses would take a lone word for a
    # sentence and split "etc." or "n't"), so each word's pieces stay its own
    src_words, tgt_words = as_read(vocab, 0, corpus.src_words), as_read(vocab, 1, corpus.tgt_words)
    src_ids, src_counts = encode_words(functools.partial(vocab.encode_src, tokenized=True), src_words)
    tgt_ids, tgt_counts = encode_words(functools.partial(vocab.encode_tgt, tokenized=True), tgt_words)
    forced = forced_pass(model, src_ids, tgt_ids, device, by_source_length(src_ids), attention=True)
    pieces = [pair.attention for pair in forced]
    return [
        word_attention(weights, s, t) for weights, s, t in zip(pieces, src_counts, tgt_counts, strict=True)
    ]


def diagonal_scores(corpus: AlignmentCorpus) -> list[np.ndarray]:
    """The baseline as scores: 1 where target word j of m meets source word floor((j + 1/2) n / m) of n."""
    scores = []
    for src, tgt in zip(corpus.src_words, corpus.tgt_words, strict=True):
        n, m = len(src), len(tgt)
        matrix = np.zeros((m, n))
        if n:
            matrix[np.arange(m), ((np.arange(m) + 0.5) * n / m).astype(int)] = 1.0
        scores.append(matrix)
    return scores


# ----------------------------------------------------------------------------------------------------------
# links and scores


def predict_links(scores: np.ndarray, method: str, threshold: float = DEFAULT_THRESHOLD) -> set[Link]:
    """Links from word scores (target words, source words) by `argmax` or `threshold` (module docstring)."""
    if method == "argmax":
        attended = np.flatnonzero(scores.sum(axis=1) > 0)  # target words with any weight (and source words)
        return {(int(scores[j].argmax()), int(j)) for j in attended}
    if method == "threshold":
        return {(int(i), int(j)) for j, i in zip(*np.nonzero(scores >= threshold), strict=True)}
    raise UserError(f"alignment method {method!r}: expected one of {', '.join(METHODS)}")


def link_counts(predicted: set[Link], gold: GoldLinks) -> np.ndarray:
    """[|A|, |S|, |A ∩ S|, |A ∩ P|] of one sentence pair."""
    return np.array(
        [len(predicted), len(gold.sure), len(predicted & gold.sure), len(predicted & gold.possible)],
        dtype=np.int64,
    )


def alignment_scores(counts: np.ndarray) -> dict[str, Any]:
    """AER, precision, recall (None where undefined) and sentence count from per-sentence counts (n, 4)."""
    predicted, sure, hit_sure, hit_possible = (int(total) for total in counts.sum(axis=0))
    return {
        "aer": 1 - (hit_sure + hit_possible) / (predicted + sure) if predicted + sure else None,
        "precision": hit_possible / predicted if predicted else None,
        "recall": hit_sure / sure if sure else None,
        "sentences": len(counts),
    }


def diagonal_links(corpus: AlignmentCorpus) -> list[set[Link]]:
    """The links of the diagonal baseline aligner, sentence by sentence."""
    return [predict_links(matrix, "argmax") for matrix in diagonal_scores(corpus)]


def score_links(
    predicted: Sequence[set[Link]], corpus: AlignmentCorpus, edges: Sequence[int] | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Scores over the corpus and, with bucket `edges`, per source-length bucket (empty buckets kept)."""
    counts = np.array(
        [link_counts(links, gold) for links, gold in zip(predicted, corpus.gold, strict=True)], dtype=np.int64
    ).reshape(-1, 4)  # (sentences, 4)
    by_length = []
    if edges:
        index = bucket_index(word_counts([" ".join(words) for words in corpus.src_words]), edges)
        for number, bucket in enumerate(bucket_labels(edges)):
            by_length.append({"bucket": bucket["label"], **alignment_scores(counts[index == number])})
    return alignment_scores(counts), by_length


# ----------------------------------------------------------------------------------------------------------
# figures


def alignment_figure(
    scores: np.ndarray, src_words: list[str], tgt_words: list[str], gold: GoldLinks, title: str
):
    """The word-level heat map with the gold links on top: sure as red squares, possible as orange circles."""
    from .heatmap import attention_figure, axis_layout  # matplotlib is slow to import: only when drawing

    figure = attention_figure(scores, src_words, tgt_words)
    axes = figure.axes[0]
    cell = 72 * min(axis_layout(len(words))[0] / max(len(words), 1) for words in (src_words, tgt_words))
    for links, style in ((gold.possible - gold.sure, POSSIBLE_STYLE), (gold.sure, SURE_STYLE)):
        if links:
            src, tgt = zip(*sorted(links), strict=True)
            axes.scatter(src, tgt, s=(0.6 * cell) ** 2, **style)
    axes.set_title(f"{title}\nred squares: sure gold links, orange circles: possible", fontsize="small")
    return figure


def figure_svg(figure) -> str:
    """The figure, laid out again for its title, as an inline `<svg>` element (plots.svg_text)."""
    from ..metrics.plots import svg_text

    with warnings.catch_warnings():  # a glyph missing from the font draws as a box (see heatmap.py)
        warnings.simplefilter("ignore", UserWarning)
        figure.tight_layout()
        return svg_text(figure)


def check_sentences(sentences: Sequence[int], count: int) -> list[int]:
    for number in sentences:
        if not 1 <= number <= count:
            raise UserError(f"sentence {number} to draw: sentences count from 1 to {count}")
    return list(sentences)


# ----------------------------------------------------------------------------------------------------------
# the section


def method_label(method: str, threshold: float) -> str:
    return f"threshold {threshold:g}" if method == "threshold" else method


def alignment_section(
    corpus: AlignmentCorpus,
    scores: Sequence[np.ndarray],
    *,
    method: str = "argmax",
    threshold: float = DEFAULT_THRESHOLD,
    edges: Sequence[int] | None = None,
    baseline: bool = True,
    figures: Sequence[int] = (),
    title: str = "attention",
) -> dict[str, Any]:
    """AER of the word `scores` (from `attention_scores` or `diagonal_scores`) as JSON-able data:

    {"method": "argmax" | "threshold 0.3",
     "overall": {"aer", "precision", "recall", "sentences"},
     "by_length": [{"bucket": "0-10", "aer", "precision", "recall", "sentences"}, ...] ([] without edges),
     "baseline": the diagonal aligner's overall scores (same keys as "overall"), or None,
     "figures": [{"title": str, "svg": an inline <svg> element}, ...] one heat map per sentence number
                in `figures` (counted from 1)}
    """
    figures = check_sentences(figures, len(corpus.gold))
    links = [predict_links(matrix, method, threshold) for matrix in scores]
    overall, by_length = score_links(links, corpus, edges)
    drawn = []
    for number in figures:
        label = f"sentence {number}: {title} ({method_label(method, threshold)})"
        figure = alignment_figure(
            scores[number - 1],
            corpus.src_words[number - 1],
            corpus.tgt_words[number - 1],
            corpus.gold[number - 1],
            label,
        )
        drawn.append({"title": label, "svg": figure_svg(figure)})
    return {
        "method": method_label(method, threshold),
        "overall": overall,
        "by_length": by_length,
        "baseline": score_links(diagonal_links(corpus), corpus, None)[0] if baseline else None,
        "figures": drawn,
    }


# ----------------------------------------------------------------------------------------------------------
# text


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def render_text(section: dict[str, Any], diagonal_by_length: Sequence[dict[str, Any]] = ()) -> str:
    """The section as a table in percent; `diagonal_by_length` adds the baseline's AER per bucket."""
    baseline = section["baseline"] or {}
    diagonal = {row["bucket"]: row["aer"] for row in diagonal_by_length}
    rows = [{"bucket": "all", **section["overall"]}, *section["by_length"]]
    header = ("bucket", "sentences", "AER %", "precision %", "recall %", "diagonal AER %")
    cells = [
        [
            row["bucket"],
            str(row["sentences"]),
            percent(row["aer"]),
            percent(row["precision"]),
            percent(row["recall"]),
            percent(baseline.get("aer") if row["bucket"] == "all" else diagonal.get(row["bucket"])),
        ]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [list(header), *cells]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in [list(header), *cells]
    ]
    note = (
        f"Links: {section['method']}; AER, precision and recall (Och & Ney 2003) summed over the sentences; "
        "diagonal: target word j of m linked to source word floor((j + 1/2) n / m) of n."
    )
    return "\n".join([note, "", *lines]) + "\n"
