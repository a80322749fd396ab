"""The exported model folder: one trained model in the Hugging Face hub's layout, safe to load from anyone.

`seq2seq export RUN -o DIR` writes it (export.py, its model card model_card.py) and every decode reads it
where it reads a run (`decoding/loader.load_one`):

    DIR/
      README.md              the model card: YAML front matter for the hub (library, tags, languages), the
                             architecture, the training data, the checkpoint it came from, its evaluation
      config.json            which library and format wrote it, the checkpoint it came from, the vocabulary
                             fingerprint and the run's resolved config (`config`)
      model.safetensors      the weights
      vocab/                 the sentencepiece models and their manifest, as in a run folder
      lexical_shortlist.npz  the run's lexical shortlist, when it has one: it records the fingerprint of the
                             weights it was learned from, which `decode.lexical_shortlist` checks against
                             model.safetensors as it checks a run's checkpoint
      by_length.json, curve.png  the `seq2seq eval` report and figure given to `export`, when given

Why safetensors: a torch checkpoint is a pickle, which can run code when loaded; the library loads its
own with torch's weights-only unpickler, but a model from the hub comes from a stranger. A safetensors
file is a JSON header and raw tensor bytes: loading it runs nothing. The folder holds no pickle at all.
The config and the vocabulary are checked as a run's are (`run_folder.rebuild`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..config import Config
from ..errors import UserError
from ..io import read_json
from ..vocab.pieces import Vocab
from .run_folder import PROVENANCE, VOCAB_DIR, rebuild
from .shortlist_table import TABLE_FILE

LIBRARY = "seq2seq-attn"  # config.json's `library_name`, and the card's
FORMAT = 1  # config.json's `format`: bump when a reader of the old one would misread the new one
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
CARD_FILE = "README.md"
REPORT_FILE = "by_length.json"
FIGURE_STEM = "curve"  # the figure keeps its suffix: curve.png
FIGURE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg")  # images a model card shows
# what loading a model reads: decoding's files, and the report and training record the API and eval show
LOADED_FILES = (CONFIG_FILE, WEIGHTS_FILE, f"{VOCAB_DIR}/*", TABLE_FILE, REPORT_FILE, PROVENANCE)


@dataclass(frozen=True)
class Evaluation:
    """A `seq2seq eval` report to ship with the model: its JSON file, its tables in markdown and its system
    labels (read by the caller: the report belongs to evaluation/, a layer above), and its figure."""

    report: Path
    tables: str
    systems: list[str]
    figure: Path | None = None


def figure_name(figure: Path) -> str:
    """The figure's name in the folder: `curve` with its own suffix."""
    return FIGURE_STEM + figure.suffix.lower()


# ----------------------------------------------------------------------------------------------------------
# reading


def _absent(path: Path) -> list[str]:
    """Which of an exported model folder's two defining files `path` lacks."""
    return [name for name in (CONFIG_FILE, WEIGHTS_FILE) if not (path / name).is_file()]


def is_model_folder(path: Path) -> bool:
    """Whether `path` is an exported model folder (what `load_one` reads with `load`)."""
    return not _absent(path)


def missing_file(path: Path) -> str | None:
    """The defining file an exported model folder at `path` lacks when it has the other one (None: it has
    both, or is no such folder): a folder with one of them is a broken export, not a run folder."""
    absent = _absent(path)
    return absent[0] if len(absent) == 1 else None


def load(folder: Path, device: torch.device | str = "cpu") -> tuple[nn.Module, Vocab, Config]:
    """The model of an exported folder in eval mode on `device`, its vocabulary and config."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    header = read_header(folder)
    weights = folder / WEIGHTS_FILE
    try:
        tensors = load_file(weights)
    except (SafetensorError, OSError) as err:
        raise UserError(
            f"{weights}: not a readable safetensors file ({' '.join(str(err).split())[:160]})"
        ) from None
    payload = {
        "model": tensors,
        "config": header["config"],
        "vocab_fingerprint": header.get("vocab_fingerprint"),
    }
    return rebuild(weights, payload, folder / VOCAB_DIR, device, config_file=folder / CONFIG_FILE)


def read_header(folder: Path) -> dict[str, Any]:
    """config.json, checked to be this library's, in a format it reads."""
    path = folder / CONFIG_FILE
    header = read_json(path)
    if not isinstance(header, dict) or header.get("library_name") != LIBRARY:
        raise UserError(f'{path}: not a {LIBRARY} model folder (no "library_name": "{LIBRARY}")')
    version = header.get("format")
    if type(version) is not int or not 1 <= version <= FORMAT:  # (JSON's true is a Python int)
        raise UserError(
            f"{path}: format {header.get('format')}, this {LIBRARY} reads format {FORMAT} or older"
        )
    if not isinstance(header.get("config"), dict):
        raise UserError(f'{path}: no "config" section')
    return header
