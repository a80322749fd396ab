"""What made a result: the code (the commit and whether the checkout had changes, or the package version
where there is no checkout), the machine (CPU name, family and model number, its instruction-set flags;
the GPU where one was used), torch and its threads.

Why in the package: a number means little without the code and the machine that made it. Other CPUs round
differently and run other kernels (a bf16 update 1.4x faster than fp32 on one CPU, 1.4x slower on
another), so the run folder (`provenance.json`, written by training at every start and resume) and every
`eval` report (JSON, markdown, text, HTML) record what made them, as the benchmarks' reports do
(benchmarks/machine.py builds on this module). An install without git records the package's version and
says that the commit is unknown.
"""

from __future__ import annotations

import functools
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__

CPUINFO = Path("/proc/cpuinfo")
REPOSITORY = Path(__file__).resolve().parent.parent  # a checkout's root, when the package runs from one
# The flags that decide which kernels run: vector widths, bf16/fp16/int8 dot products, matrix units.
SPEED_FLAG_PREFIXES = ("avx", "amx", "fma", "f16c")
UNKNOWN_COMMIT = "commit unknown: not run from a git checkout"


@dataclass(frozen=True)
class Cpu:
    """The CPU as `lscpu` shows it (from /proc/cpuinfo): model name, family and model number (which tell
    apart CPUs sold under one name, e.g. "AMD EPYC" Zen 3 and Zen 4), and flags (None where unreadable)."""

    name: str
    family: str | None
    model: str | None
    flags: frozenset[str] | None

    @property
    def speed_flags(self) -> list[str]:
        """The flags that decide which kernels run (SPEED_FLAG_PREFIXES), sorted."""
        return sorted(flag for flag in self.flags or () if flag.startswith(SPEED_FLAG_PREFIXES))


@functools.cache
def cpu(cpuinfo: Path = CPUINFO) -> Cpu:
    """This machine's CPU (the first processor listed)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return Cpu(platform.processor() or "unknown", None, None, None)
    fields: dict[str, str] = {}
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return Cpu(
        fields.get("model name") or platform.processor() or "unknown",
        fields.get("cpu family"),
        fields.get("model"),
        frozenset(fields.get("flags", "").split()),
    )


def code(root: Path = REPOSITORY) -> dict[str, Any]:
    """The package's version and, from a git checkout, its commit and whether any file differs from it
    (`changed`); elsewhere the commit is None and `note` says so."""
    unknown = {"version": __version__, "commit": None, "changed": None, "note": UNKNOWN_COMMIT}
    if not (root / ".git").exists():  # an installed package, not a checkout
        return unknown

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    try:
        return {
            "version": __version__,
            "commit": git("rev-parse", "HEAD"),
            "changed": bool(git("status", "--porcelain")),
        }
    except (OSError, subprocess.SubprocessError):
        return unknown


def machine(device: str = "cpu") -> dict[str, Any]:
    """The machine a result is computed on now: the CPU (name, family, model, the flags that decide the
    kernels), ATen's kernels, torch and python, and the GPU where `device` is one ("cuda", "cuda:1")."""
    import torch

    found = cpu()
    record: dict[str, Any] = {
        "cpu": found.name,
        "cpu_family": found.family,
        "cpu_model": found.model,
        "cpu_flags": found.speed_flags,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": str(device),
    }
    if str(device).startswith("cuda"):
        record["gpu"] = torch.cuda.get_device_name(torch.device(device).index or 0)
        record["cuda"] = torch.version.cuda
    return record


def describe(device: str = "cpu") -> dict[str, Any]:
    """The code and machine of a result computed now on `device`, with the threads of this process. No
    clock time: a report made twice from the same inputs is the same file."""
    import torch

    return {"code": code(), **machine(device), "threads": torch.get_num_threads()}


def summary(record: dict[str, Any]) -> str:
    """One line: the code, then the CPU (family and model), its flags, the GPU, torch and its threads."""
    made = record["code"]
    if made.get("commit"):
        code_text = f"commit {made['commit'][:10]}{' with changes' if made.get('changed') else ''}"
    else:
        code_text = f"version {made['version']} ({made.get('note', UNKNOWN_COMMIT)})"
    family = (
        f" (family {record['cpu_family']}, model {record['cpu_model']})" if record.get("cpu_family") else ""
    )
    flags = " ".join(record.get("cpu_flags") or []) or "unknown"
    gpu = f"; GPU {record['gpu']} (CUDA {record['cuda']})" if record.get("gpu") else ""
    return (
        f"seq2seq-attn {code_text}; {record['cpu']}{family}, flags {flags}; ATen kernels "
        f"{record.get('cpu_capability', 'unknown')}{gpu}; torch {record['torch']}, "
        f"{record['threads']} threads"
    )
