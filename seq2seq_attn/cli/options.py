"""Options that several verbs share, declared once: the trained model, the device, and the options made
from a config section's keys (`config_options`), with how each command names the keys it sets in its
error messages.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import typer

from ..config import TrainConfig, choices_enum
from ..config.schema import field_types
from ..errors import UserError
from ..evaluation.metrics.buckets import parse_edges
from .config import SET

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


@dataclass(frozen=True)
class Flag:
    """How one config key shows as a command-line option, where the default does not do: the default
    name is the key's (`--max-len-a` for `max_len_a`, `--compile/--no-compile` for a bool), in the
    command's default panel of `--help`, its value named by its type; a list key's option is text that
    `parse` reads."""

    name: str = ""  # e.g. "--beam"
    negative: str | None = ""  # a bool's off switch, e.g. "--allow-unk"; None: it has none
    short: str = ""  # a one-letter alias, e.g. "-b"
    panel: str = ""  # the `--help` panel it is listed in
    metavar: str = ""  # what `--help` calls its value, e.g. "LANG"
    parse: Callable[[str], Any] | None = None  # a list key's value from the option's text, e.g. "0,10,20"


# The `eval` keys whose option (in `eval` and `align`) is not named or typed as the default does.
EVAL_FLAGS = {
    "buckets": Flag(metavar="N,N,...", parse=parse_edges),
    "words_lang": Flag(metavar="LANG"),
    "baseline": Flag(metavar="LABEL"),
    "lowercase": Flag(negative=None),
    "moses_bleu": Flag(metavar="LANG"),
    "task_ref": Flag(metavar="FILE"),
    "task_lang": Flag(metavar="LANG"),
    "align_threshold": Flag("--threshold"),
}


def flag_name(key: str, flag: Flag | None = None) -> str:
    return (flag and flag.name) or "--" + key.replace("_", "-")


def config_options(
    section: type,
    prefix: str,
    flags: Mapping[str, Flag],
    panel: str,
    panels: Sequence[str] = (),
    *,
    keys: Sequence[str] | None = None,
    from_runs: bool = False,
    set_section: str = "",
) -> Callable[[Command], Command]:
    """A decorator that gives a typer command one option per key of config `section` (a schema
    dataclass, named `prefix` in messages, e.g. "decode"; only `keys` when given): typed as the schema
    types it (its choices as an Enum, a `path` key as a Path, a list key as text that `Flag.parse` reads),
    its help the key's short help, in `panel` unless `flags` says otherwise. The type column stays narrow
    for 80-column terminals: a switch shows none, a choice NAME with its choices in the help. Every option
    defaults to None, "not given". The command receives them in one keyword argument, `overrides`: key ->
    the value given (plain str, int, float, bool or list), or None.

    The help names the key in parentheses; with `from_runs`, it says instead that a left-out option takes
    the --model run's value of the key, else the schema's default, and a value outside the key's range is
    refused as the command line is read. A `UserError` the command raises names each key it sets
    (`errors.setting`) by its option, and those of the section `set_section` by `--set SECTION.KEY` (the
    command takes them so).

    So a new key of the section is a new option of every such command with no other edit; `flags` only
    renames an option or moves it to another panel. `--help` lists the options without a panel first,
    then the panels in the order of `panels`."""
    fields = _fields(section, keys)
    option_of = functools.partial(_option_of, option_names(section, prefix, flags, keys), set_section)

    def decorate(command: Command) -> Command:
        own = [  # typer passes every parameter by name
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in inspect.signature(command).parameters.values()
            if p.name != "overrides"
        ]
        made = [
            _parameter(section, prefix, field, flags.get(field.name), panel, from_runs) for field in fields
        ]
        clash = {p.name for p in own} & {p.name for p in made}
        if clash:
            raise TypeError(f"{command.__name__}: parameters named like {prefix} keys: {sorted(clash)}")

        @functools.wraps(command)
        def wrapper(**given: Any) -> Any:
            try:
                overrides = {p.name: _value(given.pop(p.name), flags.get(p.name)) for p in made}
                return command(overrides=overrides, **given)
            except UserError as error:
                error.names = option_of
                raise

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


def option_names(
    section: type, prefix: str, flags: Mapping[str, Flag], keys: Sequence[str] | None = None
) -> dict[str, str]:
    """Config key (e.g. "decode.beam_size") -> the option that sets it, for each key of `section` (of
    `keys` when given) that `config_options` makes an option of."""
    return {
        f"{prefix}.{field.name}": flag_name(field.name, flags.get(field.name))
        for field in _fields(section, keys)
    }


def _fields(section: type, keys: Sequence[str] | None) -> list[dataclasses.Field]:
    """The keys of `section` that are options: all, or those in `keys`."""
    return [field for field in dataclasses.fields(section) if keys is None or field.name in keys]


def _option_of(names: Mapping[str, str], set_section: str, key: str) -> str:
    """How a command names config key `key` in its messages: by its option (`names`), by `--set KEY` for
    a key of `set_section`, else as the key."""
    through_set = set_section and key.startswith(f"{set_section}.")
    return names.get(key) or (f"{SET} {key}" if through_set else key)


def _parameter(
    section: type, prefix: str, field: dataclasses.Field, flag: Flag | None, panel: str, from_runs: bool
) -> inspect.Parameter:
    key, kind = field.name, field_types(section)[field.name]
    text, metavar = field.metadata["short"].rstrip("."), (flag and flag.metavar) or None
    if "choices" in field.metadata:
        kind, metavar = choices_enum(section, key), "NAME"  # a narrow type column; the choices in the help
        choices = field.metadata["choices"]
        if not all(choice in text for choice in choices):
            text += f"; one of {', '.join(choices)}"
    elif field.metadata.get("path"):
        kind = Path
    elif kind is bool:
        metavar = ""  # a switch takes no value
    elif typing.get_origin(kind) is list:
        kind = str  # the text `Flag.parse` reads
    name = flag_name(key, flag)
    negative = "--no-" + name[2:] if flag is None or flag.negative == "" else flag.negative
    declared = [f"{name}/{negative}" if kind is bool and negative else name]
    if flag and flag.short:
        declared.append(flag.short)
    ranges = {}
    if from_runs:  # a value out of range is refused as the command line is read
        ranges = {"min": field.metadata.get("ge"), "max": field.metadata.get("le")}
        ranges = {bound: value for bound, value in ranges.items() if value is not None}
    option = typer.Option(
        None,
        *declared,
        help=f"{text}{_default_help(prefix, field) if from_runs else f' ({key})'}.",
        metavar=metavar,
        rich_help_panel=(flag and flag.panel) or panel,
        show_default=False,
        **ranges,
    )
    return inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind | None)


def _default_help(prefix: str, field: dataclasses.Field) -> str:
    """ ". Default: the --model run's PREFIX.KEY, else VALUE" (the schema's default, unless empty)."""
    default = field.default_factory() if field.default is dataclasses.MISSING else field.default
    shown = ",".join(map(str, default)) if isinstance(default, list) else default
    otherwise = f", else {shown}" if shown not in ("", False) else ""
    return f". Default: the --model run's {prefix}.{field.name}{otherwise}"


def _value(value: Any, flag: Flag | None) -> Any:
    """An option's value as the config holds it (`_plain`), a list key's read from its text."""
    if value is not None and flag is not None and flag.parse is not None:
        return flag.parse(value)
    return _plain(value)


def _plain(value: Any) -> Any:
    """A typer value as the config holds it: an Enum's value, a Path as str."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    return value


def refuse_standard_streams(command: str, named: list[tuple[str, Path | None]]) -> None:
    """`-` is a file name to Path options: `command` would write a file or folder named `-`, or read one.
    Refused where the option does not take the standard streams (`translate -i/-o` and `score -o` do)."""
    for option, path in named:
        if path is not None and str(path) == "-":
            raise UserError(f"{option} -: {command} takes a file here, not the standard streams; give a name")
