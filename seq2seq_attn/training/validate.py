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

import numpy as np
import torch

from ..config import Config
from ..decoding.search import evaluating, translate_ids
from ..evaluation.metrics.bleu import bleu_metric
from ..io import read_lines
from ..vocab.batching import collate
from ..vocab.cache import load_cache
from ..vocab.pieces import Vocab, vocab_dir
from .batches import cut_batches, length_order
from .log import perplexity
from .loss import batch_loss


@torch.no_grad()
def validate(model, config: Config, vocab: Vocab, device: torch.device, bf16: bool) -> dict[str, float]:
    """Return {"loss", "ppl", "bleu"} on the dev set (BLEU 0.0 when train.valid_bleu is off)."""
    with evaluating(model):
        cache = load_cache(vocab_dir(config), "valid")
        count = len(cache.src)
        if config.train.valid_max_sentences:
            count = min(count, config.train.valid_max_sentences)
        loss = _dev_loss(model, cache, count, config, device, bf16)
        bleu = _dev_bleu(model, cache, count, config, vocab, device) if config.train.valid_bleu else 0.0
    return {"loss": loss, "ppl": perplexity(loss), "bleu": bleu}


def _dev_loss(model, cache, count: int, config: Config, device: torch.device, bf16: bool) -> float:
    src_lengths = np.asarray(cache.src.lengths[:count])
    tgt_lengths = np.asarray(cache.tgt.lengths[:count])
    order = length_order(src_lengths, tgt_lengths)
    total, tokens = 0.0, 0
    for examples in cut_batches(
        order, src_lengths, tgt_lengths, config.train.batch_type, config.train.batch_size
    ):
        batch = collate([cache.src[i] for i in examples], [cache.tgt[i] for i in examples]).to(device)
        total += batch_loss(model, batch, bf16).item()
        tokens += batch.n_tokens
    return total / max(tokens, 1)


def _dev_bleu(model, cache, count: int, config: Config, vocab: Vocab, device: torch.device) -> float:
    sources = [list(map(int, cache.src[i])) for i in range(count)]
    references = list(itertools.islice(read_lines(config.data_dir / "valid.tgt"), count))
    # EOS is forced at the maximum length, not retried (`at_max_len`, decoding/search.py): an early model
    # finds nothing on most long sentences.
    decode = dataclasses.replace(
        config.decode, beam_size=config.train.valid_beam, nbest=1, at_max_len="force_eos"
    )
    hypotheses = translate_ids(model, sources, decode, device)
    texts = [vocab.decode_tgt(nbest[0].tokens) for nbest in hypotheses]
    return bleu_metric(references, vocab.lowercases).corpus_score(texts, None).score
