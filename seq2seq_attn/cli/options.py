"""Options that several verbs share, declared once: the trained model, the device, eval-section defaults,
and the options made from a config section's keys (`config_options`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import typer

from ..config import EvalConfig, TrainConfig, choices_enum
from ..config.schema import field_types

Command = TypeVar("Command", bound=Callable[..., Any])

Device = choices_enum(TrainConfig, "device")


MODEL_HELP = (
    "Run directory (its best checkpoint), a checkpoint file in a run's checkpoints/ folder, a folder of "
    "`seq2seq export`, or hf://OWNER/NAME (a model on the Hugging Face hub)."
)


def model_option() -> Any:
    """`--model/-m RUN`: a trained run (its best checkpoint), one of its checkpoint files, an exported model
    folder or a hub model."""
    return typer.Option(..., "--model", "-m", help=MODEL_HELP, show_default=False)


def models_option() -> Any:
    """`--model/-m RUN`, repeatable: several runs make an ensemble (decoding/ensemble.py)."""
    help = (
        f"{MODEL_HELP} Repeat it to translate with the ensemble of several runs: the mean of their "
        "log-probabilities, the first run's decode settings (the runs must share the target vocabulary)."
    )
    return typer.Option(..., "--model", "-m", help=help, show_default=False)


def device_option(panel: str | None = None) -> Any:
    return typer.Option(
        Device.auto,
        "--device",
        metavar="NAME",
        help=f"{', '.join(d.value for d in Device)}; auto uses CUDA when available.",
        rich_help_panel=panel,
    )


def run_default_option(key: str, flag: str, help: str, **kwargs: Any) -> Any:
    """A typer option for `eval` key `key` with no default of its own: when it is left out, the `eval`
    section of the --model run's config applies (the schema's default without a run), as its help says."""
    default = getattr(EvalConfig(), key)
    shown = ",".join(map(str, default)) if isinstance(default, list) else default
    help = f"{help} Default: the --model run's eval.{key}, else {shown}."
    return typer.Option(None, flag, help=help, show_default=False, **kwargs)


@dataclass(frozen=True)
class Flag:
    """How one config key shows as a command-line option, where the default does not do: the default
    name is the key's (`--max-len-a` for `max_len_a`, `--compile/--no-compile` for a bool), in the
    command's default panel of `--help`."""

    name: str = ""  # e.g. "--beam"
    negative: str = ""  # a bool's off switch, e.g. "--allow-unk"
    short: str = ""  # a one-letter alias, e.g. "-b"
    panel: str = ""  # the `--help` panel it is listed in


def flag_name(key: str, flag: Flag | None = None) -> str:
    return (flag and flag.name) or "--" + key.replace("_", "-")


def config_options(
    section: type, prefix: str, flags: Mapping[str, Flag], panel: str, panels: Sequence[str] = ()
) -> Callable[[Command], Command]:
    """A decorator that gives a typer command one option per key of config `section` (a schema
    dataclass, named `prefix` in messages, e.g. "decode"): typed as the schema types it (its choices as an
    Enum, a `path` key as a Path), its help the key's short help and, in parentheses, the key's name, in
    `panel` unless `flags` says otherwise. The type column stays narrow for 80-column terminals: a switch
    shows none, a choice NAME with its choices in the help. Every option defaults to None, "not given".
    The command receives them in one keyword argument, `overrides`: key -> the value given (plain str,
    int, float or bool), or None.

    So a new key of the section is a new option of every such command with no other edit; `flags` only
    renames an option or moves it to another panel. `--help` lists the options without a panel first,
    then the panels in the order of `panels`."""

    def decorate(command: Command) -> Command:
        own = [  # typer passes every parameter by name
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in inspect.signature(command).parameters.values()
            if p.name != "overrides"
        ]
        made = [
            _parameter(section, prefix, field, flags.get(field.name), panel)
            for field in dataclasses.fields(section)
        ]
        clash = {p.name for p in own} & {p.name for p in made}
        if clash:
            raise TypeError(f"{command.__name__}: parameters named like {prefix} keys: {sorted(clash)}")

        @functools.wraps(command)
        def wrapper(**given: Any) -> Any:
            overrides = {p.name: _plain(given.pop(p.name)) for p in made}
            return command(overrides=overrides, **given)

        rank = {name: i + 1 for i, name in enumerate(panels)}
        ordered = sorted(
            [*own, *made], key=lambda p: rank.get(getattr(p.default, "rich_help_panel", None), 0)
        )
        wrapper.__signature__ = inspect.Signature(ordered)  # what typer reads (`sorted` keeps ties in order)
        wrapper.__annotations__ = {
            **{name: kind for name, kind in command.__annotations__.items() if name != "overrides"},
            **{p.name: p.annotation for p in made},
        }
        return wrapper  # type: ignore[return-value]

    return decorate


def config_flag_names(section: type, prefix: str, flags: Mapping[str, Flag]) -> dict[str, str]:
    """key -> the option that sets it, for error messages about a value given on the command line."""
    return {field.name: flag_name(field.name, flags.get(field.name)) for field in dataclasses.fields(section)}


def _parameter(
    section: type, prefix: str, field: dataclasses.Field, flag: Flag | None, panel: str
) -> inspect.Parameter:
    key, kind = field.name, field_types(section)[field.name]
    text, metavar = field.metadata["short"].rstrip("."), None
    if "choices" in field.metadata:
        kind, metavar = choices_enum(section, key), "NAME"  # a narrow type column; the choices in the help
        choices = field.metadata["choices"]
        if not all(choice in text for choice in choices):
            text += f"; one of {', '.join(choices)}"
    elif field.metadata.get("path"):
        kind = Path
    elif kind is bool:
        metavar = ""  # a switch takes no value
    name = flag_name(key, flag)
    declared = [f"{name}/{(flag and flag.negative) or '--no-' + name[2:]}" if kind is bool else name]
    if flag and flag.short:
        declared.append(flag.short)
    option = typer.Option(
        None,
        *declared,
        help=f"{text} ({key}).",  # the key's name: `prefix` is in the command's own help
        metavar=metavar,
        rich_help_panel=(flag and flag.panel) or panel,
        show_default=False,
    )
    return inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind | None)


def _plain(value: Any) -> Any:
    """A typer value as the config holds it: an Enum's value, a Path as str."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    return value
