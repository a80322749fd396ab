"""Forced decoding: how likely a given translation is under a trained model (`seq2seq score`).

Each (source, target) pair is run through the model with the target forced (teacher forcing), and the
log-probability of every target piece and of the final EOS is read off the model's output distribution:
log p(y | x) = sum_i log p(y_i | y_<i, x), the quantity beam search maximises. The sum over a beam-search
output's own pieces equals the search's `Hypothesis.log_prob` (EOS included, no length normalisation).

The rows follow the translation contract (decoding/translate.py): one row per input line, in order. The
source is cleaned and cut to `decode.max_src_tokens` pieces as translation cuts it (the row says so); a
line whose source is empty has no score (null), and an empty target is scored as the EOS alone.

Scores also rank n-best lists (`rescore`): each hypothesis of `translate --nbest` is scored by one or more
models, each score optionally divided by a length penalty (search.length_penalty), and the weighted sum
re-ranks the list.

Perplexity: exp(-sum log p / pieces) over the scored pairs (pieces counting EOS), overall and by source
length bucket as `eval --by-length` buckets sentences.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ...config import Config, DecodeConfig, EvalConfig
from ...console import progress
from ...data.clean import plain_line
from ...decoding.forced import by_tokens, forced_pass
from ...decoding.search import length_penalty
from ...errors import UserError
from ...io import read_lines
from ...vocab.pieces import Vocab
from ..metrics.buckets import bucket_index, bucket_labels, check_edges, word_counts, words_unit
from ..metrics.report import words_label


@dataclass(frozen=True)
class Score:
    """One pair's forced-decoding score: the log-probability of each target piece, EOS last (None when
    the source is empty), and whether the source was cut to `decode.max_src_tokens` pieces."""

    piece_log_probs: list[float] | None
    src_cut: bool = False

    @property
    def log_prob(self) -> float | None:
        return None if self.piece_log_probs is None else math.fsum(self.piece_log_probs)

    @property
    def pieces(self) -> int:
        return 0 if self.piece_log_probs is None else len(self.piece_log_probs)

    @property
    def mean(self) -> float | None:
        return None if self.piece_log_probs is None else self.log_prob / self.pieces


def score_ids(
    model: nn.Module,
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    decode_cfg: DecodeConfig,
    device: torch.device | str,
) -> list[list[float]]:
    """Per pair, the log-probability of each target piece and of EOS under `model`, target forced.

    Pairs are batched as search batches them (`forced.by_tokens`: source plus target pieces per row,
    padded, within `decode.batch_tokens` and `decode.batch_sentences`); sources must not be empty. Runs in
    the decode precision (`forced_pass`).
    """
    lengths = [len(s) + len(t) + 2 for s, t in zip(src_ids, tgt_ids, strict=True)]
    batches = by_tokens(lengths, decode_cfg.batch_tokens, decode_cfg.batch_sentences)
    with progress(total=len(src_ids), unit=" pairs", desc="score") as bar:
        forced = forced_pass(
            model,
            src_ids,
            tgt_ids,
            device,
            batches,
            log_probs=True,
            precision=decode_cfg.precision,
            done=bar.update,
        )
    return [pair.log_probs for pair in forced]


class Scorer:
    """A trained model, its vocabulary and its run's config, scoring raw (source, target) lines as
    `seq2seq score` does (with the `decode` section's batch sizes, precision and source cut)."""

    def __init__(self, model: nn.Module, vocab: Vocab, config: Config, device: torch.device | str) -> None:
        self.model, self.vocab, self.config, self.device = model, vocab, config, device
        self.cfg = config.decode

    def score(self, sources: Sequence[str], targets: Sequence[str]) -> list[Score]:
        """One Score per pair, in order (see the module docstring for empty and long lines)."""
        if len(sources) != len(targets):
            raise UserError(f"{len(sources)} source lines but {len(targets)} target lines: one target each")
        src_texts, tgt_texts = [plain_line(line) for line in sources], [plain_line(line) for line in targets]
        todo = [i for i, text in enumerate(src_texts) if text]
        src_ids = self.vocab.encode_src([src_texts[i] for i in todo]) if todo else []
        tgt_ids = self.vocab.encode_tgt([tgt_texts[i] for i in todo]) if todo else []
        kept = [k for k, ids in enumerate(src_ids) if ids]  # (a line can normalise to nothing)
        limit = self.cfg.max_src_tokens
        scored = score_ids(
            self.model, [src_ids[k][:limit] for k in kept], [tgt_ids[k] for k in kept], self.cfg, self.device
        )
        results = [Score(None) for _ in sources]
        for k, values in zip(kept, scored, strict=True):
            results[todo[k]] = Score(values, src_cut=len(src_ids[k]) > limit)
        return results

    def perplexity(self, sources: Sequence[str], scores: Sequence[Score]) -> dict[str, Any]:
        """`perplexity_report` of these scores of `sources`, bucketed as the run's `eval` section says."""
        return perplexity_report(scores, sources, self.config.eval, self.config.data.src_lang)


# ----------------------------------------------------------------------------------------------------------
# output rows and the perplexity report

TSV_COLUMNS = ("log_prob", "pieces", "mean", "src_cut")


def format_score(index: int, score: Score, fmt: str, with_pieces: bool) -> str:
    """One output row: TSV `log_prob<TAB>pieces<TAB>mean<TAB>src_cut[<TAB>piece log-probs]` (empty fields
    for an unscored line), or a JSON object with the same names and `index`."""
    values = {
        "log_prob": score.log_prob,
        "pieces": score.pieces,
        "mean": score.mean,
        "src_cut": score.src_cut,
    }
    if fmt == "jsonl":
        row: dict[str, Any] = {"index": index, **values}
        if with_pieces:
            row["piece_log_probs"] = score.piece_log_probs
        return json.dumps(row)
    cells = [_cell(values[name]) for name in TSV_COLUMNS]
    if with_pieces:
        cells.append(" ".join(f"{value:.4f}" for value in score.piece_log_probs or []))
    return "\t".join(cells)


def _cell(value: float | int | bool | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(int(value))
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def perplexity_report(
    scores: Sequence[Score], sources: Sequence[str], config: EvalConfig, src_lang: str | None = None
) -> dict[str, Any]:
    """Corpus perplexity over the scored pairs, overall and per source-length bucket (`eval.buckets`,
    words counted as `eval.words` says, in `src_lang`); unscored lines are counted apart."""
    edges = check_edges(config.buckets)
    moses_words = words_unit(dataclasses.replace(config, bucket_by="source"), src_lang)
    lengths = word_counts(sources, moses_words)
    buckets = bucket_index(lengths, edges)
    groups = [("all", np.arange(len(scores)))] + [
        (bucket["label"], np.flatnonzero(buckets == number))
        for number, bucket in enumerate(bucket_labels(edges))
    ]
    return {
        "edges": edges,
        "words": words_label(moses_words),
        "rows": [_perplexity_row(label, [scores[i] for i in members]) for label, members in groups],
    }


def _perplexity_row(bucket: str, scores: Sequence[Score]) -> dict[str, Any]:
    scored = [score for score in scores if score.piece_log_probs is not None]
    pieces = sum(score.pieces for score in scored)
    log_prob = math.fsum(score.log_prob for score in scored)
    return {
        "bucket": bucket,
        "sentences": len(scored),
        "unscored": len(scores) - len(scored),
        "pieces": pieces,
        "log_prob": log_prob,
        "ppl": math.exp(-log_prob / pieces) if pieces else None,
    }


def render_perplexity(report: dict[str, Any]) -> str:
    """The report as a small text table."""
    lines = [f"{'bucket':<8} {'sentences':>9} {'pieces':>9} {'log p':>12} {'ppl':>9}"]
    for row in report["rows"]:
        ppl = f"{row['ppl']:.2f}" if row["ppl"] is not None else "-"
        lines.append(
            f"{row['bucket']:<8} {row['sentences']:>9} {row['pieces']:>9} {row['log_prob']:>12.2f} {ppl:>9}"
        )
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------
# n-best lists


@dataclass(frozen=True)
class NbestEntry:
    """One row of `translate --nbest`: the 0-based input line, the rank, the score and the translation."""

    index: int
    rank: int
    score: float
    text: str


def read_nbest(path: str, sources: int) -> list[NbestEntry]:
    """The rows of a `translate --nbest` file (index<TAB>rank<TAB>score<TAB>translation); each index must
    name one of the `sources` lines, and every source line must have at least one row."""
    entries = []
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t", 3)
        try:
            index, rank, score = int(fields[0]), int(fields[1]), float(fields[2])
            text = fields[3]
        except (ValueError, IndexError):
            raise UserError(
                f"{path}:{number}: expected `index<TAB>rank<TAB>score<TAB>translation` "
                f"(translate --nbest), got {line[:60]!r}"
            ) from None
        if not 0 <= index < sources:
            raise UserError(f"{path}:{number}: index {index} is not a line of the {sources}-line source")
        entries.append(NbestEntry(index, rank, score, text))
    missing = sorted(set(range(sources)) - {entry.index for entry in entries})
    if missing:
        raise UserError(
            f"{path}: no hypothesis for source line {missing[0]} ({len(missing)} lines without one)"
        )
    return entries


def rescore(
    entries: Sequence[NbestEntry],
    sources: Sequence[str],
    scorers: Sequence[Scorer],
    weights: Sequence[float],
    penalty: str,
    alpha: float,
) -> list[NbestEntry]:
    """Every hypothesis scored by each model as sum_k weight_k * log p_k / lp(pieces_k) (lp: `penalty`, as
    in search), then each source line's list re-ranked, best first; entries come back grouped by index."""
    if len(weights) != len(scorers):
        raise UserError(f"{len(weights)} weights for {len(scorers)} models: one weight each")
    hyp_sources = [sources[entry.index] for entry in entries]
    texts = [entry.text for entry in entries]
    total = np.zeros(len(entries))
    for scorer, weight in zip(scorers, weights, strict=True):
        for n, score in enumerate(scorer.score(hyp_sources, texts)):
            if score.log_prob is not None:  # an empty source: every hypothesis of it scores 0
                total[n] += weight * score.log_prob / length_penalty(score.pieces, penalty, alpha)
    order = sorted(
        range(len(entries)), key=lambda n: (entries[n].index, -total[n])
    )  # stable: ties keep order
    ranked: list[NbestEntry] = []
    for n in order:
        rank = ranked[-1].rank + 1 if ranked and ranked[-1].index == entries[n].index else 1
        ranked.append(NbestEntry(entries[n].index, rank, float(total[n]), entries[n].text))
    return ranked


def best_texts(ranked: Sequence[NbestEntry]) -> list[str]:
    """The first-ranked translation of each source line, in line order (`rescore`'s output)."""
    return [entry.text for entry in ranked if entry.rank == 1]


def load_scorer(path, device: torch.device | str = "cpu") -> Scorer:
    """A Scorer for a trained model (a run folder or checkpoint file, an exported model folder, a hub
    model: `loader.load_one`), with its own decode settings."""
    from ...decoding.loader import load_one

    trained = load_one(path, device)
    return Scorer(trained.model, trained.vocab, trained.config, device)
