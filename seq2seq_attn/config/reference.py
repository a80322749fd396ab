"""The config reference: every key with its type, default and meaning, for `seq2seq config --keys` and
docs/config.md (a test keeps the committed file in sync)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import yaml

from .schema import Config, field_types


def describe_keys(cls: type = Config, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key path, type, default, documentation) for every key, depth-first in schema order."""
    rows = []
    hints = field_types(cls)
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            rows.append((path, "section", "", f.metadata.get("doc", "")))
            rows.extend(describe_keys(hint, path + "."))
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        doc = f.metadata.get("doc", "")
        if "choices" in f.metadata:
            doc += " One of: " + ", ".join(f"`{c}`" for c in f.metadata["choices"]) + "."
        rows.append(
            (
                path,
                _type_name(hint),
                yaml.safe_dump(default, default_flow_style=True).strip().removesuffix("...").strip(),
                doc,
            )
        )
    return rows


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is list:
        return f"list[{typing.get_args(hint)[0].__name__}]"
    return hint.__name__


def config_markdown() -> str:
    """docs/config.md, generated from the schema (a test keeps the committed file in sync)."""
    lines = [
        "# Config reference",
        "",
        "Generated from `seq2seq_attn/config/schema.py` by `seq2seq config --keys --format markdown`; do not "
        "edit.",
        "",
        "Paths are relative to the config file's folder. Override any key from the command line with",
        "`--set section.key=value` (typed like YAML), e.g. `--set train.learning_rate=3e-4`.",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for key, kind, default, doc in describe_keys():
        if kind == "section":
            lines.append(f"| **`{key}`** | section | | {doc} |")
        else:
            lines.append(f"| `{key}` | {kind} | `{default}` | {doc} |")
    return "\n".join(lines) + "\n"
