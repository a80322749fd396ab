"""scripts/gpu_check.sh in its CPU mode (`--device cpu --quick`): every stage runs the command it runs on a
GPU, at tiny sizes, and the summary accounts for each stage and output."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
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


def measure(tmp_path: Path, measurement: str, *options: str, **env: str) -> tuple[Path, list[str]]:
    """scripts/gpu_measure.sh MEASUREMENT in its CPU mode (`--device cpu --quick`, `options` after), run to
    success with `env` added: the archive's folder, extracted, and each line of its status.txt's run name."""
    command = [str(MEASURE), measurement, str(tmp_path / "out"), "--device", "cpu", "--quick", *options]
    environment = {**os.environ, "PYTHON": sys.executable, **env}
    result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        f"{measurement}.md",
        f"{measurement}.tar.gz",
    ]
    with tarfile.open(tmp_path / "out" / f"{measurement}.tar.gz") as archive:
        archive.extractall(tmp_path / "got", filter="data")
    folder = tmp_path / "got" / measurement
    status = (folder / "status.txt").read_text().splitlines()
    assert all(": exit code 0 after" in line for line in status)
    return folder, [line.split(":")[0] for line in status]


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
    folder, runs = measure(tmp_path, measurement)
    demo = ["demo_graphs_off"] if measurement == "profile" else []  # the demo alone (CPU: no graphs)
    assert runs == ["env", *tables, *demo]
    if demo:
        assert re.search(r"^\| off \| [\d,]+ \| [\d.]+ \| [\d.]+ \|", (folder / "demo.md").read_text(), re.M)
    assert json.loads((folder / "env" / "torch.json").read_text())["cuda_available"] is False
    for table in tables:
        rows = json.loads((folder / f"{table}.json").read_text())["rows"]
        assert rows and all(row["train_sentences_per_s"] > 0 for row in rows)
        if measurement == "profile":
            assert all(row["train_profile"]["kernels_per_unit"] > 0 for row in rows)
    text = (tmp_path / "out" / f"{measurement}.md").read_text()
    assert text.count("## Model micro-benchmark") == len(tables)


def tiny_corpus(folder: Path) -> Path:
    """A line-aligned English-"French" corpus of a few hundred random sentences, the target a word-by-word
    mapping of the source; train.* gzipped, as the shared corpus has them."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    folder.mkdir()
    for split, count in (("train", 400), ("valid", 20), ("test", 40)):
        sources = [" ".join(rng.choices(words, k=rng.randint(2, 14))) for _ in range(count)]
        sides = {"en": sources, "fr": [" ".join("f" + word for word in line.split()) for line in sources]}
        for lang, lines in sides.items():
            text = "".join(line + "\n" for line in lines)
            if split == "train":
                with gzip.open(folder / f"{split}.{lang}.gz", "wt", encoding="utf-8") as out:
                    out.write(text)
            else:
                (folder / f"{split}.{lang}").write_text(text, encoding="utf-8")
    return folder


@pytest.mark.e2e
@pytest.mark.slow(seconds=80)
def test_the_paper_measurement_trains_both_models_and_brings_back_their_report_and_translations(tmp_path):
    """scripts/gpu_measure.sh paper in its CPU mode on a tiny corpus: both systems train and are scored by
    length, and the archive holds the report, each system's test translations (one line per test
    sentence) and its training log."""
    corpus = tiny_corpus(tmp_path / "corpus")
    # --set: overrides reach both trainings
    folder, runs = measure(tmp_path, "paper", "--corpus", str(corpus), "--set", "seed=7")
    assert runs == ["env", "paper"]
    report = json.loads((folder / "report" / "by_length.json").read_text())
    assert [system["label"] for system in report["systems"]] == ["RNNsearch-50", "RNNencdec-50"]
    for label in ("RNNsearch-50", "RNNencdec-50"):
        with gzip.open(folder / f"test.{label}.hyp.gz", "rt", encoding="utf-8") as hyps:
            assert len(hyps.read().splitlines()) == 40
    trained = sorted(path.name for path in (folder / "runs").iterdir())
    assert len(trained) == 2
    assert all((folder / "runs" / name / "metrics.jsonl").stat().st_size for name in trained)
    assert (folder / "report" / "curve.png").stat().st_size
    assert all("seed: 7" in (folder / "runs" / name / "config.yaml").read_text() for name in trained)
    assert "RNNsearch-50" in (tmp_path / "out" / "paper.md").read_text()


@pytest.mark.e2e
@pytest.mark.slow(seconds=30)
def test_the_recipe_measurement_trains_each_variant_and_tables_its_dev_loss(tmp_path):
    """scripts/gpu_measure.sh recipe in its CPU mode on a tiny corpus, with RECIPES replaced: the data are
    prepared once, each variant trains with its own settings, and recipe.md / recipe.json give each one's
    updates, speed and dev loss."""
    corpus = tiny_corpus(tmp_path / "corpus")
    recipes = "paper: adam-32:train.optimizer=adam,train.batch_size=32"
    folder, runs = measure(tmp_path, "recipe", "--corpus", str(corpus), RECIPES=recipes)
    assert runs == ["env", "data", "paper", "adam-32"]
    rows = json.loads((folder / "recipe.json").read_text())["rows"]
    assert [(row["variant"], row["settings"], row["updates"]) for row in rows] == [
        ("paper", [], 5),
        ("adam-32", ["train.optimizer=adam", "train.batch_size=32"], 5),
    ]
    assert all(row["dev_loss"] > 0 and row["target_tokens_per_s"] > 0 for row in rows)
    config = (folder / "runs" / "adam-32" / "config.yaml").read_text()
    assert "optimizer: adam" in config and "batch_size: 32" in config
    assert (
        "| adam-32 | train.optimizer=adam, train.batch_size=32 | 5 |"
        in (tmp_path / "out" / "recipe.md").read_text()
    )


def test_the_paper_measurement_without_its_corpus_is_a_usage_error(tmp_path):
    command = [str(MEASURE), "paper", str(tmp_path / "out"), "--corpus", str(tmp_path / "none")]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 2 and f"--corpus: no folder {tmp_path / 'none'}" in result.stderr
    assert not (tmp_path / "out").exists()


def test_an_unknown_measurement_is_a_usage_error(tmp_path):
    result = subprocess.run([str(MEASURE), "speed", str(tmp_path / "out")], capture_output=True, text=True)
    assert result.returncode == 2 and "usage: scripts/gpu_measure.sh MEASUREMENT OUT_DIR" in result.stderr
    assert not (tmp_path / "out").exists()


# What the GPU machine's image lacks of the product's dependencies (it has torch, sentencepiece, sacrebleu,
# typer, tqdm, pyyaml, matplotlib, safetensors), hidden here so that an import of one outside serving fails.
DEVICE_IMAGE_LACKS = ("datasets", "fastapi", "starlette", "uvicorn", "pydantic", "sacremoses")

HIDE_AND_IMPORT = """
import importlib, importlib.abc, pkgutil, runpy, sys
lacks = set(sys.argv[1].split(","))
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in lacks:
            raise ImportError(f"hidden: {name}")
sys.meta_path.insert(0, Hide())
import seq2seq_attn
names = [m.name for m in pkgutil.walk_packages(seq2seq_attn.__path__, "seq2seq_attn.")]
for name in [n for n in names if not n.startswith("seq2seq_attn.serving")] + ["benchmarks.bench_step"]:
    importlib.import_module(name)
sys.argv = ["seq2seq", "--help"]
runpy.run_module("seq2seq_attn", run_name="__main__")
"""


def test_what_the_device_runs_imports_without_the_packages_the_device_image_lacks():
    """The GPU machine's image has no registry: training, decoding, evaluation, the benchmarks and the CLI's
    help must load without datasets, FastAPI, uvicorn or sacremoses (each loaded where it is used)."""
    root = SCRIPT.parent.parent
    result = subprocess.run(
        [sys.executable, "-c", HIDE_AND_IMPORT, ",".join(DEVICE_IMAGE_LACKS)],
        env={**os.environ, "PYTHONPATH": str(root)},
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "train" in result.stdout and "translate" in result.stdout
