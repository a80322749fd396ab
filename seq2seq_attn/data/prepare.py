"""Prepare the corpus: stream a source through cleaning into `<data_dir>/{train,valid,test}.{src,tgt}`.

The six files are written to temporary siblings and committed together at the end, so a failure half
way (a line-count mismatch in the test split, Ctrl-C, a full disk) leaves the previous data untouched.
`manifest.json` is written last: counts per split, what each cleaning rule did, the sha256 of every
file, the source, and the fingerprint of the inputs.

With `data.tokenize: moses` the training split is Moses-tokenised before cleaning (data/moses.py), so the
cleaning limits and the vocabulary count the paper's words (`task`: lowercased and punctuation-normalised
first, as a shared task's text). The dev and test splits keep the corpus' text: they are what the model is
given and scored against, and the vocabulary tokenises them as it reads them (tokenisation is not
idempotent, so no text is tokenised twice).

The data folder's lock (io.py) is held while writing, and only then, so that trainings which find the
data up to date can start side by side.

The fingerprint is the sha256 of the `data` config section, the package and format versions, and the
(path, size, mtime) of every input file; a Hugging Face hub dataset counts through its name, config
and revision alone. When it equals the manifest's and every output file is there with its recorded
size, `prepare` does nothing. Editing (or touching) an input, or changing any `data.*` key, redoes it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .. import __version__
from ..config import Config, DataConfig, to_dict
from ..config.constants import SIDES, SPLITS, TOKENIZED_SPLIT
from ..console import progress
from ..errors import UserError
from ..io import atomic_write, exclusive, sha256_file, sha256_text, write_json
from . import moses
from .clean import Cleaner, without_breaks
from .sources import Pair, Source, open_source

MANIFEST = "manifest.json"
FORMAT = 2  # bump when the output of the same inputs changes
OUTPUTS = tuple(f"{split}.{side}" for split in SPLITS for side in SIDES)


@dataclass(frozen=True)
class Prepared:
    """The outcome of `prepare`: where the data is, its manifest, and whether work was done."""

    data_dir: Path
    manifest: dict[str, Any]
    redone: bool  # False: the existing data was up to date and nothing was written


def prepare(config: Config, force: bool = False) -> Prepared:
    """Write the prepared splits and manifest unless they are already up to date (or `force`)."""
    source = open_source(config.data)
    data_dir = config.data_dir
    fingerprint = input_fingerprint(config.data, source)
    if not force and (manifest := current_manifest(data_dir, fingerprint)) is not None:
        return Prepared(data_dir, manifest, redone=False)
    with exclusive(data_dir):  # one writer at a time
        return Prepared(data_dir, write_prepared(config, source, fingerprint), redone=True)


def write_prepared(config: Config, source: Source, fingerprint: str) -> dict[str, Any]:
    """Write the six split files (all replaced together, or none) and then the manifest; return it."""
    data_dir = config.data_dir
    splits = {}
    with contextlib.ExitStack() as pending:  # every output file is replaced at the end, or none is
        for split in SPLITS:
            src_out, tgt_out = (
                pending.enter_context(atomic_write(data_dir / f"{split}.{side}")) for side in SIDES
            )
            cleaner = Cleaner(config.data.clean) if split in config.data.clean.splits else None
            read = progress(source.read(split), desc=f"prepare {split}", unit=" pairs", unit_scale=True)
            pairs: Iterable[Pair] = ((without_breaks(src), without_breaks(tgt)) for src, tgt in read)
            tokenized = split == TOKENIZED_SPLIT and config.data.tokenize != "none"
            if tokenized:
                pairs = moses_pairs(pairs, config.data)
            counts = write_split(pairs, src_out, tgt_out, cleaner) | {"tokenized": tokenized}
            splits[split] = counts | source.found.get(split, {})
            check_not_empty(splits[split], split, source.origin(split))

    manifest = {
        "format": FORMAT,
        "fingerprint": fingerprint,
        "src_lang": config.data.src_lang,
        "tgt_lang": config.data.tgt_lang,
        "source": source.description,
        "tokenize": config.data.tokenize,
        "clean": to_dict(config.data.clean),
        "splits": splits,
        "files": {
            name: {"sha256": sha256_file(data_dir / name), "bytes": (data_dir / name).stat().st_size}
            for name in OUTPUTS
        },
    }
    write_json(data_dir / MANIFEST, manifest)
    return manifest


def moses_pairs(pairs: Iterable[Pair], data: DataConfig) -> Iterator[Pair]:
    """Each pair Moses-processed as `data.tokenize` says, the source in its language, the target in its."""
    src_text, tgt_text = (moses.text_pipeline(data.tokenize, lang) for lang in (data.src_lang, data.tgt_lang))
    for src, tgt in pairs:
        yield src_text.line(src), tgt_text.line(tgt)


def write_split(pairs: Iterable[Pair], src_out: IO[str], tgt_out: IO[str], cleaner: Cleaner | None) -> dict:
    """Stream one split's pairs (cleaned when `cleaner` is given) into its two files; return its counts."""
    read = kept = 0
    for pair in pairs:
        read += 1
        cleaned: Pair | None = cleaner.clean(*pair) if cleaner else pair
        if cleaned is None:
            continue
        src_out.write(cleaned[0] + "\n")
        tgt_out.write(cleaned[1] + "\n")
        kept += 1
    counts: dict[str, Any] = {"read": read, "kept": kept, "cleaned": cleaner is not None}
    if cleaner:
        counts.update(normalized=cleaner.normalized, dropped=cleaner.dropped)
    return counts


def check_not_empty(counts: dict, split: str, origin: str) -> None:
    """Training or evaluating on nothing is never what the user meant: say why the split is empty."""
    if counts["read"] == 0:
        raise UserError(f"{split} split: no sentence pairs in {origin}")
    if counts["kept"] == 0:
        by_rule = ", ".join(f"{rule} {count}" for rule, count in counts["dropped"].items())
        raise UserError(
            f"{split} split: all {counts['read']} pairs of {origin} were dropped by cleaning ({by_rule}); "
            "loosen `data.clean` or check the input"
        )


def input_fingerprint(data: DataConfig, source: Source) -> str:
    inputs = [(str(path), path.stat().st_size, path.stat().st_mtime_ns) for path in source.inputs]
    view = {"format": FORMAT, "version": __version__, "data": to_dict(data), "inputs": inputs}
    return sha256_text(json.dumps(view, sort_keys=True))


def current_manifest(data_dir: Path, fingerprint: str) -> dict[str, Any] | None:
    """The manifest when it matches `fingerprint` and every output file has its recorded size, else None."""
    try:
        manifest = json.loads((data_dir / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        intact = all((data_dir / name).stat().st_size == files[name]["bytes"] for name in OUTPUTS)
    except (OSError, ValueError, KeyError, TypeError):  # missing or unreadable: not current
        return None
    return manifest if intact and manifest.get("fingerprint") == fingerprint else None
