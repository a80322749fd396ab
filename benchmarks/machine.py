"""What a figure was measured on, and whether other processes competed for the CPU meanwhile.

Speed on a CPU depends on its instruction sets far more than on its clock: the same bf16 update was 1.4x
faster than fp32 on a CPU with AVX-512 BF16 and 1.4x slower on another. Every report therefore records the
CPU model, its family and model number and its vector and matrix flags (what `lscpu` shows, read from
/proc/cpuinfo by the package's `provenance` module, which every file the product writes uses too), the
kernels ATen picked (`torch.backends.cpu.get_cpu_capability()`), torch's version and each process' threads.

A figure belongs to the code that made it: every report records the commit and whether the checkout had
changes (tracked or untracked files), at the start and at the end of the run; a run started on a changed
tree, or whose commit changed while it ran, says so in its warnings (`provenance_warnings`).

A shared machine gives noisy figures. `LoadWatch` measures, over one timed span, how many cores other
processes kept busy: the CPU time of every process (/proc/stat) minus our own. It also keeps the highest
1-minute load average seen, which includes our own work. `COMPETING_CORES` is where the report warns.
"""

from __future__ import annotations

import datetime
import os
import platform
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seq2seq_attn import provenance as package
from seq2seq_attn.provenance import REPOSITORY

COMPETING_CORES = 0.5  # other processes keeping this many cores busy make a figure unreliable
PROC_STAT = Path("/proc/stat")
SAMPLE_SECONDS = 5.0  # how often a LoadWatch reads the load average


# The settings that make oneDNN, MKL and ATen use fewer instruction sets than the CPU has: how a run
# emulates an older CPU (docs/performance.md). A run under any of them says so in its report.
ISA_LIMITS = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")


def describe(device: str, threads: int) -> dict[str, Any]:
    """The machine as the reports print it; `threads`: what the processes were given (0: torch's default)."""
    import torch

    description: dict[str, Any] = {
        **package.machine(device),
        "cores": len(os.sched_getaffinity(0)),
        "torch_threads": threads or torch.get_num_threads(),
        "os": f"{platform.system()} {platform.release()}",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "load_before": round(os.getloadavg()[0], 2),
        "isa_limits": {name: os.environ[name] for name in ISA_LIMITS if os.environ.get(name)},
        "provenance": provenance(),
    }
    return description


def provenance(root: Path = REPOSITORY) -> dict[str, Any] | None:
    """The checkout's commit and whether any file differs from it (None outside a git checkout)."""
    found = package.code(root)
    return None if found["commit"] is None else {"commit": found["commit"], "dirty": found["changed"]}


def provenance_warnings(machine: dict[str, Any], root: Path = REPOSITORY) -> list[str]:
    """At the end of a run: records the checkout's state then (`provenance_end`) and warns when the run
    started on a changed tree, or the tree or its commit changed while it ran."""
    start, end = machine.get("provenance"), provenance(root)
    machine["provenance_end"] = end
    if start is None or end is None:
        return ["not run from a git checkout: the code it measured is not recorded"]
    warnings = []
    if start["dirty"]:
        warnings.append(f"started on a checkout with uncommitted changes (commit {start['commit'][:10]})")
    if end["commit"] != start["commit"]:
        warnings.append(f"the commit changed while it ran: {start['commit'][:10]} -> {end['commit'][:10]}")
    elif end["dirty"] and not start["dirty"]:
        warnings.append("files of the checkout changed while it ran")
    return warnings


def summary(machine: dict[str, Any]) -> str:
    """One line: CPU model (family and model number), cores, ISA flags, ATen's kernels, torch and the
    threads of each process."""
    flags = " ".join(machine.get("cpu_flags") or []) or "unknown"
    capability = machine.get("cpu_capability", "unknown")
    limits = " ".join(f"{name}={value}" for name, value in machine.get("isa_limits", {}).items())
    code = machine.get("provenance")
    family = machine.get("cpu_family")
    number = f" (family {family}, model {machine.get('cpu_model')})" if family else ""
    return (
        f"{machine['cpu']}{number}, {machine['cores']} cores; flags: {flags}; ATen kernels {capability}; "
        f"torch {machine['torch']} ({machine['torch_threads']} threads per process)"
        + (f"; instruction sets limited by {limits}" if limits else "")
        + (f"; commit {code['commit'][:10]}{' with changes' if code['dirty'] else ''}" if code else "")
    )


def load_warning(load_before: float) -> str | None:
    """A warning when the machine was already busy as the run started."""
    if load_before <= COMPETING_CORES:
        return None
    return f"the 1-minute load average was {load_before:.2f} before the run: other processes used the CPU"


def span_warning(name: str, others_cores: float | None) -> str | None:
    """A warning when other processes kept more than COMPETING_CORES busy while `name` was timed."""
    if others_cores is None or others_cores <= COMPETING_CORES:
        return None
    return f"other processes kept {others_cores:.2f} cores busy during {name}"


def busy_cpu_seconds(stat: Path = PROC_STAT) -> float | None:
    """CPU seconds every process on the machine has used since boot (None where there is no /proc/stat).

    The first line of /proc/stat counts clock ticks per state: user nice system idle iowait irq softirq
    steal ...; all but idle and iowait are work."""
    try:
        fields = stat.read_text(encoding="utf-8").splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    ticks = [int(value) for value in fields[:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds used by this process and its waited-for children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass
class LoadWatch:
    """Started before a timed span, stopped after it: the cores other processes used, the peak load."""

    started: float = field(default_factory=time.perf_counter)
    busy_at_start: float | None = field(default_factory=busy_cpu_seconds)
    peak_load: float = field(default_factory=lambda: os.getloadavg()[0])
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.peak_load = max(self.peak_load, os.getloadavg()[0])

    def stop(self, own_seconds: float) -> float | None:
        """Cores other processes kept busy on average, given the CPU seconds our own work used."""
        self._stop.set()
        self.peak_load = max(self.peak_load, os.getloadavg()[0])
        busy, wall = busy_cpu_seconds(), time.perf_counter() - self.started
        if busy is None or self.busy_at_start is None or wall <= 0:
            return None
        return max(0.0, (busy - self.busy_at_start - own_seconds) / wall)
