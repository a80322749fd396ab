"""Ensemble decoding: several trained models searched as one, over the mean of their log-probabilities.

Why an object with a model's search interface: beam search (search.py) calls `encode`, `init_state` and
`step`, and index_selects what they return. `Ensemble` answers the same calls by asking every model and
combining the answers; its encoder outputs and decoder states hold one per model (`PerModel`), and
selecting rows selects the same rows of each. So one search serves one model and many, and an ensemble
of one model, or of a model with itself, searches exactly as that model does (same tokens, same scores).

The combination: at every step log p(y) = (1/M) sum_m log p_m(y), the mean of the M models' log-softmax
outputs, as OpenNMT-py does (Marian sums weighted log-probabilities, which ranks alike with equal
weights; fairseq averages the probabilities instead). The mean is not a normalised distribution; a
hypothesis' score sums these means and is normalised by length as one model's is.

What the models must share: the target vocabulary, since they score the same target ids: the same target
pieces and, when the text is Moses-processed, the same processing (`side_fingerprint`); otherwise a
one-line error names the runs. Architectures and sizes may differ (RNNsearch, Luong,
RNNencdec). Sources may differ: when the runs' source vocabularies are not all one, each model reads the
source through its own vocabulary, the search's source tensor holds one row of ids per model,
(batch, models, src_len), and the length bounds of the search (max_len_a, min_len_a) count the FIRST
model's source pieces.

Attention (heat maps, UNK replacement) is over the first model's source pieces: the mean of the weights
of the models with attention that read the first model's source vocabulary (`attending_models`; a model
reading other pieces has other columns), else the first model's own weights (uniform for an RNNencdec,
as one such model gives).

Loading the runs, checking their vocabularies and choosing the search's settings: loader.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch
from torch import Tensor, nn

from ..config import Config
from ..config.constants import SIDES
from ..errors import UserError
from ..io import sha256_text
from ..vocab.pieces import PAD_ID, Vocab


@dataclass
class PerModel:
    """One value per model of an ensemble, their encoder outputs or their decoder states, which the
    search expands, reorders and shrinks together: `index_select` takes the same rows of each."""

    items: list[Any]  # EncoderOutput or DecoderState, one per model, in the ensemble's order

    def index_select(self, index: Tensor) -> PerModel:
        return PerModel([item.index_select(index) for item in self.items])


class Ensemble(nn.Module):
    """Models searched as one (module docstring): the interface beam search uses, answered by each model."""

    def __init__(self, models: Sequence[nn.Module], attending: Sequence[int] | None = None) -> None:
        """attending: the indexes of the models whose attention weights are averaged into the ensemble's
        (default: every model; `attending_models` picks them for trained runs)."""
        super().__init__()
        self.models = nn.ModuleList(models)
        self.attending = list(range(len(models)) if attending is None else attending)
        self.eval()  # searched only: a search leaves an eval-mode model's mode alone (search.translate_ids)

    def encode(self, src: Tensor, src_lengths: Tensor) -> PerModel:
        """Each model's encoder output. src: (batch, src_len) ids that every model reads, with their
        lengths src_lengths (batch,); or (batch, models, src_len), model m reading src[:, m], its own
        vocabulary's ids padded to the longest model's (its lengths: its non-PAD ids)."""
        if src.dim() == 2:
            return PerModel([model.encode(src, src_lengths) for model in self.models])
        readings = zip(self.models, src.unbind(1), strict=True)  # (batch, src_len) ids per model
        return PerModel([model.encode(ids, (ids != PAD_ID).sum(1)) for model, ids in readings])

    def init_state(self, enc: PerModel) -> PerModel:
        return PerModel([model.init_state(own) for model, own in zip(self.models, enc.items, strict=True)])

    def step(self, enc: PerModel, state: PerModel, y_prev: Tensor) -> tuple[Tensor, PerModel, Tensor]:
        """The mean of the models' next-token log-probabilities (rows, vocab), each model's next state, and
        the mean attention weights of the `attending` models (rows, src_len)."""
        outputs = [
            model.step(own_enc, own_state, y_prev)
            for model, own_enc, own_state in zip(self.models, enc.items, state.items, strict=True)
        ]
        log_probs = torch.stack([log_p for log_p, _, _ in outputs]).mean(dim=0)  # (rows, vocab)
        attention = torch.stack([outputs[m][2] for m in self.attending]).mean(dim=0)  # (rows, src_len)
        return log_probs, PerModel([new_state for _, new_state, _ in outputs]), attention


def side_fingerprint(vocab: Vocab, side: str) -> str:
    """What fixes one side's ids, segmentation and text: its sentencepiece pieces with their scores, id by
    id, the model type, and the Moses processing of its text (language and steps), if any. Not the model
    file's bytes (which `Vocab.fingerprint` hashes, for both sides at once): sentencepiece writes the paths
    it trained on into the file, so one vocabulary trained in two data folders gives two files."""
    index = SIDES.index(side)
    processor = spm.SentencePieceProcessor(model_file=str(vocab.model_files[0 if vocab.joint else index]))
    pieces = [
        f"{processor.id_to_piece(i)} {processor.get_score(i)}" for i in range(processor.get_piece_size())
    ]
    language = vocab.text[index].describe() if vocab.text else "untokenised"
    return sha256_text("\n".join([vocab.model_type, language, *pieces]))


def attending_models(configs: Sequence[Config], vocabs: Sequence[Vocab]) -> list[int]:
    """The runs whose attention makes the ensemble's: those with attention that read the first run's
    source vocabulary, or else the first run alone (module docstring)."""
    first = side_fingerprint(vocabs[0], "src")
    found = [
        m
        for m, (config, vocab) in enumerate(zip(configs, vocabs, strict=True))
        if config.model.attends and side_fingerprint(vocab, "src") == first
    ]
    return found or [0]


def check_same_target(paths: Sequence[Path], vocabs: Sequence[Vocab]) -> None:
    """A one-line error naming the first run whose target vocabulary is not the first run's."""
    first = side_fingerprint(vocabs[0], "tgt")
    for path, vocab in zip(paths[1:], vocabs[1:], strict=True):
        if side_fingerprint(vocab, "tgt") != first:
            raise UserError(
                f"{paths[0]} and {path}: different target vocabularies ({vocabs[0].directory} vs "
                f"{vocab.directory}); an ensemble's runs must share one"
            )
