"""`seq2seq config`: show a resolved config, or every key with its default and meaning."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from ..config import Config, load_config, to_yaml
from ..config.reference import config_markdown, describe_keys

SET = "--set"  # the option that overrides config keys, in every verb that reads a config
CONFIG_ARG = typer.Argument(..., help="Experiment YAML file.", show_default=False)
SET_OPTION = typer.Option(
    [], SET, help="Override a key, typed like YAML: --set train.learning_rate=3e-4 (repeatable)."
)


class KeysFormat(str, Enum):
    """How `--keys` lists them (another value is refused, not read as text)."""

    text = "text"
    markdown = "markdown"


def register(app: typer.Typer) -> None:
    app.command("config")(show_config)


def show_config(
    config: Path = typer.Argument(None, help="Experiment YAML file to validate and print resolved."),
    overrides: list[str] = SET_OPTION,
    keys: bool = typer.Option(False, "--keys", help="List every key with type, default and meaning."),
    fmt: KeysFormat = typer.Option(KeysFormat.text, "--format", help="With --keys: text or markdown."),
) -> None:
    """Validate CONFIG and print it fully resolved (defaults filled in, paths absolute), or list all keys."""
    if keys:
        if fmt is KeysFormat.markdown:
            typer.echo(config_markdown(), nl=False)
        else:
            for key, kind, default, doc in describe_keys():
                typer.echo(f"{key}  [{kind}]" if kind == "section" else f"{key} = {default}  ({kind}) {doc}")
        return
    if config is None:
        raise typer.BadParameter("give a CONFIG file, or --keys")
    print_resolved(load_config(config, overrides, SET))


def print_resolved(config: Config) -> None:
    """The resolved config as YAML on stdout, for `seq2seq config` and `seq2seq train --dry-run`."""
    typer.echo(to_yaml(config), nl=False)
