"""`seq2seq export`: a run's checkpoint written as an exported model folder (model_folder.py says what it
holds), with its model card (model_card.py). The folder is filled beside its destination and renamed into
place (io.atomic_folder); `--force` replaces only an earlier export.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from torch import nn

from .. import __version__
from ..errors import UserError
from ..io import atomic_folder, atomic_write, write_json, write_text
from .checkpoint import weights_fingerprint
from .model_card import model_card
from .model_folder import (
    CARD_FILE,
    CONFIG_FILE,
    FORMAT,
    LIBRARY,
    REPORT_FILE,
    WEIGHTS_FILE,
    Evaluation,
    figure_name,
    is_model_folder,
)
from .run_folder import (
    PROVENANCE,
    VOCAB_DIR,
    averaged_weights,
    checkpoint_payload,
    rebuild,
    resolve_checkpoint,
    run_dir_of,
)
from .shortlist_table import TABLE_FILE, find_table, load_table


def export_run(
    run: Path,
    destination: Path,
    *,
    average: int = 0,
    evaluation: Evaluation | None = None,
    repo_id: str | None = None,
    force: bool = False,
) -> Path:
    """Write the model folder of a run's best checkpoint (or of a checkpoint file; with `average` K > 0,
    the mean of the run's last K step-N.pt checkpoints) to `destination`, with the run's lexical shortlist
    when it has one and `evaluation`'s report and figure; `repo_id` (OWNER/NAME) is what the card's usage
    lines load. A non-empty `destination` is an error, or with `force` replaced when it is an earlier
    export. Returns `destination`."""
    check_destination(destination, force)
    checkpoint = resolve_checkpoint(run, average=average)
    payload = checkpoint_payload(checkpoint, average)
    run_dir = run_dir_of(checkpoint)
    model, vocab, config = rebuild(checkpoint, payload, run_dir / VOCAB_DIR)
    table = find_table(run_dir, checkpoint)
    if table is not None:  # a table of another vocabulary fails here; of other weights, a warning
        load_table(run_dir, vocab, checkpoint, weights_fingerprint(model), averaged_weights(average))
    source = provenance(checkpoint, payload)
    with atomic_folder(destination, replace=force) as staging:
        write_weights(model, staging / WEIGHTS_FILE)
        header = {"library_name": LIBRARY, "format": FORMAT, "library_version": __version__}
        write_json(
            staging / CONFIG_FILE,
            {
                **header,
                "checkpoint": source,
                "vocab_fingerprint": vocab.fingerprint(),
                "config": payload["config"],
            },
        )
        vocab.copy_to(staging / VOCAB_DIR)
        if table is not None:
            shutil.copyfile(table, staging / TABLE_FILE)
        if (run_dir / PROVENANCE).is_file():  # what trained it, for the reports that use the folder
            shutil.copyfile(run_dir / PROVENANCE, staging / PROVENANCE)
        if evaluation is not None:
            copy_evaluation(evaluation, staging)
        trained_by = (staging / PROVENANCE).is_file()
        card = model_card(config, model, vocab, source, evaluation, table is not None, repo_id, trained_by)
        write_text(staging / CARD_FILE, card)
    return destination


def check_destination(destination: Path, force: bool) -> None:
    """Fail before any work when `destination` cannot become the folder: a file, a missing parent, or a
    non-empty folder (with `force`, one that is not an earlier export: never replace anything else)."""
    if destination.is_symlink():  # renamed over, the link would become the folder, or the rename fails
        raise UserError(f"{destination}: is a link; give the folder it names ({destination.resolve()})")
    if destination.exists() and not destination.is_dir():
        raise UserError(f"{destination}: is a file; export writes a folder")
    parent = destination.parent if str(destination.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"{destination}: folder {parent} does not exist")
    if destination.is_dir() and any(destination.iterdir()):
        if not force:
            raise UserError(f"{destination}: not empty; give --force to replace an earlier export")
        if not is_model_folder(destination):
            raise UserError(
                f"{destination}: not empty and not an exported model folder; --force replaces only those"
            )


def write_weights(model: nn.Module, path: Path) -> None:
    """The model's state dict as safetensors, atomically. Every tensor gets its own copy: a tied embedding
    is one tensor under two names, which safetensors refuses to store; loaded back, both names fill the
    one parameter again."""
    from safetensors.torch import save

    tensors = {
        name: tensor.detach().cpu().contiguous().clone() for name, tensor in model.state_dict().items()
    }
    with atomic_write(path, "wb") as out:
        out.write(save(tensors, metadata={"format": "pt"}))


def copy_evaluation(evaluation: Evaluation, folder: Path) -> None:
    shutil.copyfile(evaluation.report, folder / REPORT_FILE)
    if evaluation.figure is not None:
        shutil.copyfile(evaluation.figure, folder / figure_name(evaluation.figure))


def provenance(checkpoint: Path, payload: dict[str, Any]) -> dict[str, Any]:
    """Where the weights come from: the run, its update step, and the checkpoint file (`best.pt` named by
    its target) with the dev scores of that step when training recorded them, or the checkpoints averaged
    (a mean that was never validated)."""
    found: dict[str, Any] = {"run": run_dir_of(checkpoint).name, "step": payload.get("step")}
    if "averaged_from" in payload:
        return {**found, "averaged_from": payload["averaged_from"]}
    found["file"] = checkpoint.resolve().name
    history = payload.get("progress", {}).get("history", [])
    validated = [entry for entry in history if entry.get("step") == found["step"]]
    if validated:
        found["validation"] = {key: value for key, value in validated[-1].items() if key != "step"}
    return found
