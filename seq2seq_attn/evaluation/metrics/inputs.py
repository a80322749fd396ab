"""What a report scores: systems' hypotheses, read from files or given, checked line-aligned with the
references and sources and labelled once each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...errors import UserError
from ...io import read_lines
from .diagnostics import SentenceAttention


@dataclass(frozen=True)
class System:
    """One system's output: a label for tables and legends, one hypothesis per reference line, and for a
    trained run searched here its attention (one `SentenceAttention` per line, None for an empty one)."""

    label: str
    hypotheses: list[str]
    path: str = ""  # where the hypotheses came from, for messages and the report ("" if not a file)
    attention: Sequence[SentenceAttention | None] | None = None
    sources_cut: int | None = None  # a trained run's sources cut to decode.max_src_tokens pieces


def read_text(path: str | Path) -> list[str]:
    return list(read_lines(path))


def default_label(path: str | Path) -> str:
    """The file name without its extension(s): runs/a/hyp.test.txt.gz -> hyp.test."""
    return Path(Path(path).name.removesuffix(".gz")).stem


def load_systems(paths: Sequence[str | Path], labels: Sequence[str] = ()) -> list[System]:
    """Read hypothesis files; labels pair with paths in order and default to the file stems."""
    if labels and len(labels) != len(paths):
        raise UserError(f"{len(labels)} labels for {len(paths)} hypothesis files: one each, or none")
    labels = list(labels) or [default_label(path) for path in paths]
    return [System(label, read_text(path), str(path)) for label, path in zip(labels, paths, strict=True)]


def check_aligned(name: str, count: int, other: str, other_count: int) -> None:
    if count != other_count:
        raise UserError(
            f"{name} has {count} lines but {other} has {other_count}: hypotheses, references and sources "
            "must be line-aligned"
        )


def check_lines(
    systems: Sequence[System],
    references: Sequence[str],
    sources: Sequence[str] | None,
    references_path: str,
    sources_path: str,
) -> None:
    """References to evaluate against, and every system's hypotheses and the sources line-aligned with
    them (eval checks the files given before its runs translate)."""
    ref_name = references_path or "the references"
    if not references:
        raise UserError(f"{ref_name}: no lines to evaluate")
    for system in systems:
        check_aligned(
            system.path or f"system {system.label!r}", len(system.hypotheses), ref_name, len(references)
        )
    if sources is not None:
        check_aligned(sources_path or "the sources", len(sources), ref_name, len(references))


def check_labels(labels: Sequence[str]) -> None:
    """Each system's label names it alone: in the report, as the baseline, and in the file a run's
    translation is kept in (two runs of one label would write the same file)."""
    for label in labels:
        if labels.count(label) > 1:
            raise UserError(
                f"system label {label!r} is used {labels.count(label)} times: give each system its own label"
            )
