"""The model card of an exported model folder, its README.md (export.py writes it): the hub's YAML front
matter, then what the model is, how to use it, what it was trained on, which checkpoint it is, how it
scored and what the folder holds (model_folder.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from torch import nn

from ..config import Config
from ..config.constants import SPLITS
from ..data.prepare import MANIFEST
from ..io import read_json
from ..model.summary import count_parameters
from ..vocab.pieces import Vocab
from .hub import HUB_PREFIX
from .model_folder import CONFIG_FILE, LIBRARY, REPORT_FILE, WEIGHTS_FILE, Evaluation, figure_name
from .run_folder import PROVENANCE, VOCAB_DIR
from .shortlist_table import TABLE_FILE


def model_card(
    config: Config,
    model: nn.Module,
    vocab: Vocab,
    source: dict[str, Any],
    evaluation: Evaluation | None,
    shortlist: bool,
    repo_id: str | None,
    provenance: bool = False,
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
        "## Files\n\n" + _table(folder_files(shortlist, evaluation, provenance)),
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
        "luong": f"Luong et al.'s decoder {'with' if config.model.input_feeding else 'without'} input "
        f"feeding, {attention} attention",
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
    return text + f": {shown} (the run kept its best checkpoints by dev {config.train.ranking_metric})."


def evaluation_text(evaluation: Evaluation | None) -> str:
    if evaluation is None:
        return "No evaluation report came with this model."
    systems = ", ".join(f"`{label}`" for label in evaluation.systems)
    lines = [f"`seq2seq eval`'s report `{REPORT_FILE}`, systems {systems}:"]
    if evaluation.figure is not None:
        lines.append(f"![BLEU by source length]({figure_name(evaluation.figure)})")
    return "\n\n".join([*lines, evaluation.tables.rstrip()])


def folder_files(shortlist: bool, evaluation: Evaluation | None, provenance: bool) -> list[tuple[str, str]]:
    rows = [
        (CONFIG_FILE, "the format, the checkpoint it came from, the run's resolved config"),
        (WEIGHTS_FILE, "the weights (safetensors: loading runs no code)"),
        (f"{VOCAB_DIR}/", "the sentencepiece models"),
    ]
    if shortlist:
        rows.append(
            (TABLE_FILE, "the lexical shortlist, with the fingerprint of the weights it was learned from")
        )
    if provenance:
        rows.append((PROVENANCE, "what trained it: each sitting's commit, machine, torch and threads"))
    if evaluation is not None:
        rows.append((REPORT_FILE, "the evaluation report (`seq2seq plot curve` redraws it)"))
    if evaluation is not None and evaluation.figure is not None:
        rows.append((figure_name(evaluation.figure), "its figure"))
    return [(f"`{name}`", what) for name, what in rows]


def _table(rows: list[tuple[str, str]]) -> str:
    return "| | |\n|---|---|\n" + "\n".join(f"| {key} | {value} |" for key, value in rows)
