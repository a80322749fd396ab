"""The Python half of scripts/gpu_check.sh: what machine this is, and the check's summary.

    python scripts/gpu_check.py env FOLDER DEVICE            -> FOLDER/torch.json
    python scripts/gpu_check.py summary OUT DEVICE QUICK SECONDS [--only STAGES] -> OUT/summary.{json,md}

Standard library, torch and the repository's benchmarks/machine.py only, so that it runs on a bare GPU
image (with the repository root on PYTHONPATH, as gpu_check.sh sets it).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

# The configs each benchmark stage measures, in their order, and every file each stage writes.
BENCH_STAGES = {
    "bench-small": ["small_rnnencdec", "small_luong", "small_rnnsearch"],
    "bench-paper": ["rnnsearch50"],
}
BENCHMARKED = [config for configs in BENCH_STAGES.values() for config in configs]
OUTPUTS = {
    "env": ["env/torch.json", "env/lscpu.txt", "env/nvidia-smi.txt"],
    "tests": ["tests/junit.xml", "logs/tests.log"],
    **{
        stage: [f"bench/{config}.{suffix}" for config in configs for suffix in ("json", "md")]
        for stage, configs in BENCH_STAGES.items()
    },
    "demo": ["demo/summary.md", "demo/curve.png", "demo/by_length.json"],
}
FINE = ("passed", "skipped", "deselected")  # the statuses of a check that passed (deselected: not in --only)
PACKAGES = ["numpy", "sentencepiece", "sacrebleu", "typer", "tqdm", "pyyaml", "matplotlib"]
OPTIONAL = ["triton", "pytest", "hypothesis", "datasets"]


def environment(folder: Path, device: str) -> None:
    """torch, CUDA, cuDNN, NCCL, the GPUs and the package versions, into folder/torch.json; exits non-zero
    when `device` is cuda and torch sees no CUDA device."""
    import torch

    from benchmarks.machine import describe  # (the repository root is on PYTHONPATH: gpu_check.sh)

    cuda = torch.cuda.is_available()
    info = {
        **describe("cuda" if cuda else "cpu", 0),  # CPU model and flags, torch, its threads, load, the GPU
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_available": cuda,
        "devices": [
            {
                "name": torch.cuda.get_device_name(i),
                "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
                "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1),
            }
            for i in range(torch.cuda.device_count())
        ],
        "bf16": torch.cuda.is_bf16_supported() if cuda else None,
        "nccl": str(torch.cuda.nccl.version()) if cuda and torch.distributed.is_nccl_available() else None,
        "packages": {name: _version(name) for name in PACKAGES + OPTIONAL},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "torch.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(info, indent=2))
    if device == "cuda" and not cuda:
        sys.exit("gpu_check: --device cuda, but torch sees no CUDA device")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def junit_counts(junit: Path) -> dict[str, int] | None:
    """tests, failures, errors and skipped, summed over the junit file's test suites (None: no file)."""
    if not junit.is_file():
        return None
    suites = list(ET.parse(junit).getroot().iter("testsuite"))
    return {
        key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")
    }


def read_stages(out: Path) -> list[dict[str, Any]]:
    """The stage records gpu_check.sh wrote to logs/stages.tsv (name, status, seconds, limit, note), with
    the test counts in the tests stage's note; a tests stage whose every test was skipped is `skipped`."""
    counts = junit_counts(out / "tests" / "junit.xml")
    stages = []
    for line in (out / "logs" / "stages.tsv").read_text(encoding="utf-8").splitlines():
        name, status, seconds, limit, note = line.split("\t")
        stage = {"stage": name, "status": status, "seconds": float(seconds), "limit_s": int(limit)}
        stage |= {"log": f"logs/{name}.log", "note": note}
        if name == "tests" and counts:
            ran = counts["tests"] - counts["skipped"]
            failed = counts["failures"] + counts["errors"]
            stage["note"] += f"; {ran - failed} passed, {failed} failed, {counts['skipped']} skipped"
            if status == "passed" and ran == 0:
                stage["status"] = "skipped"  # every test needs what this machine lacks (a CUDA device)
        stages.append(stage)
    return stages


def summarise(out: Path, device: str, quick: bool, seconds: int, only: str = "") -> bool:
    """Write out/summary.json and out/summary.md; True when no stage failed or ran out of time. The
    outputs expected are those of the stages that ran (all of them unless `only` names some)."""
    stages = read_stages(out)
    passed = all(stage["status"] in FINE for stage in stages)
    ran = [stage["stage"] for stage in stages if stage["status"] != "deselected"]
    summary = {
        "device": device,
        "quick": quick,
        "only": only,
        "passed": passed,
        "total_s": seconds,
        "stages": stages,
        "tests": junit_counts(out / "tests" / "junit.xml"),
        "outputs": {name: (out / name).is_file() for stage in ran for name in OUTPUTS.get(stage, [])},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    text = markdown(summary, out)
    (out / "summary.md").write_text(text, encoding="utf-8")
    print(text.split("\n## ")[0])  # the header and the stage table
    return passed


def markdown(summary: dict[str, Any], out: Path) -> str:
    """The stage table, the missing outputs, then the benchmark and BLEU-by-length tables."""
    torch_json = out / "env" / "torch.json"
    machine = json.loads(torch_json.read_text(encoding="utf-8")) if torch_json.is_file() else {}
    gpus = ", ".join(d["name"] for d in machine.get("devices", [])) or "none"
    command = f"scripts/gpu_check.sh --device {summary['device']}{' --quick' if summary['quick'] else ''}"
    command += f" --only {summary['only']}" if summary["only"] else ""
    lines = [
        f"# GPU check: {'passed' if summary['passed'] else 'FAILED'}",
        "",
        f"`{command}`: {summary['total_s']} s; GPU: {gpus}; torch {machine.get('torch')}, "
        f"CUDA {machine.get('cuda')}, cuDNN {machine.get('cudnn')}",
        "",
        "| stage | status | seconds | limit (s) | log | note |",
        "|---|---|---:|---:|---|---|",
    ]
    lines += [
        f"| {s['stage']} | {s['status']} | {s['seconds']} | {s['limit_s']} | [{s['log']}]({s['log']}) "
        f"| {s['note']} |"
        for s in summary["stages"]
    ]
    missing = [name for name, present in summary["outputs"].items() if not present]
    lines += ["", f"Missing outputs: {', '.join(missing)}" if missing else "All outputs written."]
    for table in [f"bench/{config}.md" for config in BENCHMARKED] + ["demo/by_length.md"]:
        if (out / table).is_file():  # its headings one level down
            text = (out / table).read_text(encoding="utf-8").strip().splitlines()
            lines += ["", f"## {table}", ""] + [
                "##" + line if line.startswith("#") else line for line in text
            ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    env = commands.add_parser("env", help="what machine this is: FOLDER/torch.json")
    env.add_argument("folder", type=Path)
    env.add_argument("device", choices=["cuda", "cpu"])
    summary = commands.add_parser("summary", help="OUT/summary.json and OUT/summary.md")
    summary.add_argument("out", type=Path)
    summary.add_argument("device", choices=["cuda", "cpu"])
    summary.add_argument("quick", type=int, choices=[0, 1])
    summary.add_argument("seconds", type=int, help="the whole check's duration")
    summary.add_argument("--only", default="", help="the stages gpu_check.sh --only ran (comma-separated)")
    args = parser.parse_args(argv)
    if args.command == "env":
        environment(args.folder, args.device)
    elif not summarise(args.out, args.device, bool(args.quick), args.seconds, args.only):
        sys.exit(1)


if __name__ == "__main__":
    main()
