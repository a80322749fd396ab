"""Where sentence pairs come from: local files, Multi30k's official files, a Hugging Face dataset, or the
synthetic generator.

Every source is opened into a `Source`: a description for the manifest, the input files whose change
must trigger a new `prepare`, and `read(split)`, which yields (source, target) text pairs one at a time.
Nothing here holds a corpus in memory, so a multi-million-pair corpus streams through in constant space.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import unicodedata
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import DataConfig, HuggingFaceConfig, LocalConfig, SplitFiles, to_dict
from ..config.constants import SPLITS
from ..errors import UserError
from ..io import LineEnds, read_lines
from . import moses, multi30k
from .clean import without_breaks
from .synthetic import generate_split

Pair = tuple[str, str]


@dataclass(frozen=True)
class Source:
    """An opened corpus source."""

    description: dict[str, Any]  # what was read, for the manifest
    inputs: list[Path]  # files whose size and mtime enter the fingerprint
    read: Callable[[str], Iterator[Pair]]  # split name -> stream of (source, target)
    origin: Callable[[str], str]  # split name -> where its pairs come from, for messages
    found: dict[str, dict[str, Any]] = field(default_factory=dict)  # split -> what reading it cleaned


def open_source(data: DataConfig) -> Source:
    """Check the settings of `data.source` (files exist, keys set) and open it; reading starts lazily."""
    opener = {
        "local": _local_source,
        "multi30k": _multi30k_source,
        "huggingface": _huggingface_source,
        "synthetic": _synthetic_source,
    }
    return opener[data.source](data)


# ----------------------------------------------------------------------------------------------------------
# local files


def _local_source(data: DataConfig) -> Source:
    local = data.local
    files = {split: _split_files(getattr(local, split), f"data.local.{split}") for split in SPLITS}
    held = {
        split: getattr(local.hold_out, split)
        for split in HELD_OUT_SPLITS
        if not files[split] and getattr(local.hold_out, split)
    }
    _check_every_split(files, held)
    found: dict[str, dict[str, Any]] = {}
    reading = source_as_read(data) if held else None
    hold_out = HoldOut(files["train"], held, local.hold_out.seed, found, reading) if held else None

    def read(split: str) -> Iterator[Pair]:
        if hold_out is not None and (split == "train" or split in held):
            return hold_out.read(split)
        return read_files(files[split], found.setdefault(split, {}))

    return Source(
        description={
            "type": "local",
            "files": {split: [str(p) for p in paths] for split, paths in files.items() if paths},
            **({"hold_out": {**held, "seed": local.hold_out.seed}} if held else {}),
        },
        inputs=[path for paths in files.values() for path in paths],
        read=read,
        origin=lambda split: " and ".join(str(path) for path in files[split] or files["train"]),
        found=found,
    )


HELD_OUT_SPLITS = ("valid", "test")  # the splits `data.local.hold_out` can draw from the training files


def _split_files(split: SplitFiles, key: str) -> tuple[Path, ...]:
    """(tsv,) or (src, tgt) of one split, or () when unset; each file checked to exist, before any work."""
    if split.tsv and (split.src or split.tgt):
        raise UserError(f"`{key}`: give either `tsv` or `src` and `tgt`, not both")
    if split.tsv:
        named = {"tsv": split.tsv}
    elif split.src and split.tgt:
        named = {"src": split.src, "tgt": split.tgt}
    elif split.src or split.tgt:
        missing = "tgt" if split.src else "src"
        raise UserError(f"`{key}.{missing}` must be set too: a split is a source and a target file")
    else:
        return ()
    for name, path in named.items():
        if not Path(path).is_file():
            raise UserError(f"`{key}.{name}`: {path}: file not found")
    return tuple(Path(path) for path in named.values())


def _check_every_split(files: dict[str, tuple[Path, ...]], held: dict[str, int]) -> None:
    """Each split is read from its files or held out of the training files."""
    for split in SPLITS:
        if not files[split] and not held.get(split):
            key = f"data.local.{split}"
            hint = f", or set `data.local.hold_out.{split}` to draw it from train" if split != "train" else ""
            raise UserError(f"`{key}.src` and `{key}.tgt` (or `{key}.tsv`) must be set{hint}")


def read_files(paths: tuple[Path, ...], found: dict[str, Any]) -> Iterator[Pair]:
    """Pairs of one split from its (src, tgt) or (tsv,) files; what was cleaned off is counted in `found`."""
    cleaned = LineEnds()
    yield from read_tsv(*paths, cleaned) if len(paths) == 1 else read_aligned(*paths, cleaned)
    found.update(crlf_lines=cleaned.crlf, byte_order_marks=cleaned.bom)


def read_aligned(src_path: Path, tgt_path: Path, cleaned: LineEnds | None = None) -> Iterator[Pair]:
    """Pairs from two line-aligned files; a line-count mismatch names both files and both counts."""
    src_lines, tgt_lines = read_lines(src_path, cleaned), read_lines(tgt_path, cleaned)
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


def read_tsv(path: Path, cleaned: LineEnds | None = None) -> Iterator[Pair]:
    """Pairs from `source<TAB>target` lines; any other number of fields is an error at that line."""
    for number, line in enumerate(read_lines(path, cleaned), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise UserError(f"{path}:{number}: expected source<TAB>target, found {len(fields)} field(s)")
        yield fields[0], fields[1]


class HoldOut:
    """Dev and test sets drawn at random out of the training files (`data.local.hold_out`).

    A first pass reads the training pairs and keeps an 8-byte digest of each source sentence as the model
    reads it (`source_as_read`: tokenised as `data.tokenize` says, NFKC-normalised as sentencepiece does,
    white space normalised), so that two spellings the model cannot tell apart count as one sentence.
    Then `seed` draws line numbers, skipping pairs with an empty side and sources already drawn, so no
    source sentence is held out twice. Reading "train" afterwards skips the drawn lines and every other
    line whose digest is a held-out source's (the digests of the first pass, not computed again): no dev
    or test source is also a training source. Reading a held-out split yields its pairs in file order.
    """

    def __init__(
        self,
        train: tuple[Path, ...],
        sizes: dict[str, int],
        seed: int,
        found: dict,
        reading: Callable[[str], str],
    ) -> None:
        self.train, self.sizes, self.seed, self.found, self.reading = train, sizes, seed, found, reading
        self._lines: dict[str, set[int]] | None = None  # split -> drawn line numbers (0-based)
        self._digests = array("Q")  # each training line's source digest (EMPTY: a side is empty)
        self._sources: set[int] = set()  # digests of the held-out sources

    def read(self, split: str) -> Iterator[Pair]:
        lines = self._draw()
        if split != "train":
            self.found[split] = {"held_out_of": "train"}
            pairs = read_files(self.train, {})  # line ends are counted when train is read
            return (pair for number, pair in enumerate(pairs) if number in lines[split])
        pairs = read_files(self.train, self.found.setdefault(split, {}))
        return self._training_pairs(pairs, set().union(*lines.values()))

    def _training_pairs(self, pairs: Iterator[Pair], drawn: set[int]) -> Iterator[Pair]:
        removed = 0
        for number, pair in enumerate(pairs):
            if number in drawn:
                continue
            if self._digests[number] in self._sources:
                removed += 1
                continue
            yield pair
        self.found["train"]["held_out"] = {**self.sizes, "seed": self.seed, "same_source_removed": removed}

    def _draw(self) -> dict[str, set[int]]:
        if self._lines is not None:
            return self._lines
        pairs = read_files(self.train, {})
        digests = self._digests = array("Q", (_source_digest(pair, self.reading) for pair in pairs))
        wanted = sum(self.sizes.values())
        eligible = len(set(digests) - {EMPTY})
        if wanted >= eligible:
            sizes = " + ".join(f"{split} {size}" for split, size in self.sizes.items())
            raise UserError(
                f"`data.local.hold_out`: {sizes} pairs to hold out, but {self.train[0]} has only {eligible} "
                f"distinct non-empty source sentences ({len(digests)} lines); hold out fewer"
            )
        rng, drawn = random.Random(self.seed), []
        while len(drawn) < wanted:
            number = rng.randrange(len(digests))
            if digests[number] != EMPTY and digests[number] not in self._sources:
                self._sources.add(digests[number])
                drawn.append(number)
        self._lines, start = {}, 0
        for split, size in self.sizes.items():
            self._lines[split] = set(drawn[start : start + size])
            start += size
        return self._lines


EMPTY = 0  # the digest of a pair with an empty side: never held out


def _source_digest(pair: Pair, reading: Callable[[str], str]) -> int:
    src, tgt = pair
    if not src.strip() or not tgt.strip():
        return EMPTY
    digest = hashlib.blake2b(reading(src).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") or 1


def source_as_read(data: DataConfig) -> Callable[[str], str]:
    """A source sentence as the model reads it: its breaking characters spaces (`without_breaks`), through
    `data.tokenize`'s Moses processing, NFKC-normalised (sentencepiece's default), white space normalised."""
    pipeline = None if data.tokenize == "none" else moses.text_pipeline(data.tokenize, data.src_lang)

    def reading(text: str) -> str:
        text = without_breaks(text)
        text = pipeline.line(text) if pipeline else text
        return " ".join(unicodedata.normalize("NFKC", text).split())

    return reading


# ----------------------------------------------------------------------------------------------------------
# Multi30k


def _multi30k_source(data: DataConfig) -> Source:
    """Multi30k's official files (data/multi30k.py: checked, downloaded first where asked), read as the
    local files of the three splits."""
    folder = multi30k.fetch(data.multi30k, data.src_lang, data.tgt_lang)
    files = {
        split: SplitFiles(*map(str, multi30k.split_files(folder, split, data.src_lang, data.tgt_lang)))
        for split in SPLITS
    }
    local = _local_source(replace(data, local=LocalConfig(**files)))
    description = {"type": "multi30k", "commit": multi30k.COMMIT, "files": local.description["files"]}
    return replace(local, description=description)


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
        inputs=_local_files(hf.name),
        read=lambda split: _read_huggingface(data, split),
        origin=lambda split: f"{hf.name} split {_hf_split_names(hf)[split]!r}",
    )


def _local_files(name: str) -> list[Path]:
    """The files of a dataset `name` on this machine (a `save_to_disk` folder, a folder of data files or
    one file, as `datasets.load_dataset` reads them), whose content decides whether the data is current;
    none for a dataset of the hub."""
    path = Path(name)
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []


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
    return _text(_field(row, *src), src[1]), _text(_field(row, *tgt), tgt[1])


def _field(row: Mapping[str, Any], name: str, key: str) -> Any:
    try:
        return row[name]
    except (KeyError, TypeError):
        has = ", ".join(sorted(row)) if isinstance(row, Mapping) else type(row).__name__
        raise UserError(f"`{key}`: no field {name!r} in the dataset rows (has: {has})") from None


def _text(value: Any, key: str) -> str:
    """A segment's text (its line breaks become spaces where every split is prepared, `without_breaks`). A
    number is its text (a CSV column of numbers reads as numbers); another value is an error naming `key`."""
    if value is None:
        return ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise UserError(f"`{key}`: a {type(value).__name__} in the dataset rows, expected text")
    return value


# ----------------------------------------------------------------------------------------------------------
# synthetic


def _synthetic_source(data: DataConfig) -> Source:
    return Source(
        description={"type": "synthetic", **to_dict(data.synthetic)},
        inputs=[],
        read=lambda split: generate_split(data.synthetic, split),
        origin=lambda split: "the synthetic generator",
    )
