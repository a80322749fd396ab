"""Where sentence pairs come from: local files, a Hugging Face dataset, or the synthetic generator.

Every source is opened into a `Source`: a description for the manifest, the input files whose change
must trigger a new `prepare`, and `read(split)`, which yields (source, target) text pairs one at a time.
Nothing here holds a corpus in memory, so a multi-million-pair corpus streams through in constant space.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import DataConfig, HuggingFaceConfig, SplitFiles, to_dict
from ..constants import SPLITS
from ..errors import UserError
from ..io import read_lines
from .synthetic import generate_split

Pair = tuple[str, str]


@dataclass(frozen=True)
class Source:
    """An opened corpus source."""

    description: dict[str, Any]  # what was read, for the manifest
    inputs: list[Path]  # files whose size and mtime enter the fingerprint
    read: Callable[[str], Iterator[Pair]]  # split name -> stream of (source, target)
    origin: Callable[[str], str]  # split name -> where its pairs come from, for messages


def open_source(data: DataConfig) -> Source:
    """Check the settings of `data.source` (files exist, keys set) and open it; reading starts lazily."""
    opener = {"local": _local_source, "huggingface": _huggingface_source, "synthetic": _synthetic_source}
    return opener[data.source](data)


# ----------------------------------------------------------------------------------------------------------
# local files


def _local_source(data: DataConfig) -> Source:
    files = {split: _split_files(getattr(data.local, split), f"data.local.{split}") for split in SPLITS}
    return Source(
        description={
            "type": "local",
            "files": {split: [str(p) for p in paths] for split, paths in files.items()},
        },
        inputs=[path for paths in files.values() for path in paths],
        read=lambda split: read_tsv(*files[split]) if len(files[split]) == 1 else read_aligned(*files[split]),
        origin=lambda split: " and ".join(str(path) for path in files[split]),
    )


def _split_files(split: SplitFiles, key: str) -> tuple[Path, ...]:
    """(tsv,) or (src, tgt) of one split, each checked to exist so a typo fails before any work."""
    if split.tsv and (split.src or split.tgt):
        raise UserError(f"`{key}`: give either `tsv` or `src` and `tgt`, not both")
    if split.tsv:
        named = {"tsv": split.tsv}
    elif split.src and split.tgt:
        named = {"src": split.src, "tgt": split.tgt}
    else:
        raise UserError(f"`{key}.src` and `{key}.tgt` (or `{key}.tsv`) must be set for data.source: local")
    for name, path in named.items():
        if not Path(path).is_file():
            raise UserError(f"`{key}.{name}`: {path}: file not found")
    return tuple(Path(path) for path in named.values())


def read_aligned(src_path: Path, tgt_path: Path) -> Iterator[Pair]:
    """Pairs from two line-aligned files; a line-count mismatch names both files and both counts."""
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    for number, (src, tgt) in enumerate(itertools.zip_longest(src_lines, tgt_lines), start=1):
        if src is None or tgt is None:  # one file ended: count the rest of the other for the message
            rest = sum(1 for _ in (tgt_lines if src is None else src_lines))
            src_count, tgt_count = (number - 1, number + rest) if src is None else (number + rest, number - 1)
            shorter = src_path if src is None else tgt_path
            raise UserError(
                f"line counts differ: {src_path} has {src_count} lines, {tgt_path} has {tgt_count} lines "
                f"({shorter.name} is shorter)"
            )
        yield src, tgt


def read_tsv(path: Path) -> Iterator[Pair]:
    """Pairs from `source<TAB>target` lines; any other number of fields is an error at that line."""
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise UserError(f"{path}:{number}: expected source<TAB>target, found {len(fields)} field(s)")
        yield fields[0], fields[1]


# ----------------------------------------------------------------------------------------------------------
# Hugging Face datasets


def _huggingface_source(data: DataConfig) -> Source:
    hf = data.huggingface
    if not hf.translation_field and not (hf.src_field and hf.tgt_field):
        raise UserError(
            "`data.huggingface.src_field` and `data.huggingface.tgt_field` must be set when "
            "`data.huggingface.translation_field` is ''"
        )
    saved = _saved_to_disk(hf.name)
    return Source(
        description={
            "type": "huggingface",
            **{key: value for key, value in to_dict(hf).items() if not key.endswith("_split")},
            "splits": _hf_split_names(hf),
            "saved_to_disk": saved,
        },
        inputs=sorted(p for p in Path(hf.name).rglob("*") if p.is_file()) if saved else [],
        read=lambda split: _read_huggingface(data, split),
        origin=lambda split: f"{hf.name} split {_hf_split_names(hf)[split]!r}",
    )


def _hf_split_names(hf: HuggingFaceConfig) -> dict[str, str]:
    return {"train": hf.train_split, "valid": hf.valid_split, "test": hf.test_split}


def _saved_to_disk(name: str) -> bool:
    """True for a folder written by `Dataset(Dict).save_to_disk` (read offline with `load_from_disk`)."""
    folder = Path(name)
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def _read_huggingface(data: DataConfig, split: str) -> Iterator[Pair]:
    hf = data.huggingface
    rows = _load_split(hf, split)
    if split == "train" and hf.max_examples:
        rows = itertools.islice(rows, hf.max_examples)
    for row in rows:
        yield _row_pair(row, hf, data)


def _load_split(hf: HuggingFaceConfig, split: str) -> Any:
    """The rows of one split: an iterable dataset when streaming, a memory-mapped Arrow table otherwise."""
    try:
        import datasets  # imported here: slow to import, and only this source needs it
    except ImportError:
        raise UserError(
            "data.source: huggingface needs the `datasets` package (pip install datasets)"
        ) from None
    name = _hf_split_names(hf)[split]
    key = f"data.huggingface.{split}_split"
    if _saved_to_disk(hf.name):
        saved = datasets.load_from_disk(hf.name)
        if not isinstance(saved, datasets.DatasetDict):
            raise UserError(
                f"`data.huggingface.name`: {hf.name} holds one Dataset; save a DatasetDict with splits"
            )
        if name not in saved:
            raise UserError(f"`{key}`: no split {name!r} in {hf.name} (has: {', '.join(saved)})")
        return saved[name]
    try:
        return datasets.load_dataset(
            hf.name,
            hf.config or None,
            split=name,
            streaming=hf.streaming,
            revision=hf.revision or None,
        )
    except (FileNotFoundError, ValueError, ConnectionError) as err:  # unknown name/config/split; offline
        raise UserError(
            f"`data.huggingface.name`: cannot load {hf.name!r} (config {hf.config!r}, {key} {name!r}): {err}"
        ) from None


def _row_pair(row: Mapping[str, Any], hf: HuggingFaceConfig, data: DataConfig) -> Pair:
    """(source, target) of one row: from a {lang: text} translation column, or from two text columns."""
    if hf.translation_field:
        row = _field(row, hf.translation_field, "data.huggingface.translation_field")
        src, tgt = (data.src_lang, "data.src_lang"), (data.tgt_lang, "data.tgt_lang")
    else:
        src, tgt = (hf.src_field, "data.huggingface.src_field"), (hf.tgt_field, "data.huggingface.tgt_field")
    return _one_line(_field(row, *src)), _one_line(_field(row, *tgt))


def _field(row: Mapping[str, Any], name: str, key: str) -> Any:
    try:
        return row[name]
    except (KeyError, TypeError):
        has = ", ".join(sorted(row)) if isinstance(row, Mapping) else type(row).__name__
        raise UserError(f"`{key}`: no field {name!r} in the dataset rows (has: {has})") from None


def _one_line(text: str | None) -> str:
    """A segment as one line: the output files are line-aligned, so embedded line breaks become spaces."""
    return "" if text is None else text.replace("\r", " ").replace("\n", " ")


# ----------------------------------------------------------------------------------------------------------
# synthetic


def _synthetic_source(data: DataConfig) -> Source:
    return Source(
        description={"type": "synthetic", **to_dict(data.synthetic)},
        inputs=[],
        read=lambda split: generate_split(data.synthetic, split),
        origin=lambda split: "the synthetic generator",
    )
