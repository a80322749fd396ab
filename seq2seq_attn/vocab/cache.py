"""The memory-mapped token cache that training and validation read.

`build_cache` encodes every split once, with the vocabulary of `pieces.py`, into
`<data_dir>/vocab/cache/<split>.<side>.tokens.npy` (one flat int32 array of ids, no bos/eos) and
`.offsets.npy` (int64, n+1 entries: sentence i is `tokens[offsets[i]:offsets[i+1]]`). Training memory-maps
these files, so a corpus of any size costs only the pages it touches. Files are encoded in chunks with
sentencepiece's multi-threaded batch encoder and written chunk by chunk, so encoding memory does not grow
with the corpus either.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
from tqdm import tqdm

from ..config import Config
from ..config.constants import SIDES, SPLITS, TOKENIZED_SPLIT
from ..console import info, progress
from ..errors import UserError
from ..io import atomic_write, exclusive, read_json, sha256_file, write_json
from .pieces import UNK_ID, Vocab, data_file, vocab_dir

ENCODE_CHUNK = 10_000  # lines per batch handed to sentencepiece's threaded encoder


def build_cache(config: Config, vocab: Vocab, force: bool = False) -> list[str]:
    """Encode every split whose data or vocabulary changed; returns the entries encoded ([] if none).

    The manifest records, per entry ("train.src", ...), the sha256 of the text it was encoded from, and
    once for all, the vocabulary it was encoded with (`encoded_with`). An entry is dropped from it before
    re-encoding, so a run killed halfway never leaves a cache that looks current.
    """
    folder = vocab_dir(config) / "cache"
    folder.mkdir(parents=True, exist_ok=True)
    manifest_file = folder / "manifest.json"
    manifest = read_json(manifest_file) if manifest_file.is_file() else {}
    vocabulary = encoded_with(vocab.directory)
    if manifest.get("vocab") != vocabulary:
        manifest = {"vocab": vocabulary, "entries": {}}
    entries = manifest["entries"]

    files = {f"{split}.{side}": data_file(config, f"{split}.{side}") for split in SPLITS for side in SIDES}
    hashes = {name: sha256_file(file) for name, file in files.items()}
    stale = [name for name in files if force or not _is_current(folder, name, entries, hashes[name])]
    if stale:
        with exclusive(config.data_dir):  # one writer at a time (a refused one prints nothing else)
            info(f"vocab: encoding {', '.join(stale)} into {folder}")
            for name in stale:
                entries.pop(name, None)
            write_json(manifest_file, manifest)
            total = sum(files[name].stat().st_size for name in stale)
            with progress(total=total, unit="B", unit_scale=True, desc="encode") as bar:
                for name in stale:
                    encode = functools.partial(
                        vocab.encode_src if name.endswith(".src") else vocab.encode_tgt,
                        tokenized=name.startswith(f"{TOKENIZED_SPLIT}."),  # prepared tokenised, if at all
                    )
                    bar.set_postfix_str(name)
                    counts = _encode_file(files[name], encode, folder / name, bar)
                    entries[name] = {"sha256": hashes[name], **counts}
                    write_json(manifest_file, manifest)
    for split in SPLITS:
        _check_aligned(entries, split, config.data_dir)
    return stale


def encoded_with(vocab_dir: Path) -> str:
    """What a cache is encoded with: the sha256 of the vocabulary's manifest, which names its models'
    fingerprint and the text processing that encoding applies to every line but the prepared training
    text (`data.tokenize`). The fingerprint alone would miss a new `data.tokenize` that leaves the
    training text, hence the models, as they were (Moses changes nothing in "the cat sat")."""
    return sha256_file(Path(vocab_dir) / "manifest.json")


def cache_stats(vocab_dir: Path) -> dict[str, dict]:
    """Per entry ("train.src", ...): sentences, tokens and unk counts recorded when it was encoded."""
    return read_json(Path(vocab_dir) / "cache" / "manifest.json")["entries"]


def _check_aligned(entries: dict[str, dict], split: str, data_dir: Path) -> None:
    src, tgt = (entries[f"{split}.{side}"]["sentences"] for side in SIDES)
    if src != tgt:
        raise UserError(
            f"{data_dir / split}.src has {src} lines but {split}.tgt has {tgt}: "
            "source and target files must be line-aligned"
        )


def _is_current(folder: Path, name: str, entries: dict[str, dict], data_hash: str) -> bool:
    entry = entries.get(name)
    return entry is not None and entry["sha256"] == data_hash and _mapped(folder, name, entry) is not None


def _mapped(folder: Path, name: str, entry: dict) -> TokenArray | None:
    """An entry's two files memory-mapped; None where one is missing, damaged or holds other counts than
    the manifest records (a truncated file)."""
    try:
        array = TokenArray(
            np.load(folder / f"{name}.tokens.npy", mmap_mode="r"),
            np.load(folder / f"{name}.offsets.npy", mmap_mode="r"),
        )
    except (OSError, ValueError):
        return None
    return array if len(array) == entry["sentences"] and array.tokens.size == entry["tokens"] else None


def _encode_file(
    path: Path, encode: Callable[[list[str]], list[list[int]]], prefix: Path, bar: tqdm
) -> dict[str, int]:
    """Encode a text file chunk by chunk into `<prefix>.tokens.npy` and `<prefix>.offsets.npy`."""
    sentences = tokens = unknown = 0
    with (
        _npy_writer(f"{prefix}.tokens.npy", np.int32) as flat_ids,
        _npy_writer(f"{prefix}.offsets.npy", np.int64) as offsets,
    ):
        offsets.append(np.zeros(1, dtype=np.int64))
        for lines, n_bytes in _line_chunks(path, ENCODE_CHUNK):
            ids = encode(lines)
            lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            chunk = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum()))
            flat_ids.append(chunk)
            offsets.append(tokens + np.cumsum(lengths))
            sentences += len(ids)
            tokens += chunk.size
            unknown += int(np.count_nonzero(chunk == UNK_ID))
            bar.update(n_bytes)
    return {"sentences": sentences, "tokens": tokens, "unk": unknown}


def _line_chunks(path: Path, size: int) -> Iterator[tuple[list[str], int]]:
    """(lines, bytes read) in chunks of `size` lines; invalid UTF-8 is reported with its line number."""
    number = 0
    with open(path, "rb") as handle:
        while raw := list(itertools.islice(handle, size)):
            lines = []
            for line in raw:
                number += 1
                try:
                    lines.append(line.decode("utf-8").rstrip("\r\n"))
                except UnicodeDecodeError as err:
                    raise UserError(f"{path}:{number}: invalid UTF-8 ({err.reason})") from None
            yield lines, sum(map(len, raw))


class _NpyAppender:
    """A 1-D .npy file whose length is unknown in advance: data is appended, the header fixed at the end.

    numpy pads every header with room for a 21-digit length, so rewriting it in place never moves data.
    """

    def __init__(self, handle: IO[bytes], dtype: type) -> None:
        self.handle, self.dtype, self.count = handle, np.dtype(dtype), 0
        self.data_start = self._write_header()

    def append(self, values: np.ndarray) -> None:
        self.handle.write(np.ascontiguousarray(values, dtype=self.dtype).data)
        self.count += len(values)

    def finish(self) -> None:
        self.handle.seek(0)
        if self._write_header() != self.data_start:
            raise RuntimeError(f"npy header changed size while writing {self.handle.name}")

    def _write_header(self) -> int:
        header = {
            "descr": np.lib.format.dtype_to_descr(self.dtype),
            "fortran_order": False,
            "shape": (self.count,),
        }
        np.lib.format.write_array_header_1_0(self.handle, header)
        return self.handle.tell()


@contextlib.contextmanager
def _npy_writer(path: str, dtype: type) -> Iterator[_NpyAppender]:
    with atomic_write(path, "wb") as handle:
        writer = _NpyAppender(handle, dtype)
        yield writer
        writer.finish()


@dataclass
class TokenArray:
    """One side of one split: sentence i is `tokens[offsets[i]:offsets[i+1]]`, read from memory maps."""

    tokens: np.ndarray  # (total_tokens,) int32
    offsets: np.ndarray  # (sentences + 1,) int64

    def __post_init__(self) -> None:
        self.lengths = np.diff(self.offsets).astype(np.int32)  # (sentences,)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < len(self):
            raise IndexError(f"sentence {i} out of range 0..{len(self) - 1}")
        return np.asarray(self.tokens[self.offsets[i] : self.offsets[i + 1]])


@dataclass
class TokenCache:
    """A split's source and target token arrays (line-aligned)."""

    src: TokenArray
    tgt: TokenArray


def load_cache(vocab_dir: Path, split: str) -> TokenCache:
    """Memory-map a split's cache, after checking it belongs to the vocabulary in `vocab_dir`."""
    folder = Path(vocab_dir) / "cache"
    manifest_file = folder / "manifest.json"
    if not manifest_file.is_file():
        raise UserError(f"{folder}: no token cache; run `seq2seq vocab CONFIG`")
    manifest = read_json(manifest_file)
    if manifest["vocab"] != encoded_with(vocab_dir):
        raise UserError(f"{folder}: token cache is from another vocabulary; run `seq2seq vocab CONFIG`")
    sides = []
    for side in SIDES:
        name = f"{split}.{side}"
        entry = manifest["entries"].get(name)
        if entry is None:
            raise UserError(f"{folder}: no cache for {name}; run `seq2seq vocab CONFIG`")
        array = _mapped(folder, name, entry)
        if array is None:
            raise UserError(
                f"{folder / name}: cache files missing, damaged or not matching the manifest; run "
                "`seq2seq vocab CONFIG` to encode them again"
            )
        sides.append(array)
    _check_aligned(manifest["entries"], split, folder)
    return TokenCache(*sides)
