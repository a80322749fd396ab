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

# Rough seconds of the longest tests on two busy cores; the torch.compile tests (`compile` in their name) go
# to one worker together, where the compiler starts once and its kernels are cached.
LONGEST = {
    "test_demo.py::test_small_demo_shows_attention_holding_up_on_long_sentences": 60,
    "test_own_corpus.py::test_make_reproduce_local_on_your_corpus": 25,  # each of its two corpora
    "test_own_corpus.py::test_readme_walkthrough_runs_as_written": 14,
    "test_gpu_check.py::test_quick_cpu_check_runs_every_stage_and_summarises_it": 60,
    "test_fault_injection.py::test_sigkill_during_checkpoint_writes_loses_nothing": 35,
    "test_train.py::test_sigkill_then_resume_is_bit_identical": 30,
    "test_bench.py::test_our_side_end_to_end_on_a_tiny_corpus": 25,
    "test_locks.py::test_a_killed_trainer_leaves_no_lock_and_resumes_exactly": 14,
    "test_train.py::test_ddp_gloo": 12,
    "test_train.py::test_ddp_ranks_stop_together_when_one_rank_is_signalled": 12,
    "test_locks.py::test_readers_load_a_run_while_it_writes_checkpoints": 12,
    "test_locks.py::test_a_second_trainer_is_refused_and_the_first_ends_intact": 10,
    "test_cuda.py::test_command_line_scripts_and_these_tests_work_without_datasets_and_hypothesis": 9,
}
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
        name = f"{item.path.name}::{item.originalname}"
        return LONGEST.get(name, OTHER_SLOW_S if item.get_closest_marker("slow") else 0.0)

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
