"""The Hugging Face hub: a model named `hf://OWNER/NAME[@REVISION]` fetched to a local folder, and an
exported model folder (model_folder.py) pushed to a model repository.

Both go through `huggingface_hub`, the hub's own client, so its cache (`HF_HUB_CACHE`, `HF_HOME`), its
offline mode (`HF_HUB_OFFLINE=1`), its token and its endpoint apply as they do for any hub library. A
fetched model is the client's cached snapshot of the repository, read in place; only the files the
loader reads are fetched. A bare `OWNER/NAME` is never looked up on the hub: it is a local path, so that
a mistyped run folder cannot turn into a download.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError

HUB_PREFIX = "hf://"
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")  # OWNER/NAME
HUB_FORM = "hf://OWNER/NAME or hf://OWNER/NAME@REVISION"


@dataclass(frozen=True)
class HubModel:
    """A model repository on the hub, at a revision (None: its default branch)."""

    repo_id: str
    revision: str | None = None

    def __str__(self) -> str:
        return HUB_PREFIX + self.repo_id + (f"@{self.revision}" if self.revision else "")


def hub_model(path: str | Path) -> HubModel | None:
    """The hub model `path` names (`hf://OWNER/NAME[@REVISION]`), or None for a local path. A command-line
    option typed as a Path arrives as `hf:/OWNER/NAME` (Path folds the double slash): both are read."""
    text = str(path)
    if not text.startswith(HUB_PREFIX[:-1]):
        return None
    given = text[len(HUB_PREFIX) - 1 :].lstrip("/")
    name, at, revision = given.partition("@")
    if not REPO_ID.fullmatch(name) or (at and not revision):
        raise UserError(f"{HUB_PREFIX}{given}: name a model on the Hugging Face hub as {HUB_FORM}")
    return HubModel(name, revision or None)


def check_repo_id(repo_id: str, option: str) -> str:
    """`repo_id` when it names a model repository (OWNER/NAME), else a one-line error naming `option`."""
    if not REPO_ID.fullmatch(repo_id):
        raise UserError(f"{option} {repo_id}: name the model repository as OWNER/NAME")
    return repo_id


def local_path(path: str | Path, files: list[str]) -> Path:
    """`path` as a local path: a hub model's snapshot folder, with `files` (glob patterns) fetched into the
    client's cache or found there; any other path unchanged."""
    model = hub_model(path)
    if model is None:
        return Path(path)
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(
            model.repo_id, revision=model.revision, repo_type="model", allow_patterns=files
        )
    except Exception as err:  # the client's, its HTTP library's and OS errors, which vary by version
        raise UserError(f"{model}: cannot fetch it from the Hugging Face hub: {_why(err)}") from err
    return Path(folder)


def push_folder(folder: Path, repo_id: str, message: str) -> None:
    """Upload `folder` as the content of model repository `repo_id`, made first when it does not exist
    (public unless made private beforehand), as one commit with `message`."""
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        api.create_repo(repo_id=repo_id, repo_type="model", exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message=message)
    except Exception as err:  # as in `local_path`
        raise UserError(
            f"{HUB_PREFIX}{repo_id}: push of {folder} failed: {_why(err)} (the folder is written: export "
            "again with --force to retry)"
        ) from err


def _why(err: Exception) -> str:
    """What went wrong, in a few words: the client's messages run over several lines."""
    from huggingface_hub import constants, errors

    if isinstance(err, errors.RevisionNotFoundError):
        return "the repository has no such revision"
    if isinstance(err, errors.RepositoryNotFoundError):
        return (
            "no such model repository, or no access to it (log in with the Hugging Face CLI or set HF_TOKEN)"
        )
    if isinstance(err, errors.LocalEntryNotFoundError):
        reached = (
            "offline mode is on (HF_HUB_OFFLINE)" if constants.HF_HUB_OFFLINE else "the hub is unreachable"
        )
        return f"{reached} and it is not in the cache {constants.HF_HUB_CACHE}"
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return f"{type(err).__name__}: {first[:200]}" if first else type(err).__name__
