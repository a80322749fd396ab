"""Validation during training: dev loss / perplexity by teacher forcing, and dev BLEU by decoding.

BLEU is sacrebleu on detokenised text against the raw reference lines of `valid.tgt`, exactly as a user
would score the final system (case-insensitive for a model that writes lowercased text, as `seq2seq eval`
scores it), so the number that picks the best checkpoint is the number reported. The search is the decode
section's at `train.valid_beam`, except that EOS is forced at the maximum length (`at_max_len:
force_eos`), so that a validation of an early model takes no retries.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np
import torch

from ..config import Config
from ..config.constants import SIDES
from ..decoding.search import evaluating, translate_ids
from ..evaluation.metrics.bleu import bleu_metric
from ..io import read_lines, sha256_text
from ..vocab.batching import collate
from ..vocab.cache import cache_stats, load_cache
from ..vocab.pieces import Vocab, vocab_dir
from .batches import cut_batches, length_order
from .log import perplexity
from .loss import batch_loss


@dataclass(frozen=True)
class DevSet:
    """The dev pairs validation reads, loaded once when training starts: another process that rewrites the
    data folder during the run (`vocab` or `prepare` with other settings, another `train` on it) cannot
    change what the run is validated on, nor score the model on another vocabulary's ids."""

    src: list[np.ndarray]  # each pair's source ids
    tgt: list[np.ndarray]  # each pair's target ids
    references: list[str]  # the raw `valid.tgt` lines (none when `train.valid_bleu` is off)


def load_dev(config: Config) -> DevSet:
    """The dev set as it is now: the token cache's pairs (the first `train.valid_max_sentences`) and
    their reference lines."""
    cache = load_cache(vocab_dir(config), "valid")
    count = min(len(cache.src), config.train.valid_max_sentences or len(cache.src))
    references = []
    if config.train.valid_bleu:
        references = list(itertools.islice(read_lines(config.data_dir / "valid.tgt"), count))
    return DevSet(
        [np.array(cache.src[i]) for i in range(count)],
        [np.array(cache.tgt[i]) for i in range(count)],
        references,
    )


def dev_fingerprint(config: Config) -> str:
    """What the dev set's text is, for a resume to compare: the sha256 of the prepared valid.src and
    valid.tgt that the token cache was encoded from (its manifest records them), on every rank."""
    entries = cache_stats(vocab_dir(config))
    return sha256_text(" ".join(entries[f"valid.{side}"]["sha256"] for side in SIDES))


@torch.no_grad()
def validate(
    model, dev: DevSet, config: Config, vocab: Vocab, device: torch.device, bf16: bool
) -> dict[str, float]:
    """Return {"loss", "ppl", "bleu"} on the dev set (BLEU 0.0 when train.valid_bleu is off)."""
    with evaluating(model):
        loss = _dev_loss(model, dev, config, device, bf16)
        bleu = _dev_bleu(model, dev, config, vocab, device) if config.train.valid_bleu else 0.0
    return {"loss": loss, "ppl": perplexity(loss), "bleu": bleu}


def _dev_loss(model, dev: DevSet, config: Config, device: torch.device, bf16: bool) -> float:
    src_lengths = np.array([len(ids) for ids in dev.src])
    tgt_lengths = np.array([len(ids) for ids in dev.tgt])
    order = length_order(src_lengths, tgt_lengths)
    total, tokens = 0.0, 0
    for examples in cut_batches(
        order, src_lengths, tgt_lengths, config.train.batch_type, config.train.batch_size
    ):
        batch = collate([dev.src[i] for i in examples], [dev.tgt[i] for i in examples]).to(device)
        total += batch_loss(model, batch, bf16).item()
        tokens += batch.n_tokens
    return total / max(tokens, 1)


def _dev_bleu(model, dev: DevSet, config: Config, vocab: Vocab, device: torch.device) -> float:
    sources = [ids.tolist() for ids in dev.src]
    # EOS is forced at the maximum length, not retried (`at_max_len`, decoding/search.py): an early model
    # finds nothing on most long sentences.
    decode = dataclasses.replace(
        config.decode, beam_size=config.train.valid_beam, nbest=1, at_max_len="force_eos"
    )
    hypotheses = translate_ids(model, sources, decode, device)
    texts = [vocab.decode_tgt(nbest[0].tokens) for nbest in hypotheses]
    return bleu_metric(dev.references, vocab.lowercases).corpus_score(texts, None).score
