"""scripts/gpu_check.sh in its CPU mode (`--device cpu --quick`): every stage runs the command it runs on a
GPU, at tiny sizes, and the summary accounts for each stage and output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.sh"


def gpu_check(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run([str(SCRIPT), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.e2e
@pytest.mark.slow(seconds=60)
def test_quick_cpu_check_runs_every_stage_and_summarises_it(tmp_path):
    out = tmp_path / "check"
    result = gpu_check(str(out), "--device", "cpu", "--quick", "--work", str(tmp_path / "work"))
    assert result.returncode == 0, result.stderr[-4000:]

    summary = json.loads((out / "summary.json").read_text())
    assert summary["passed"] and summary["device"] == "cpu" and summary["quick"]
    statuses = {stage["stage"]: stage["status"] for stage in summary["stages"]}
    assert statuses.pop("tests") == "skipped"  # they need a CUDA device
    assert statuses == dict.fromkeys(["env", "bench-small", "bench-paper", "demo"], "passed")
    assert all(stage["seconds"] <= stage["limit_s"] for stage in summary["stages"])
    missing = [name for name, present in summary["outputs"].items() if not present]
    assert not missing
    tests = summary["tests"]
    assert tests["tests"] == tests["skipped"] > 0 and tests["failures"] == tests["errors"] == 0

    assert json.loads((out / "env" / "torch.json").read_text())["cuda_available"] is False
    configs = ["small_rnnencdec", "small_luong", "small_rnnsearch", "rnnsearch50"]
    for config in configs:
        rows = json.loads((out / "bench" / f"{config}.json").read_text())["rows"]
        assert [row["precision"] for row in rows] == ["fp32", "bf16"]
        assert all(row["train_ms"] > 0 and row["beam_sentences_per_s"] > 0 for row in rows)

    by_length = json.loads((out / "demo" / "by_length.json").read_text())
    assert [system["label"] for system in by_length["systems"]] == ["RNNsearch", "RNNencdec"]
    for label in ("RNNsearch", "RNNencdec"):
        logged = (out / "demo" / "runs" / label / "metrics.jsonl").read_text().splitlines()
        assert json.loads(logged[-1])["step"] == 10
    text = (out / "summary.md").read_text()
    assert "| demo | passed |" in text and "## bench/rnnsearch50.md" in text


def test_only_runs_the_stages_named_and_expects_only_their_outputs(tmp_path):
    out = tmp_path / "check"
    result = gpu_check(str(out), "--device", "cpu", "--quick", "--only", "env", "--work", str(tmp_path / "w"))
    assert result.returncode == 0, result.stderr[-4000:]

    summary = json.loads((out / "summary.json").read_text())
    assert summary["passed"] and summary["only"] == "env"
    statuses = {stage["stage"]: stage["status"] for stage in summary["stages"]}
    others = dict.fromkeys(["tests", "bench-small", "bench-paper", "demo"], "deselected")
    assert statuses == {"env": "passed", **others}
    env_files = ["env/torch.json", "env/lscpu.txt", "env/nvidia-smi.txt"]
    assert summary["outputs"] == dict.fromkeys(env_files, True)
    assert not (out / "bench").exists() or not any((out / "bench").iterdir())
    text = (out / "summary.md").read_text()
    assert "--only env" in text and "| demo | deselected |" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "usage"),
        (("out", "--device", "tpu"), "--device must be cuda or cpu"),
        (("out", "--fast"), "--fast"),
        (("out", "--only", "env,bench"), "--only: unknown stage 'bench'"),
    ],
)
def test_bad_arguments_are_one_line_errors(tmp_path, args, message):
    result = gpu_check(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "out").exists()


MEASURE = SCRIPT.parent / "gpu_measure.sh"


@pytest.mark.e2e
@pytest.mark.slow(seconds=80)
@pytest.mark.parametrize(
    ("measurement", "tables"),
    [
        ("profile", ["small_rnnsearch", "rnnsearch50"]),
        (
            "batches",
            [
                f"{kind}_{precision}"
                for precision in ("fp32", "tf32", "bf16")
                for kind in ("sentences", "tokens")
            ],
        ),
    ],
)
def test_each_gpu_measurement_runs_its_commands_and_brings_back_two_files(tmp_path, measurement, tables):
    """scripts/gpu_measure.sh in its CPU mode: every bench_step run of the measurement finishes, and OUT
    holds its tables and one archive of them, their JSON, the environment and the logs."""
    env = {**os.environ, "PYTHON": sys.executable}
    command = [str(MEASURE), measurement, str(tmp_path / "out"), "--device", "cpu", "--quick"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        f"{measurement}.md",
        f"{measurement}.tar.gz",
    ]
    with tarfile.open(tmp_path / "out" / f"{measurement}.tar.gz") as archive:
        archive.extractall(tmp_path / "got", filter="data")
    folder = tmp_path / "got" / measurement
    status = (folder / "status.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in status] == ["env", *tables]
    assert all(": exit code 0 after" in line for line in status)
    assert json.loads((folder / "env" / "torch.json").read_text())["cuda_available"] is False
    for table in tables:
        rows = json.loads((folder / f"{table}.json").read_text())["rows"]
        assert rows and all(row["train_sentences_per_s"] > 0 for row in rows)
        if measurement == "profile":
            assert all(row["train_profile"]["kernels_per_unit"] > 0 for row in rows)
    text = (tmp_path / "out" / f"{measurement}.md").read_text()
    assert text.count("## Model micro-benchmark") == len(tables)


def test_an_unknown_measurement_is_a_usage_error(tmp_path):
    result = subprocess.run([str(MEASURE), "speed", str(tmp_path / "out")], capture_output=True, text=True)
    assert result.returncode == 2 and "usage: scripts/gpu_measure.sh MEASUREMENT OUT_DIR" in result.stderr
    assert not (tmp_path / "out").exists()
