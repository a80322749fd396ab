"""`seq2seq model-info`: the model a config describes, its architecture and parameters, without training."""

from __future__ import annotations

from pathlib import Path

import typer

from ..config import load_config
from .config import CONFIG_ARG, SET, SET_OPTION

SRC_VOCAB = typer.Option(None, "--src-vocab", min=4, help="Source vocabulary size (default: vocab.size).")
TGT_VOCAB = typer.Option(None, "--tgt-vocab", min=4, help="Target vocabulary size (default: vocab.size).")


def register(app: typer.Typer) -> None:
    app.command("model-info")(model_info)


def model_info(
    config: Path = CONFIG_ARG,
    overrides: list[str] = SET_OPTION,
    src_vocab: int | None = SRC_VOCAB,
    tgt_vocab: int | None = TGT_VOCAB,
) -> None:
    """Print CONFIG's model: a summary line, the module tree and the parameter count of each module.

    The model is built on torch's `meta` device, so even the paper's 30k-vocabulary models take no memory.
    """
    import torch  # here, not at module level: keeps `seq2seq --help` fast

    from ..model import build_model
    from ..model.summary import describe

    cfg = load_config(config, overrides, SET)
    src_size = src_vocab or cfg.vocab.size
    tgt_size = tgt_vocab or cfg.vocab.size
    with torch.device("meta"):
        model = build_model(cfg.model, src_size, tgt_size)
    typer.echo(describe(model, cfg.model, src_size, tgt_size))
