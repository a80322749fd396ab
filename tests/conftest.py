"""Shared fixtures (built with tests/helpers.py) and the collection order.

The fixtures are session-scoped where tests only read what they build (under pytest-xdist each worker has
its own session): treat them as read-only and copy them to change anything.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from helpers import TRAINABLE, make_run_dir, tiny_config, write_corpus, write_tiny_config

from seq2seq_attn.config import load_config
from seq2seq_attn.training import train as train_module

# The schedule's costs: a test marked `slow(seconds=N)` takes about N seconds on two busy cores (the cost
# is written on the test itself, so it moves with it); any other slow test about OTHER_SLOW_S. The
# torch.compile tests (`compile` in their name) go to one worker together, where the compiler starts once
# and its kernels are cached.
COMPILE_GROUP_S = 60  # all of them, with a cold compiler cache
OTHER_SLOW_S = 3  # any other test marked slow


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `cuda` are skipped where torch sees no CUDA device; under xdist the tests are ordered
    for the workers (below)."""
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers > 1:
        items[:] = order_for_workers(items, workers)
    if torch.cuda.is_available():
        return
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


def order_for_workers(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The collection as one run of tests per worker, the runs about equally long, each starting with its
    long tests (longest first) and ending with quick ones.

    Worksteal scheduling (below) starts worker k on the k-th run of the collection (consecutive tests,
    as many per worker as it can); a worker that is done takes the second half of the longest remaining
    queue, from its end. So the long tests start at once, none of them is left running alone at the end,
    and the quick tests even out the rest. Every worker orders alike: the order depends only on the
    collected items.
    """

    def cost(item: pytest.Item) -> float:
        slow = item.get_closest_marker("slow")
        return 0.0 if slow is None else float(slow.kwargs.get("seconds", OTHER_SLOW_S))

    compiled = [item for item in items if "compile" in item.originalname]
    units = [([item], cost(item)) for item in items if item not in compiled and cost(item) > 0]
    if compiled:
        units.append((compiled, COMPILE_GROUP_S + sum(map(cost, compiled))))
    units.sort(key=lambda unit: -unit[1])
    runs: list[list[pytest.Item]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for unit, seconds in units:  # longest first, each to the run with the least work so far
        k = load.index(min(load))
        runs[k] += unit
        load[k] += seconds
    placed = {id(item) for run in runs for item in run}
    quick = [item for item in items if id(item) not in placed]
    left = len(items)
    for k, run in enumerate(runs):  # the tests each worker starts with: as xdist's worksteal splits them
        size = left // (workers - k)
        fill = max(0, size - len(run))
        run += quick[:fill]
        quick = quick[fill:]
        left -= len(run)
    runs[-1] += quick
    return [item for run in runs for item in run]


@pytest.hookimpl(optionalhook=True)  # (a pytest-xdist hook: unknown without it)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`-n N` schedules with `--dist worksteal` rather than the default `load`.

    `load` hands each worker a fixed run of consecutive tests, so that one worker can be left with several
    long tests queued while another has finished; with `worksteal` an idle worker takes queued tests from
    a busy one. The tests take from a millisecond to a minute and a half, and the long ones come first.
    """
    if config.getvalue("dist") != "load":
        return None  # an explicit --dist other than load
    from xdist.scheduler import WorkStealingScheduling

    return WorkStealingScheduling(config, log)


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
