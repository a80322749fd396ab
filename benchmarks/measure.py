"""Run one process and measure it the same way for every toolkit.

Wall time is taken around the process; peak RSS comes from `os.wait4`, the kernel's account of that one
child (ru_maxrss), so measurements never mix processes. Peak GPU memory is what the child's torch reports
(`torch.cuda.max_memory_allocated`), written at exit by `launch.py` into a small JSON file.

A wall-clock training budget is enforced from outside, identically for all toolkits: `interrupt_after`
seconds after the process started it gets SIGINT (Ctrl-C), on which ours and JoeyNMT save a checkpoint
and stop; OpenNMT-py saves none, so it is configured to save often. A process still alive `settle` seconds
after the interrupt gets SIGTERM (OpenNMT-py once kept training through SIGINT), and one still alive `grace`
seconds after it is killed. `Measured.deadline` is when the budget ran out, so that what a toolkit wrote
after it (OpenNMT-py's later checkpoints and log lines) can be left out.

While the process runs, `machine.LoadWatch` measures how many cores other processes kept busy, so that a
figure taken on a loaded machine carries a warning.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .machine import LoadWatch

LAUNCHER = Path(__file__).with_name("launcher") / "launch.py"
STATS_ENV = "BENCH_STATS_FILE"  # where launch.py writes the child's GPU memory peak


@dataclass
class Job:
    """One process: `argv` run in `cwd`, stdout+stderr into `log` (stdout into `stdout` when given)."""

    argv: list[str]
    log: Path
    cwd: Path | None = None
    stdin: Path | None = None
    stdout: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # on top of the harness's environment
    interrupt_after: float | None = None  # seconds: the wall-clock budget
    settle: float = 30.0  # seconds after the interrupt before SIGTERM (a process that ignores SIGINT)
    grace: float = 300.0  # seconds after the interrupt before SIGKILL (the last checkpoint is being written)
    timeout: float | None = None  # seconds: a hung process is killed


@dataclass
class Measured:
    returncode: int
    seconds: float
    peak_rss_mb: float
    cuda_peak_mb: float | None
    interrupted: bool  # the budget ran out and SIGINT was sent
    log: Path
    deadline: float | None = None  # epoch seconds at which the budget ran out
    others_cores: float | None = None  # cores other processes kept busy meanwhile (machine.LoadWatch)
    peak_load: float | None = None  # highest 1-minute load average seen meanwhile, ours included

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def launched(python: str | Path, target: list[str]) -> list[str]:
    """argv that runs `target` (`-m module args` or `script args`) under `python` through launch.py."""
    return [str(python), str(LAUNCHER), *target]


def run_job(job: Job, base_env: dict[str, str] | None = None) -> Measured:
    """Run `job` to the end (or to its budget) and measure it."""
    job.log.parent.mkdir(parents=True, exist_ok=True)
    stats = job.log.with_suffix(".stats.json")
    stats.unlink(missing_ok=True)
    env = {**(base_env if base_env is not None else os.environ), **job.env, STATS_ENV: str(stats)}
    interrupted = threading.Event()
    with contextlib.ExitStack() as files:
        log = files.enter_context(open(job.log, "w", encoding="utf-8"))
        stdin = files.enter_context(open(job.stdin or os.devnull, "rb"))
        stdout = files.enter_context(open(job.stdout, "wb")) if job.stdout else log
        log.write("+ " + " ".join(job.argv) + "\n")
        log.flush()
        start, started, watch = time.perf_counter(), time.time(), LoadWatch()
        process = subprocess.Popen(job.argv, cwd=job.cwd, env=env, stdin=stdin, stdout=stdout, stderr=log)
        timers = []
        if job.interrupt_after is not None:
            timers.append(threading.Timer(job.interrupt_after, _interrupt, (process, interrupted)))
            timers.append(threading.Timer(job.interrupt_after + job.settle, _terminate, (process,)))
            timers.append(threading.Timer(job.interrupt_after + job.grace, process.kill))
        if job.timeout is not None:
            timers.append(threading.Timer(job.timeout, process.kill))
        for timer in timers:
            timer.daemon = True
            timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)  # this child's own rusage
        finally:
            for timer in timers:
                timer.cancel()
        seconds = time.perf_counter() - start
        others = watch.stop(own_seconds=usage.ru_utime + usage.ru_stime)
        process.returncode = os.waitstatus_to_exitcode(status)
    return Measured(
        returncode=process.returncode,
        seconds=seconds,
        peak_rss_mb=usage.ru_maxrss / 1024,  # Linux reports KiB
        cuda_peak_mb=_cuda_peak(stats),
        interrupted=interrupted.is_set(),
        log=job.log,
        deadline=None if job.interrupt_after is None else started + job.interrupt_after,
        others_cores=others,
        peak_load=watch.peak_load,
    )


def _interrupt(process: subprocess.Popen, flag: threading.Event) -> None:
    if process.poll() is None:
        flag.set()
        process.send_signal(signal.SIGINT)


def _terminate(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()


def _cuda_peak(stats: Path) -> float | None:
    if not stats.is_file():
        return None
    peak = json.loads(stats.read_text(encoding="utf-8")).get("cuda_max_memory_allocated")
    return None if peak is None else peak / 2**20


def package_version(python: str | Path, package: str) -> str:
    """The installed version of `package` in the environment of `python` ('' when not installed)."""
    code = f"import importlib.metadata as m\ntry: print(m.version({package!r}))\nexcept Exception: print('')"
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    return result.stdout.strip()
