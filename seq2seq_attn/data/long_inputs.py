"""A long-input test set from any test set: consecutive pairs joined into inputs of 2 to N sentences.

Natural test sets thin out past 60 words, and length robustness follows the lengths seen in training
(Varis & Bojar 2021), so a length curve stops where the test set does. Joining consecutive test pairs
extends it: walking the test set in order, each input takes the next k pairs (k drawn uniformly from
2..`most`, seeded), stops adding pairs before its source would pass `max_words` whitespace words (two pairs
at least), and joins sources and references with a space. Every pair is used once, in order, so the
references stay aligned; a last pair with none after it to join is left out. These are concatenated
sentences, not natural long ones: each part is a whole sentence, and a translation of one long input must
keep them in order.

Writes `long.src`, `long.tgt` and `manifest.json` (the inputs, their hashes, the settings, and for each
output line the 0-based test lines it joins) into a folder.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..io import read_json, read_lines, sha256_file, write_json, write_text

SOURCE, REFERENCE, MANIFEST = "long.src", "long.tgt", "manifest.json"
WHAT = "consecutive test pairs joined into long inputs (concatenated, not natural sentences)"


@dataclass(frozen=True)
class LongInputs:
    sources: list[str]
    references: list[str]
    groups: list[list[int]]  # the test lines each input joins, in order


def join_pairs(
    sources: Sequence[str],
    references: Sequence[str],
    most: int,
    max_words: int,
    seed: int,
    names: tuple[str, str] = ("the sources", "the references"),
) -> LongInputs:
    """Consecutive pairs joined as the module docstring says; a last group of one pair is left out.
    `names`: what errors call the sources and the references (their files)."""
    if most < 2:
        raise UserError(f"long inputs join 2 to N sentences: N must be >= 2, got {most}")
    if len(sources) != len(references):
        raise UserError(
            f"{names[0]} has {len(sources)} lines but {names[1]} has {len(references)}: "
            "they must be line-aligned"
        )
    rng = random.Random(seed)
    groups: list[list[int]] = []
    start = 0
    while start + 1 < len(sources):
        wanted = rng.randint(2, most)
        group, words = [start], len(sources[start].split())
        for line in range(start + 1, min(start + wanted, len(sources))):
            more = len(sources[line].split())
            if len(group) >= 2 and words + more > max_words:
                break
            group.append(line)
            words += more
        groups.append(group)
        start = group[-1] + 1
    return LongInputs(
        [" ".join(sources[i] for i in group) for group in groups],
        [" ".join(references[i] for i in group) for group in groups],
        groups,
    )


def check_own_folder(folder: Path) -> None:
    """A folder whose manifest.json another command wrote (a prepared data folder's) is not ours to write
    into: its record would be lost."""
    manifest = folder / MANIFEST
    if manifest.is_file():
        try:
            ours = read_json(manifest).get("what") == WHAT
        except (UserError, AttributeError):
            ours = False
        if not ours:
            raise UserError(
                f"{folder}: its {MANIFEST} is another command's; give the long inputs a folder of their own"
            )


def write_long_inputs(
    src: Path, ref: Path, folder: Path, most: int = 8, max_words: int = 200, seed: int = 1
) -> LongInputs:
    """Join `src` and `ref` (line-aligned test files) and write the set and its manifest into `folder`."""
    check_own_folder(folder)
    built = join_pairs(
        list(read_lines(src)), list(read_lines(ref)), most, max_words, seed, (str(src), str(ref))
    )
    if not built.groups:
        raise UserError(f"{src}: fewer than two lines, nothing to join")
    folder.mkdir(parents=True, exist_ok=True)
    write_text(folder / SOURCE, "".join(line + "\n" for line in built.sources))
    write_text(folder / REFERENCE, "".join(line + "\n" for line in built.references))
    write_json(
        folder / MANIFEST,
        {
            "what": WHAT,
            "source": {"path": str(src), "sha256": sha256_file(src)},
            "reference": {"path": str(ref), "sha256": sha256_file(ref)},
            "sentences_per_input": [2, most],
            "max_words": max_words,
            "seed": seed,
            "inputs": len(built.groups),
            "longest_words": max(len(line.split()) for line in built.sources),
            "groups": built.groups,
        },
    )
    return built
