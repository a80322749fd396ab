"""The Python API: load a trained run (or several, as an ensemble) once, then translate, score and look at
attention from a notebook or a service.

    import seq2seq_attn as s2s
    model = s2s.load("runs/local/rnnsearch", device="cpu", beam_size=5)
    model.translate(["The cat sat on the mat.", "Hello!"])
    model.score(["The cat sat on the mat."], ["Le chat était assis sur le tapis."])

The command line calls the same functions (decoding.translate.Translator,
evaluation.models.likelihood.Scorer, decoding.loader.load_runs), so
a sentence gets the same translation and score here as from `seq2seq translate` and `seq2seq score`
with the same settings. Errors a user can cause (a missing run, an incompatible checkpoint, a bad decode
key) raise `UserError`, whose message names the file or config key. docs/api.md shows a session.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import Config, DecodeConfig, override
from .decoding.loader import Runs, load_runs
from .decoding.translate import Translation, Translator
from .errors import UserError
from .evaluation.models.likelihood import Score, Scorer
from .io import read_json
from .model.summary import count_parameters
from .runs.model_folder import REPORT_FILE, is_model_folder

PathLike = str | Path


@dataclass(frozen=True)
class Candidate:
    """One translation of an n-best list: its text, its ranking score (log-probability divided by the
    length penalty) and its log-probability (EOS included)."""

    text: str
    score: float
    log_prob: float


@dataclass(frozen=True)
class Attention:
    """Where the model looked while writing its best translation: one row per target piece and the final
    EOS, one column per source piece and the source EOS (each row sums to 1)."""

    translation: str
    source: list[str]  # source pieces, "</s>" last
    target: list[str]  # target pieces, "</s>" last
    weights: np.ndarray  # (len(target), len(source))


@dataclass(frozen=True)
class Found:
    """One line's search result: its n best candidates, best first (none for an empty line), and the
    attention of the best one when it was asked for (else None)."""

    candidates: list[Candidate]
    attention: Attention | None


class Model:
    """A loaded model or ensemble with its decode settings; see `load`."""

    def __init__(self, translator: Translator, scorer: Scorer | None, runs: Runs) -> None:
        self._translator = translator
        self._scorer = scorer
        self._runs = runs

    @property
    def decode(self) -> DecodeConfig:
        """The search settings in use (the first run's `decode` section with `load`'s overrides): a copy,
        since the settings change only through `load`, where they are checked."""
        return dataclasses.replace(self._translator.cfg)

    @property
    def config(self) -> Config:
        """The first run's resolved config (its `decode` section as the run wrote it; see `decode`)."""
        return self._runs.configs[0]

    @property
    def checkpoints(self) -> list[Path]:
        """The checkpoint file loaded from each run, in the order given."""
        return list(self._runs.checkpoints)

    @property
    def parameters(self) -> int:
        """The number of weights searched (every model's, for an ensemble)."""
        return count_parameters(self._runs.model)

    @property
    def bleu_by_length(self) -> list[dict[str, Any]] | None:
        """The BLEU-by-length report an exported model folder carries (`seq2seq export --report`): per
        system of the report, its label and its rows of all sentences (one per bucket); else None."""
        folder = self._runs.run_dirs[0]
        report = folder / REPORT_FILE
        if not (is_model_folder(folder) and report.is_file()):
            return None
        try:
            return [
                {
                    "label": system["label"],
                    "rows": [r for r in system["rows"] if r.get("subset", "all") == "all"],
                }
                for system in read_json(report)["systems"]
            ]
        except (KeyError, TypeError, AttributeError):
            raise UserError(f"{report}: not a report of `seq2seq eval --by-length`") from None

    def search(self, lines: Sequence[str], n: int = 1, attention: bool = False) -> list[Found]:
        """The n best candidates of each line, in order, and with `attention` the best one's attention:
        what `nbest` and `attention` answer, from one search of all the lines (a beam of at least n)."""
        check_lines(lines, "lines")
        widest = max(n, self.decode.beam_size) if isinstance(n, int) else n  # a bad n fails the check
        try:
            cfg = override(self.decode, {"nbest": n, "beam_size": widest}, "decode.")
        except UserError as error:  # both keys it sets come from `n`, which the message names
            raise UserError(error.naming(lambda key: "n")) from None
        translator = self._with(cfg, with_attention=attention)
        return [self._found(translator, found, attention) for found in translator.translate(lines)]

    def translate(self, lines: Sequence[str]) -> list[str]:
        """The best translation of each line, in order (an empty line gives "")."""
        check_lines(lines, "lines")
        return [found.texts[0] if found.texts else "" for found in self._translator.translate(lines)]

    def translate_one(self, line: str) -> str:
        return self.translate([line])[0]

    def nbest(self, lines: Sequence[str], n: int) -> list[list[Candidate]]:
        """The n best translations of each line, best first (a beam of at least n is searched)."""
        return [found.candidates for found in self.search(lines, n)]

    def attention(self, line: str) -> Attention | None:
        """The attention of the line's best translation; None for an empty line. A model without
        attention (RNNencdec) gives uniform weights over the source."""
        return self.search([line], attention=True)[0].attention

    @staticmethod
    def _found(translator: Translator, found: Translation, attention: bool) -> Found:
        candidates = [
            Candidate(text, hyp.score, hyp.log_prob)
            for hyp, text in zip(found.hypotheses, found.texts, strict=True)
        ]
        attended = translator.attention(found) if attention else None
        if attended is None:
            return Found(candidates, None)
        weights, source, target = attended
        return Found(candidates, Attention(found.texts[0], source, target, weights))

    def score(self, sources: Sequence[str], targets: Sequence[str]) -> list[Score]:
        """Forced decoding of each (source, target) pair: Score.log_prob, .pieces, .mean and
        .piece_log_probs (None for an empty source), as `seq2seq score`."""
        check_lines(sources, "sources")
        check_lines(targets, "targets")
        return self._one_scorer().score(sources, targets)

    def perplexity(self, sources: Sequence[str], targets: Sequence[str]) -> dict[str, Any]:
        """The corpus perplexity of the pairs, overall and by source length (`seq2seq score --report`)."""
        scores = self.score(sources, targets)
        return self._one_scorer().perplexity(sources, scores)

    def _one_scorer(self) -> Scorer:
        if self._scorer is None:
            raise UserError("scores are of one model: load one run (an ensemble translates only)")
        return self._scorer

    def _with(self, cfg: DecodeConfig, with_attention: bool = False) -> Translator:
        return self._translator.with_settings(cfg, with_attention)


def check_lines(lines: Sequence[str], name: str) -> None:
    """A list of sentences, not one string (which would be read as one sentence per character)."""
    if isinstance(lines, (str, bytes)):
        raise UserError(f"{name}: a list of sentences, not one string (translate_one takes one sentence)")


def load(
    model: PathLike | Sequence[PathLike],
    device: str = "cpu",
    threads: int | None = None,
    **decode: Any,
) -> Model:
    """Load a run folder or checkpoint file (its best checkpoint for a folder), a model folder of `seq2seq
    export`, or a model on the Hugging Face hub (`hf://OWNER/NAME`, `hf://OWNER/NAME@REVISION`), or a
    list of them to decode as an ensemble, onto `device` ("cpu", "cuda", "cuda:1", "auto").

    `decode` overrides keys of the first run's `decode` section (e.g. beam_size=5, length_penalty="none",
    nbest=3), checked as in a config file. `threads` sets torch's CPU thread count, for the whole process.
    """
    from .model.device import resolve_device

    if threads is not None:
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise UserError(f"threads must be a whole number of at least 1, got {threads!r}")
        torch.set_num_threads(threads)
    paths = [model] if isinstance(model, (str, Path)) else list(model)
    runs = load_runs(paths, resolve_device(device, "device"))
    translator = runs.translator(decode)
    scorer = None
    if len(paths) == 1:  # the scorer searches nothing but shares the batch sizes, precision and source cut
        config = dataclasses.replace(runs.configs[0], decode=translator.cfg)
        scorer = Scorer(runs.model, runs.vocabs[0], config, runs.device)
    return Model(translator, scorer, runs)
