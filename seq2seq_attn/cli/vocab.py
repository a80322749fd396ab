"""`seq2seq vocab`: train the sentencepiece vocabulary when needed, then encode every split into the cache."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from ..config import load_config
from ..config.constants import SIDES, SPLITS
from ..data.prepare import MANIFEST, prepare
from ..vocab.cache import build_cache, cache_stats
from ..vocab.pieces import build_vocab, vocab_dir
from .config import CONFIG_ARG, SET, SET_OPTION


def register(app: typer.Typer) -> None:
    app.command("vocab")(vocab)


def vocab(
    config: Path = CONFIG_ARG,
    overrides: list[str] = SET_OPTION,
    force: bool = typer.Option(False, "--force", help="Retrain the vocabulary and re-encode every split."),
) -> None:
    """Train sentencepiece on <data_dir>/train.{src,tgt} (skipped when up to date) and encode every split
    into <data_dir>/vocab/cache (skipped for files that did not change). Prints sizes and statistics. Data
    that `data prepare` wrote is prepared again first when the config's data section or its inputs changed
    since, as `train` does; files put there by other means (no manifest) are taken as they are."""
    cfg = load_config(config, overrides, SET)
    if (cfg.data_dir / MANIFEST).is_file():
        prepare(cfg)
    start = time.perf_counter()
    built = build_vocab(cfg, force=force)
    trained = time.perf_counter()
    encoded = build_cache(cfg, built, force=force)
    done = time.perf_counter()

    layout = "joint" if built.joint else "separate"
    typer.echo(
        f"vocabulary  {vocab_dir(cfg)}  {built.model_type}, {layout}: "
        f"src {built.src_size} / tgt {built.tgt_size} pieces  ({trained - start:.1f} s)"
    )
    typer.echo(
        f"cache       {len(encoded)} of {len(SPLITS) * len(SIDES)} files encoded  ({done - trained:.1f} s)"
    )
    typer.echo(f"{'file':<10} {'sentences':>10} {'tokens':>12} {'tokens/sent':>12} {'unk %':>8}")
    stats = cache_stats(vocab_dir(cfg))
    for name in (f"{split}.{side}" for split in SPLITS for side in SIDES):
        entry = stats[name]
        per_sentence = entry["tokens"] / max(entry["sentences"], 1)
        unk = 100 * entry["unk"] / max(entry["tokens"], 1)
        typer.echo(
            f"{name:<10} {entry['sentences']:>10} {entry['tokens']:>12} {per_sentence:>12.1f} {unk:>8.3f}"
        )
