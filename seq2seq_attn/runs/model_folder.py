"""The exported model folder: one trained model in the Hugging Face hub's layout, safe to load from anyone.

`seq2seq export RUN -o DIR` writes it (`export_run`) and every decode reads it where it reads a run
(`decoding/loader.load_one`):

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
The config and the vocabulary are checked as a run's are (`run_folder.rebuild`). The folder is filled
beside DIR and renamed into place (io.atomic_folder); `--force` replaces only an earlier export.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from .. import __version__
from ..config import Config
from ..config.constants import SPLITS
from ..data.prepare import MANIFEST
from ..errors import UserError
from ..io import atomic_folder, atomic_write, read_json, write_json, write_text
from ..model.summary import count_parameters
from ..vocab.pieces import Vocab
from .checkpoint import weights_fingerprint
from .hub import HUB_PREFIX
from .run_folder import (
    VOCAB_DIR,
    averaged_weights,
    checkpoint_payload,
    rebuild,
    resolve_checkpoint,
    run_dir_of,
)
from .shortlist_table import TABLE_FILE, find_table, load_table

LIBRARY = "seq2seq-attn"  # config.json's `library_name`, and the card's
FORMAT = 1  # config.json's `format`: bump when a reader of the old one would misread the new one
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
CARD_FILE = "README.md"
REPORT_FILE = "by_length.json"
FIGURE_STEM = "curve"  # the figure keeps its suffix: curve.png
FIGURE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg")  # images a model card shows
LOADED_FILES = (CONFIG_FILE, WEIGHTS_FILE, f"{VOCAB_DIR}/*", TABLE_FILE)  # what decoding reads


@dataclass(frozen=True)
class Evaluation:
    """A `seq2seq eval` report to ship with the model: its JSON file, its tables in markdown and its system
    labels (read by the caller: the report belongs to evaluation/, a layer above), and its figure."""

    report: Path
    tables: str
    systems: list[str]
    figure: Path | None = None


# ----------------------------------------------------------------------------------------------------------
# reading


def is_model_folder(path: Path) -> bool:
    """Whether `path` is an exported model folder (what `load_one` reads with `load`)."""
    return (path / CONFIG_FILE).is_file() and (path / WEIGHTS_FILE).is_file()


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
    return rebuild(weights, payload, folder / VOCAB_DIR, device)


def read_header(folder: Path) -> dict[str, Any]:
    """config.json, checked to be this library's, in a format it reads."""
    path = folder / CONFIG_FILE
    header = read_json(path)
    if not isinstance(header, dict) or header.get("library_name") != LIBRARY:
        raise UserError(f'{path}: not a {LIBRARY} model folder (no "library_name": "{LIBRARY}")')
    if not isinstance(header.get("format"), int) or header["format"] > FORMAT:
        raise UserError(
            f"{path}: format {header.get('format')}, this {LIBRARY} reads format {FORMAT} or older"
        )
    if not isinstance(header.get("config"), dict):
        raise UserError(f'{path}: no "config" section')
    return header


# ----------------------------------------------------------------------------------------------------------
# writing


def export_run(
    run: Path,
    destination: Path,
    *,
    average: int = 0,
    evaluation: Evaluation | None = None,
    repo_id: str | None = None,
    force: bool = False,
) -> Path:
    """Write the model folder of a run's best checkpoint (or of a checkpoint file; with `average` K > 0,
    the mean of the run's last K step-N.pt checkpoints) to `destination`, with the run's lexical shortlist
    when it has one and `evaluation`'s report and figure; `repo_id` (OWNER/NAME) is what the card's usage
    lines load. A non-empty `destination` is an error, or with `force` replaced when it is an earlier
    export. Returns `destination`."""
    check_destination(destination, force)
    checkpoint = resolve_checkpoint(run)
    payload = checkpoint_payload(checkpoint, average)
    run_dir = run_dir_of(checkpoint)
    model, vocab, config = rebuild(checkpoint, payload, run_dir / VOCAB_DIR)
    table = find_table(run_dir, checkpoint)
    if table is not None:  # a table of another vocabulary fails here; of other weights, a warning
        load_table(run_dir, vocab, checkpoint, weights_fingerprint(model), averaged_weights(average))
    source = provenance(checkpoint, payload)
    with atomic_folder(destination, replace=force) as staging:
        write_weights(model, staging / WEIGHTS_FILE)
        header = {"library_name": LIBRARY, "format": FORMAT, "library_version": __version__}
        write_json(
            staging / CONFIG_FILE,
            {
                **header,
                "checkpoint": source,
                "vocab_fingerprint": vocab.fingerprint(),
                "config": payload["config"],
            },
        )
        vocab.copy_to(staging / VOCAB_DIR)
        if table is not None:
            shutil.copyfile(table, staging / TABLE_FILE)
        if evaluation is not None:
            copy_evaluation(evaluation, staging)
        card = model_card(config, model, vocab, source, evaluation, table is not None, repo_id)
        write_text(staging / CARD_FILE, card)
    return destination


def check_destination(destination: Path, force: bool) -> None:
    """Fail before any work when `destination` cannot become the folder: a file, a missing parent, or a
    non-empty folder (with `force`, one that is not an earlier export: never replace anything else)."""
    if destination.exists() and not destination.is_dir():
        raise UserError(f"{destination}: is a file; export writes a folder")
    parent = destination.parent if str(destination.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"{destination}: folder {parent} does not exist")
    if destination.is_dir() and any(destination.iterdir()):
        if not force:
            raise UserError(f"{destination}: not empty; give --force to replace an earlier export")
        if not is_model_folder(destination):
            raise UserError(
                f"{destination}: not empty and not an exported model folder; --force replaces only those"
            )


def write_weights(model: nn.Module, path: Path) -> None:
    """The model's state dict as safetensors, atomically. Every tensor gets its own copy: a tied embedding
    is one tensor under two names, which safetensors refuses to store; loaded back, both names fill the
    one parameter again."""
    from safetensors.torch import save

    tensors = {
        name: tensor.detach().cpu().contiguous().clone() for name, tensor in model.state_dict().items()
    }
    with atomic_write(path, "wb") as out:
        out.write(save(tensors, metadata={"format": "pt"}))


def copy_evaluation(evaluation: Evaluation, folder: Path) -> None:
    shutil.copyfile(evaluation.report, folder / REPORT_FILE)
    if evaluation.figure is not None:
        shutil.copyfile(evaluation.figure, folder / figure_name(evaluation.figure))


def figure_name(figure: Path) -> str:
    """The figure's name in the folder: `curve` with its own suffix."""
    return FIGURE_STEM + figure.suffix.lower()


def provenance(checkpoint: Path, payload: dict[str, Any]) -> dict[str, Any]:
    """Where the weights come from: the run, its update step, and the checkpoint file (`best.pt` named by
    its target) with the dev scores of that step when training recorded them, or the checkpoints averaged
    (a mean that was never validated)."""
    found: dict[str, Any] = {"run": run_dir_of(checkpoint).name, "step": payload.get("step")}
    if "averaged_from" in payload:
        return {**found, "averaged_from": payload["averaged_from"]}
    found["file"] = checkpoint.resolve().name
    history = payload.get("progress", {}).get("history", [])
    validated = [entry for entry in history if entry.get("step") == found["step"]]
    if validated:
        found["validation"] = {key: value for key, value in validated[-1].items() if key != "step"}
    return found


# ----------------------------------------------------------------------------------------------------------
# the model card


def model_card(
    config: Config,
    model: nn.Module,
    vocab: Vocab,
    source: dict[str, Any],
    evaluation: Evaluation | None,
    shortlist: bool,
    repo_id: str | None,
) -> str:
    """README.md: the hub's YAML front matter, then what the model is, how to use it, what it was trained
    on, which checkpoint it is, how it scored and what the folder holds."""
    sections = [
        f"# {config.name}\n\n{summary(config)}",
        "## Use\n\n" + usage(repo_id),
        "## Architecture\n\n" + _table(architecture(config, model, vocab)),
        "## Training data\n\n" + _table(training_data(config)),
        "## Checkpoint\n\n" + checkpoint_text(config, source),
        "## Evaluation\n\n" + evaluation_text(evaluation),
        "## Files\n\n" + _table(folder_files(shortlist, evaluation)),
    ]
    meta = yaml.safe_dump(front_matter(config), sort_keys=False, allow_unicode=True)
    return f"---\n{meta}---\n\n" + "\n\n".join(sections) + "\n"


def front_matter(config: Config) -> dict[str, Any]:
    """The card's metadata for the hub. Languages only for a real corpus (the synthetic pair has none);
    no license: a run does not know its data's, so the card claims none."""
    meta: dict[str, Any] = {
        "library_name": LIBRARY,
        "pipeline_tag": "translation",
        "tags": ["translation", "seq2seq", "rnn", config.model.cell, family(config)],
    }
    data = config.data
    if data.source != "synthetic":
        meta["language"] = [data.src_lang, data.tgt_lang]
    if data.source == "huggingface" and not Path(data.huggingface.name).exists():  # a hub dataset
        meta["datasets"] = [data.huggingface.name]
    return meta


def family(config: Config) -> str:
    """rnnsearch, rnnencdec (no attention) or luong."""
    return config.model.decoder if config.model.attends else "rnnencdec"


def summary(config: Config) -> str:
    data = config.data
    pair = (
        "the synthetic language pair" if data.source == "synthetic" else f"{data.src_lang} → {data.tgt_lang}"
    )
    attention = config.model.attention
    kinds = {
        "rnnsearch": f"an RNNsearch: its decoder attends to every source annotation ({attention} attention)",
        "rnnencdec": "an RNNencdec: its decoder reads one fixed-size vector of the source (no attention)",
        "luong": f"Luong et al.'s input-feeding decoder with {attention} attention",
    }
    kind = kinds[family(config)]
    return f"A translation model for {pair}, trained with {LIBRARY}: an RNN encoder-decoder, {kind}."


def usage(repo_id: str | None) -> str:
    name = HUB_PREFIX + (repo_id or "OWNER/NAME")
    python = (
        f'import seq2seq_attn as s2s\n\nmodel = s2s.load("{name}")\nprint(model.translate(["A sentence."]))'
    )
    return (
        f"With {LIBRARY} installed (or give the folder's path instead of `{name}`):\n\n"
        f"```python\n{python}\n```\n\n"
        f"```bash\nseq2seq translate --model {name} < source.txt > translations.txt\n```\n\n"
        "The search uses the run's `decode` settings (in config.json); options and `s2s.load` keywords "
        "change them."
    )


def architecture(config: Config, model: nn.Module, vocab: Vocab) -> list[tuple[str, str]]:
    m = config.model
    direction = "bidirectional " if m.bidirectional else ""
    return [
        ("encoder", f"{m.encoder_layers} x {direction}{m.cell}, {m.hidden_size} units per direction"),
        ("decoder", f"{m.decoder}, {m.decoder_layers} x {m.cell}, {m.decoder_hidden_size} units"),
        ("attention", f"{m.attention}, {m.attention_dim} units" if m.attends else "none"),
        ("embeddings", f"source {m.src_embed_dim}, target {m.tgt_embed_dim}"),
        ("vocabulary", f"sentencepiece {config.vocab.type}, {vocab.src_size} / {vocab.tgt_size} pieces"),
        ("parameters", f"{count_parameters(model):,}"),
    ]


def training_data(config: Config) -> list[tuple[str, str]]:
    """What the run trained on, as its `data` section says, and the pair counts of the data folder's
    manifest when that folder is on this machine. Local files by name only: their folders are the
    training machine's."""
    data = config.data
    if data.source == "synthetic":
        s = data.synthetic
        words = f"{s.min_words}-{s.max_words} words"
        corpus = f"{LIBRARY}'s synthetic language pair, seed {s.seed}, sentences of {words}"
    elif data.source == "huggingface":
        h = data.huggingface
        corpus = f"the Hugging Face dataset `{h.name}`" + (f" ({h.config})" if h.config else "")
        corpus += f", splits {h.train_split} / {h.valid_split} / {h.test_split}"
    else:
        corpus = "local files: " + "; ".join(local_files(config, split) for split in SPLITS)
    rows = [
        ("corpus", corpus),
        ("languages", f"{data.src_lang} → {data.tgt_lang}"),
        ("tokenize", data.tokenize),
    ]
    counts = pair_counts(config)
    if counts:
        rows.append(("pairs", ", ".join(f"{split} {count:,}" for split, count in counts.items())))
    return rows


def local_files(config: Config, split: str) -> str:
    files = getattr(config.data.local, split)
    named = [Path(name).name for name in (files.src, files.tgt, files.tsv) if name]
    if named:
        return f"{split} " + ", ".join(f"`{name}`" for name in named)
    held = getattr(config.data.local.hold_out, split, 0)
    return f"{split} held out of train ({held:,} pairs)" if held else f"{split} none"


def pair_counts(config: Config) -> dict[str, int]:
    """Pairs per split after cleaning, as the data folder's manifest records them ({} without one)."""
    manifest = config.data_dir / MANIFEST
    splits = read_json(manifest).get("splits", {}) if manifest.is_file() else {}
    return {split: counts["kept"] for split, counts in splits.items() if "kept" in counts}


def checkpoint_text(config: Config, source: dict[str, Any]) -> str:
    """Which weights these are, and their dev scores."""
    text = f"Run `{source['run']}`, update {source['step']}"
    if "averaged_from" in source:
        return text + f": the mean of {', '.join(source['averaged_from'])} (not validated as a mean)."
    text += f", checkpoint `{source['file']}`"
    scores = source.get("validation")
    if scores is None:
        return text + "; the run recorded no dev score at that update."
    shown = f"dev loss {scores['loss']:.4f}, perplexity {scores['ppl']:.2f}"
    if config.train.valid_bleu:
        shown += f", BLEU {scores['bleu']:.2f}"
    return text + f": {shown} (the run kept its best checkpoints by dev {config.train.early_stop_metric})."


def evaluation_text(evaluation: Evaluation | None) -> str:
    if evaluation is None:
        return "No evaluation report came with this model."
    systems = ", ".join(f"`{label}`" for label in evaluation.systems)
    lines = [f"`seq2seq eval`'s report `{REPORT_FILE}`, systems {systems}:"]
    if evaluation.figure is not None:
        lines.append(f"![BLEU by source length]({figure_name(evaluation.figure)})")
    return "\n\n".join([*lines, evaluation.tables.rstrip()])


def folder_files(shortlist: bool, evaluation: Evaluation | None) -> list[tuple[str, str]]:
    rows = [
        (CONFIG_FILE, "the format, the checkpoint it came from, the run's resolved config"),
        (WEIGHTS_FILE, "the weights (safetensors: loading runs no code)"),
        (f"{VOCAB_DIR}/", "the sentencepiece models"),
    ]
    if shortlist:
        rows.append(
            (TABLE_FILE, "the lexical shortlist, with the fingerprint of the weights it was learned from")
        )
    if evaluation is not None:
        rows.append((REPORT_FILE, "the evaluation report (`seq2seq plot curve` redraws it)"))
    if evaluation is not None and evaluation.figure is not None:
        rows.append((figure_name(evaluation.figure), "its figure"))
    return [(f"`{name}`", what) for name, what in rows]


def _table(rows: list[tuple[str, str]]) -> str:
    return "| | |\n|---|---|\n" + "\n".join(f"| {key} | {value} |" for key, value in rows)
