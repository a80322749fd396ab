"""The run loader: what every decode loads, one trained run or the ensemble of several, and its settings.

`translate`, `eval --model`, `score`, `align`, the Python API and the benchmarks all load through
`load_one` (one model) or `load_runs`, so a run is searched alike everywhere, and each takes what
`load_one` takes: a run folder or checkpoint file, an exported model folder (runs/model_folder.py), or a model
on the Hugging Face hub, `hf://OWNER/NAME` (runs/hub.py). One run is searched as itself; several are checked
to share the target vocabulary and searched as one `Ensemble` (ensemble.py). The search uses the first
run's `decode` section with the caller's changes, each checked as a config value; `decode.precision:
int8` searches an int8 copy (int8.py) and `decode.lexical_shortlist` the run's shortlist (shortlist.py).
Averaging (`average` K) takes the last K step-N.pt checkpoints of each run; `eval` reports an ensemble
with its first run's `eval` and `data` sections.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..config import Config, DecodeConfig, override
from ..errors import UserError, setting
from ..runs import hub, model_folder
from ..runs.checkpoint import weights_fingerprint
from ..runs.run_folder import averaged_weights, load_trained, resolve_checkpoint, run_dir_of
from ..runs.shortlist_table import load_table
from ..vocab.pieces import Vocab
from . import int8
from .ensemble import Ensemble, attending_models, check_same_target, side_fingerprint
from .shortlist import Shortlisted
from .translate import Translator

DECODE_PREFIX = "decode."  # how the library names a decode key in its messages


@dataclass(frozen=True)
class Runs:
    """Trained runs loaded to translate together: the model (the one run's, or the Ensemble of all) on
    `device`, and each run's vocabulary and config, in the order given."""

    model: nn.Module
    vocabs: list[Vocab]
    configs: list[Config]
    device: torch.device | str
    run_dirs: list[Path]
    checkpoints: list[Path]  # the checkpoint file of each run (with `average`, the last one averaged)
    average: int = 0

    def translator(self, decode: Mapping[str, Any] | None = None) -> Translator:
        """A Translator searching with the first run's `decode` section, changed by the values of `decode`
        (decode key -> value) that are not None, each checked as a config value; an `unk_dictionary`
        given turns `replace_unk` on unless that is given too. When the runs' source
        vocabularies differ, each model reads the source through its own."""
        changes = dict(decode or {})
        if changes.get("unk_dictionary") and changes.get("replace_unk") is None:
            changes["replace_unk"] = True  # a dictionary given is for UNK replacement
        known = {field.name for field in dataclasses.fields(DecodeConfig)}
        unknown = sorted(changes.keys() - known)
        if unknown:
            raise UserError(
                f"{DECODE_PREFIX}{unknown[0]}: no such decode key (the keys: {', '.join(sorted(known))})"
            )
        settings = override(self.configs[0].decode, changes, DECODE_PREFIX)
        shared = len({side_fingerprint(vocab, "src") for vocab in self.vocabs}) == 1
        others = [] if shared else self.vocabs[1:]
        model = self.model
        table = None
        if settings.lexical_shortlist:
            if len(self.run_dirs) > 1:
                raise UserError(f"{DECODE_PREFIX}lexical_shortlist: decode one run with it, not an ensemble")
            table = load_table(
                self.run_dirs[0],
                self.vocabs[0],
                self.checkpoints[0],
                weights_fingerprint(model),
                averaged_weights(self.average),
            )
        if settings.precision == "int8":
            model = int8.search_copy(model, self.device, setting(DECODE_PREFIX + "precision"))
        if table is not None:
            model = Shortlisted(model, table)
        return Translator(model, self.vocabs[0], settings, self.device, other_src_vocabs=others)


@dataclass(frozen=True)
class Trained:
    """One trained model loaded for inference, and where it came from: its weights file (with `average`,
    the last checkpoint averaged) and the folder holding its vocabulary and lexical shortlist."""

    model: nn.Module
    vocab: Vocab
    config: Config
    checkpoint: Path
    folder: Path


def load_one(path: str | Path, device: torch.device | str = "cpu", average: int = 0) -> Trained:
    """The trained model `path` names, whatever names it: `hf://OWNER/NAME[@REVISION]` (fetched from the
    hub, runs/hub.py), an exported model folder (runs/model_folder.py), a run folder or a checkpoint file
    (runs/run_folder.py; with `average` K > 0, its last K step-N.pt checkpoints averaged). The one place that
    tells them apart, so that every decode takes every kind."""
    on_hub = hub.hub_model(path)
    local = hub.local_path(path, list(model_folder.LOADED_FILES))
    if model_folder.is_model_folder(local):
        if average:
            raise UserError(
                f"{on_hub or path}: an exported model folder holds one set of weights: average a run's"
            )
        model, vocab, config = model_folder.load(local, device)
        return Trained(model, vocab, config, local / model_folder.WEIGHTS_FILE, local)
    if on_hub is not None:
        raise UserError(
            f"{on_hub}: not a model folder of `seq2seq export` (no config.json, model.safetensors)"
        )
    missing = model_folder.missing_file(local)
    if missing:
        raise UserError(f"{path}: an exported model folder without its {missing}")
    if not local.exists() and hub.REPO_ID.fullmatch(str(path)):
        raise UserError(
            f"{path}: no such run directory, model folder or checkpoint (for a model on the Hugging Face "
            f"hub, write {hub.HUB_PREFIX}{path})"
        )
    model, vocab, config = load_trained(local, device, average=average)
    checkpoint = resolve_checkpoint(local)
    return Trained(model, vocab, config, checkpoint, run_dir_of(checkpoint))


def load_runs(paths: Sequence[str | Path], device: torch.device | str = "cpu", average: int = 0) -> Runs:
    """Each trained model (`load_one`: a run folder, a checkpoint file, an exported model folder or a hub
    model; with `average` K > 0, a run's last K step-N.pt checkpoints averaged), checked to share the
    target vocabulary."""
    if not paths:
        raise UserError("no trained run to load: give at least one run folder or checkpoint")
    loaded = [load_one(path, device, average) for path in paths]
    vocabs, configs = [one.vocab for one in loaded], [one.config for one in loaded]
    where = ([one.folder for one in loaded], [one.checkpoint for one in loaded])
    if len(loaded) == 1:  # one run searches as it always has
        return Runs(loaded[0].model, vocabs, configs, device, *where, average)
    check_same_target([Path(path) for path in paths], vocabs)
    ensemble = Ensemble([one.model for one in loaded], attending_models(configs, vocabs))
    return Runs(ensemble, vocabs, configs, device, *where, average)


def load_translator(
    paths: Sequence[str | Path],
    device: torch.device | str = "cpu",
    decode: Mapping[str, Any] | None = None,
    *,
    average: int = 0,
) -> Translator:
    """A Translator of one trained run, or of the ensemble of several (`load_runs`), searching with the
    first run's decode settings changed by `decode` (`Runs.translator`)."""
    return load_runs(paths, device, average).translator(decode)
