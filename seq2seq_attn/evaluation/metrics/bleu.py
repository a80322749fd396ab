"""sacrebleu's BLEU (and chrF) as every score of the package builds it: dev BLEU in training, `eval`, the
reports and the sentences they show.

sacrebleu warns "It looks like you forgot to detokenize your test data" when 100 or more hypotheses end in a
tokenised period (" ."). That is a real mistake when the references are detokenised, and no mistake when
the corpus itself is written that way (the synthetic corpus: "the dog sleeps ."). So the check stays on,
unless the references end in " ." just as often: then the hypotheses only follow the corpus.
"""

from __future__ import annotations

from collections.abc import Sequence

from sacrebleu.metrics import BLEU, CHRF

TOKENISED_PERIOD = " ."
SACREBLEU_THRESHOLD = 100  # hypotheses ending in " ." from which sacrebleu warns


def bleu_metric(references: Sequence[str], lowercase: bool = False) -> BLEU:
    """sacrebleu's default BLEU with `references` cached (one reference per sentence); `lowercase`: case-
    insensitive (sacrebleu -lc), for a model that writes lowercased text (`Vocab.lowercases`)."""
    return BLEU(references=[list(references)], lowercase=lowercase, force=written_tokenised(references))


def chrf_metric(references: Sequence[str], lowercase: bool = False) -> CHRF:
    """sacrebleu's default chrF with `references` cached; `lowercase`: case-insensitive, as the report's
    BLEU, so that the report's chrF and the sentence chrF of the examples it shows agree."""
    return CHRF(references=[list(references)], lowercase=lowercase)


def tokenised_bleu(references: Sequence[str]) -> BLEU:
    """BLEU of words made beforehand (`moses.Pipeline`): no further tokenisation and no smoothing, the
    setting of multi-bleu.perl, with which the paper and the shared tasks scored tokenised text."""
    return BLEU(references=[list(references)], tokenize="none", smooth_method="none", force=True)


def written_tokenised(references: Sequence[str]) -> bool:
    """True when the references themselves end in a tokenised period as often as sacrebleu warns about."""
    ending = sum(reference.endswith(TOKENISED_PERIOD) for reference in references)
    return ending >= min(SACREBLEU_THRESHOLD, max(1, len(references) // 2))
