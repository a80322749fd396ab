"""Reading a config: YAML, `section.key=value` overrides, strict validation against the schema, paths.

Validation is strict: an unknown key is an error with a "did you mean" suggestion, and a value of the
wrong type or out of range names the key path and what was expected. Paths written in a config file are
relative to that file's folder.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from ..errors import UserError, setting
from .schema import Config, field_types

T = TypeVar("T")


def load_config(
    path: str | Path, overrides: list[str] | tuple[str, ...] = (), option: str = "override"
) -> Config:
    """Read a YAML config, apply `key.path=value` overrides, validate, and resolve relative paths.

    `option` names the overrides in error messages (the command line's `--set`)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: config file not found")
    try:
        raw = _read_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"{path}{where}: invalid YAML: {problem}") from None
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not valid UTF-8 ({err.reason} at byte {err.start})") from None
    if raw is None or raw == {}:  # a file not saved yet or cut short, not a wish for every default
        raise UserError(f"{path}: empty config; a config must set at least `name`")
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a config must be a mapping of sections, got {type(raw).__name__}")
    config = from_dict(raw, where=str(path))  # the file's own mistakes named as the file's
    for item in overrides:  # each override's named as the override's
        apply_override(raw, item, option)
        config = from_dict(raw, where=f"{option} {item}")
    resolve_paths(config, path.parent)
    settle_locations(config)
    return config


def settle_locations(config: Config) -> None:
    """The data and run folders left to their defaults ('': under the working directory) made absolute, so
    that a run's config.yaml and checkpoints name them wherever a later command runs (an export's card,
    a lexical shortlist learned from the run's data)."""
    config.data.dir = str(config.data_dir.resolve())
    config.train.run_dir = str(config.run_dir.resolve())


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the last: a second
    `train:` section would silently drop the first one's settings)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, typing.Hashable):
                raise yaml.constructor.ConstructorError(
                    None, None, f"a {type(key).__name__} as a key", key_node.start_mark
                )
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key `{key}`", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(text: str) -> Any:
    """The YAML document `text`, read by `_UniqueKeys` (what `yaml.safe_load` does with its own loader)."""
    loader = _UniqueKeys(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def apply_override(raw: dict, item: str, option: str = "override") -> None:
    """Apply one `a.b.c=value` override to the raw mapping; the value is typed like YAML, except for a
    text key, which takes the text as written (YAML would read `--set name=007` as the number 7)."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise UserError(f"{option} {item!r}: expected KEY=VALUE, e.g. train.learning_rate=3e-4")
    parts = key.strip().split(".")
    hint = _hint(parts)
    if dataclasses.is_dataclass(hint):
        raise UserError(f"{option} {key}: a section; set its keys ({key}.KEY=VALUE)")
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:  # absent, or written empty (`model:`)
            child = node[part] = {}
        if not isinstance(child, dict):
            raise UserError(f"{option} {key}: {part!r} is not a section")
        node = child
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        parsed = value
    node[parts[-1]] = value if hint is str and not isinstance(parsed, str) and value.strip() else parsed


def _hint(parts: list[str]) -> Any:
    """The schema's type of the key at `parts` (a section's dataclass); None where there is no such key
    (the error is then the validation's, with its suggestion)."""
    hint: Any = Config
    for part in parts:
        if not dataclasses.is_dataclass(hint) or part not in field_types(hint):
            return None
        hint = field_types(hint)[part]
    return hint


def from_dict(raw: dict, where: str = "config") -> Config:
    """Build and validate a Config from a plain mapping (as read from YAML)."""
    return _build(Config, raw, prefix="", where=where)


def _all_keys(cls: type, prefix: str = "") -> list[str]:
    keys = []
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        keys.append(path)
        if dataclasses.is_dataclass(field_types(cls)[f.name]):
            keys.extend(_all_keys(field_types(cls)[f.name], path + "."))
    return keys


def _suggest(key_path: str) -> str:
    candidates = _all_keys(Config)
    leaf = key_path.rsplit(".", 1)[-1]
    match = difflib.get_close_matches(key_path, candidates, n=1, cutoff=0.6)
    if not match:  # a key put in the wrong section: match on the leaf name alone
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in candidates}
        leaf_match = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.7)
        match = [by_leaf[leaf_match[0]]] if leaf_match else []
    return f" (did you mean `{match[0]}`?)" if match else ""


def _build(cls: type, raw: Any, prefix: str, where: str) -> Any:
    label = prefix.rstrip(".") or "top level"
    if not isinstance(raw, dict):
        raise UserError(f"{where}: {label}: expected a mapping of keys, got {_kind(raw)}")
    hints = field_types(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in names:
            raise UserError(f"{where}: unknown key `{prefix}{key}`{_suggest(prefix + str(key))}")
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            continue
        path = prefix + f.name
        if dataclasses.is_dataclass(hints[f.name]):
            section = raw[f.name]  # written empty (`model:`): its defaults
            values[f.name] = _build(hints[f.name], {} if section is None else section, path + ".", where)
        else:
            values[f.name] = _check_value(raw[f.name], hints[f.name], f.metadata, path, where)
    built = cls(**values)
    if hasattr(built, "check"):
        built.check(where)
    return built


def override(section: T, changes: Mapping[str, Any], prefix: str) -> T:
    """A copy of config section `section` (e.g. `config.decode`, prefix "decode.") with the changes that
    are not None applied, each checked as a value read from a config file; the error names each changed
    key as where the caller sets it (`errors.setting`)."""
    hints, fields = field_types(type(section)), {f.name: f for f in dataclasses.fields(section)}
    given = {key: value for key, value in changes.items() if value is not None}
    checked = {
        key: _check_value(value, hints[key], fields[key].metadata, prefix + key, setting(prefix + key))
        for key, value in given.items()
    }
    result = dataclasses.replace(section, **checked)
    if hasattr(result, "check"):
        result.check(", ".join(setting(prefix + key) for key in given) or "config")
    return result


def choices_enum(cls: type, key: str) -> type[enum.Enum]:
    """The schema's choices for key `key` of section `cls` as a str Enum, the type a typer option needs."""
    (field,) = [f for f in dataclasses.fields(cls) if f.name == key]
    choices = {choice: choice for choice in field.metadata["choices"]}
    return enum.Enum(f"{cls.__name__}.{key}", choices, type=str)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check_value(value: Any, hint: Any, rules: dict, path: str, where: str) -> Any:
    def fail(expected: str) -> typing.NoReturn:
        raise UserError(f"{where}: `{path}` must be {expected}, got {value!r}")

    origin = typing.get_origin(hint)
    if origin in (list, types.GenericAlias) or hint is list:
        if not isinstance(value, list):
            fail(f"a list of {typing.get_args(hint)[0].__name__}")
        item_type = typing.get_args(hint)[0]
        items = [_check_scalar(v, item_type, fail) for v in value]
        if "length" in rules and len(items) != rules["length"]:
            fail(f"a list of {rules['length']} numbers")
        if "items" in rules and any(v not in rules["items"] for v in items):
            fail(f"a list drawn from {rules['items']}")
        for item in items:  # a list's range rules hold for each of its items
            _check_range(item, rules, fail)
        return items
    if hint is str and isinstance(value, bool) and {"on", "off"} <= set(rules.get("choices", ())):
        value = "on" if value else "off"  # YAML 1.1 reads an unquoted on / off as true / false
    value = _check_scalar(value, hint, fail)
    if "choices" in rules and value not in rules["choices"]:
        fail("one of " + ", ".join(repr(c) for c in rules["choices"]))
    _check_range(value, rules, fail)
    return value


def _check_scalar(value: Any, hint: Any, fail: Any) -> Any:
    if hint is bool:
        if not isinstance(value, bool):
            fail("true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail("an integer")
        if not -(2**63) <= value < 2**63:
            fail("an integer of a 64-bit size")
        return value
    if hint is float:
        if isinstance(value, str):  # YAML reads "1e-3" (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                fail("a number")
        if isinstance(value, bool) or not isinstance(value, int | float):
            fail("a number")
        if not math.isfinite(value):
            fail("a finite number")
        return float(value)
    if hint is str:
        if value is None:
            return ""
        if isinstance(value, int | float) and not isinstance(value, bool):  # YAML read 007 as 7, 1.10 as 1.1
            fail("a string (quoted, as YAML reads an unquoted number as a number)")
        if not isinstance(value, str):
            fail("a string")
        return value
    raise TypeError(f"unsupported config type {hint}")


_BOUNDS = {
    "ge": (">=", lambda v, b: v >= b),
    "gt": (">", lambda v, b: v > b),
    "le": ("<=", lambda v, b: v <= b),
    "lt": ("<", lambda v, b: v < b),
}


def _check_range(value: Any, rules: dict, fail: Any) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return
    bounds = [(name, rules[name]) for name in _BOUNDS if name in rules]
    if not all(_BOUNDS[name][1](value, bound) for name, bound in bounds):
        fail("a number " + " and ".join(f"{_BOUNDS[name][0]} {bound}" for name, bound in bounds))


def resolve_paths(config: Any, base: Path) -> None:
    """Make every non-empty path key absolute, relative to the config file's folder."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            resolve_paths(value, base)
        elif f.metadata.get("path") and value:
            path = Path(value).expanduser()
            setattr(config, f.name, str(path if path.is_absolute() else (base / path).resolve()))


def path_keys(cls: type = Config, prefix: str = "") -> set[str]:
    """The dotted names of the keys that name a file or folder (`path=True`)."""
    keys = set()
    for f in dataclasses.fields(cls):
        kind = field_types(cls)[f.name]
        if dataclasses.is_dataclass(kind):
            keys |= path_keys(kind, f"{prefix}{f.name}.")
        elif f.metadata.get("path"):
            keys.add(f"{prefix}{f.name}")
    return keys


def to_dict(config: Any) -> dict:
    return dataclasses.asdict(config)


def to_yaml(config: Any) -> str:
    return yaml.safe_dump(to_dict(config), sort_keys=False, allow_unicode=True)
