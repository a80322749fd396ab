"""The lexical shortlist's file: a run's table of candidate target pieces per source piece
(decoding/shortlist.py searches with it, decoding/shortlist_learning.py learns it).

The table is kept in the run folder: `lexical_shortlist.npz` when learned from the run's best checkpoint,
`lexical_shortlist.<checkpoint>.npz` (e.g. `lexical_shortlist.step-500.npz`) when learned from another
checkpoint file. It holds `candidates` (source vocabulary, top_k) target ids (-1 where a source piece has
fewer), `frequent` (the most frequent target ids), and which weights it was learned from: the checkpoint
file's name and the weights' fingerprint (`runs/checkpoint.weights_fingerprint`). Translating with other
weights (the run trained on, another checkpoint, `--average`) uses the table still, with a warning, once
per table: the candidates of other weights are still plausible, but no longer the model's own.
`seq2seq export` copies the table into the exported model folder (model_folder.py) with what it records,
so that the check holds there against the exported weights.
"""

from __future__ import annotations

import functools
import io
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..console import warn
from ..errors import UserError
from ..io import atomic_write
from ..vocab.pieces import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab
from .run_folder import checkpoint_dir

TABLE_FILE = "lexical_shortlist.npz"  # the best checkpoint's (another's: lexical_shortlist.<name>.npz)
DEFAULT_CHECKPOINT = "best"  # the checkpoint whose table is TABLE_FILE
SPECIAL_IDS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)  # always candidates: the search needs EOS, <unk> may win


@dataclass(frozen=True)
class LexicalTable:
    """Per source piece its `top_k` candidate target pieces (-1: none), and the frequent target pieces."""

    candidates: np.ndarray  # (source vocabulary, top_k) int32
    frequent: np.ndarray  # (frequent,) int32, most frequent first
    checkpoint: str = ""  # the name of the checkpoint file it was learned from ("": not recorded)
    weights: str = ""  # the fingerprint of the weights it was learned from ("": not recorded)

    def sentence_candidates(self, src_ids: Sequence[int]) -> np.ndarray:
        """The sorted target ids a translation of this source may use: the frequent and special pieces and
        the candidates of each of its source pieces."""
        own = self.candidates[np.asarray(src_ids, dtype=np.int64)].ravel() if len(src_ids) else []
        chosen = np.concatenate([self.frequent, np.asarray(SPECIAL_IDS), np.asarray(own, dtype=np.int64)])
        return np.unique(chosen[chosen >= 0])


def table_path(run_dir: Path, checkpoint: Path) -> Path:
    """Where the table learned from `checkpoint` (a file of the run's checkpoints/ folder) is kept."""
    stem = Path(checkpoint).stem
    return Path(run_dir) / (TABLE_FILE if stem == DEFAULT_CHECKPOINT else f"lexical_shortlist.{stem}.npz")


def save_table(table: LexicalTable, run_dir: Path) -> Path:
    """Write the table atomically into the run folder, under the name of the checkpoint it records."""
    buffer = io.BytesIO()
    np.savez(
        buffer,
        candidates=table.candidates,
        frequent=table.frequent,
        checkpoint=np.array(table.checkpoint),
        weights=np.array(table.weights),
    )
    path = table_path(run_dir, Path(table.checkpoint or DEFAULT_CHECKPOINT))
    with atomic_write(path, "wb") as out:
        out.write(buffer.getvalue())
    return path


def find_table(run_dir: Path, checkpoint: Path) -> Path | None:
    """The table for translating with `checkpoint`: the one learned from the file it is (best.pt's
    step-N.pt), else from it as named, else the run's; None when the run has none of them."""
    named = Path(checkpoint)
    for path in (table_path(run_dir, named.resolve()), table_path(run_dir, named), run_dir / TABLE_FILE):
        if path.is_file():
            return path
    return None


def load_table(
    run_dir: Path, vocab: Vocab, checkpoint: Path, weights: str, translating: str = ""
) -> LexicalTable:
    """The table for translating with `checkpoint`'s weights (fingerprint `weights`; `translating` says
    what they are, default the checkpoint's name): the one learned from that checkpoint, else the run's;
    checked against the vocabulary sizes (a one-line error when missing or built for another vocabulary),
    with a warning, once, when it was learned from other weights."""
    path = find_table(run_dir, checkpoint)
    if path is None:
        missing = Path(run_dir) / TABLE_FILE
        raise UserError(f"{missing}: no lexical shortlist; {_how_to_learn(run_dir, checkpoint, translating)}")
    try:
        with np.load(path) as stored:
            recorded = {name: str(stored[name]) for name in ("checkpoint", "weights") if name in stored.files}
            table = LexicalTable(stored["candidates"], stored["frequent"], **recorded)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        raise UserError(
            f"{path}: not a readable lexical shortlist ({' '.join(str(err).split())[:120]}); build it again"
        ) from None
    if table.candidates.shape[0] != vocab.src_size or table.candidates.max(initial=-1) >= vocab.tgt_size:
        raise UserError(f"{path}: built for another vocabulary than {run_dir}'s; build it again")
    if table.weights != weights:
        _warn_other_weights(path, table.checkpoint, translating, run_dir, Path(checkpoint))
    return table


def _how_to_learn(run_dir: Path, checkpoint: Path, translating: str) -> str:
    """The command that learns the table of the weights translating: a model folder's is learned in its
    run before export; averaged weights are written to a file of their own first."""
    if not checkpoint_dir(run_dir).is_dir():
        return "a model folder's is learned in its run (`seq2seq lexical-shortlist RUN`) before the export"
    if translating:
        return (
            f"for {translating}, write them to a file (`seq2seq average {run_dir} --last K -o "
            f"{run_dir}/checkpoints/average.pt`) and learn its table (`seq2seq lexical-shortlist FILE`)"
        )
    learned_from = run_dir if Path(checkpoint).stem == DEFAULT_CHECKPOINT else checkpoint
    return f"learn it with `seq2seq lexical-shortlist {learned_from}`"


@functools.cache
def _warn_other_weights(
    path: Path, learned_from: str, translating: str, run_dir: Path, checkpoint: Path
) -> None:
    source = f"from {learned_from} as it was then" if learned_from else "from weights it does not record"
    warn(
        f"{path}: learned {source}, not from the weights translating now ({translating or checkpoint.name}); "
        f"its candidates are not this model's own ({_how_to_learn(run_dir, checkpoint, translating)})"
    )
