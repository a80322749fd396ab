"""Shared fixtures, built with tests/helpers.py.

The fixtures are session-scoped where tests only read what they build (under pytest-xdist each worker has
its own session): treat them as read-only and copy them to change anything.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from helpers import TRAINABLE, make_run_dir, tiny_config, write_corpus, write_tiny_config

from seq2seq_attn import train as train_module
from seq2seq_attn.config import load_config


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `cuda` are skipped where torch sees no CUDA device."""
    if torch.cuda.is_available():
        return
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


@pytest.fixture(scope="session")
def tiny_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete run directory with a random tiny model (bpe vocabulary of 40, emb 8, hidden 16).

    Shared by the whole session: treat it as read-only (copy it to change it).
    """
    root = tmp_path_factory.mktemp("tiny")
    config = tiny_config(root)
    write_corpus(config.data_dir)
    return make_run_dir(config)


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the trainable tiny config (tiny.yaml: data and run paths relative to it) and its data
    and vocabulary prepared once; tests copy the folder and train into the copy."""
    folder = tmp_path_factory.mktemp("prepared")
    write_tiny_config(folder / "tiny.yaml", **TRAINABLE)
    train_module._prepare_inputs(load_config(folder / "tiny.yaml"))
    return folder


@pytest.fixture
def workdir(prepared: Path, tmp_path: Path) -> Path:
    """A copy of `prepared` of the test's own."""
    shutil.copytree(prepared, tmp_path / "w")
    return tmp_path / "w"


@pytest.fixture(scope="session")
def trained_run(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two updates of the trainable tiny config: a run directory with latest.pt to resume."""
    run = tmp_path_factory.mktemp("trained") / "run"
    overrides = [f"train.run_dir={run}", "train.max_steps=2", "train.valid_bleu=false"]
    return train_module.train(load_config(prepared / "tiny.yaml", overrides))
