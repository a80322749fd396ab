"""Run one process and measure it the same way for every toolkit.

Wall time is taken around the process. Peak RSS and peak GPU memory are what the child itself records at
exit through `launch.py`, in a small JSON file: its resident high-water mark (VmHWM; `wait4`'s ru_maxrss
would also count the harness's own memory, which the child holds at the fork before its exec) and
`torch.cuda.max_memory_allocated`. A child killed before it could write them has none (None).

A wall-clock training budget is enforced from outside, identically for all toolkits: `interrupt_after`
seconds after the process started it gets SIGINT (Ctrl-C), on which ours and JoeyNMT save a checkpoint
and stop; OpenNMT-py saves none, so it is configured to save often. A process still alive `settle` seconds
after the interrupt gets SIGTERM (OpenNMT-py once kept training through SIGINT), and one still alive `grace`
seconds after it is killed. `Measured.deadline` is when the budget ran out, so that what a toolkit wrote
after it (OpenNMT-py's later checkpoints and log lines) can be left out.

For a quality-against-time curve a job takes `Snapshots` instead of a budget: at each fixed point of training
time it sends SIGUSR1, on which the toolkit (hooked by launcher/bench_snapshots.py) writes a checkpoint
after the update in progress and records it; the next point is pushed back by the time that write took, so
that every write is left out of the training time, and after the last point's checkpoint the process gets
SIGINT (then SIGTERM and SIGKILL as above).

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
# launcher/bench_snapshots.py's environment: the toolkit to hook, its records, the process's start
SNAPSHOT_HOOK_ENV, SNAPSHOTS_ENV, STARTED_ENV = "BENCH_SNAPSHOT_HOOK", "BENCH_SNAPSHOTS", "BENCH_STARTED"
POLL_SECONDS = 0.2  # how often a snapshot's record is looked for


@dataclass(frozen=True)
class Snapshots:
    """Checkpoints asked for at fixed points of training time (seconds from the process start, every
    earlier checkpoint write left out), recorded by the toolkit in `log` (JSON lines)."""

    at: tuple[float, ...]
    log: Path
    timeout: float = 600.0  # seconds a checkpoint may take to be written before training is stopped


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
    snapshots: Snapshots | None = None  # checkpoints at fixed points, then the interrupt (no budget)


@dataclass
class Measured:
    returncode: int
    seconds: float
    peak_rss_mb: float | None
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
    interrupted, ended, stopped = threading.Event(), threading.Event(), {}
    with contextlib.ExitStack() as files:
        log = files.enter_context(open(job.log, "w", encoding="utf-8"))
        stdin = files.enter_context(open(job.stdin or os.devnull, "rb"))
        stdout = files.enter_context(open(job.stdout, "wb")) if job.stdout else log
        log.write("+ " + " ".join(job.argv) + "\n")
        log.flush()
        start, started, watch = time.perf_counter(), time.time(), LoadWatch()
        if job.snapshots is not None:
            job.snapshots.log.unlink(missing_ok=True)
            env |= {SNAPSHOTS_ENV: str(job.snapshots.log), STARTED_ENV: repr(started)}
        process = subprocess.Popen(job.argv, cwd=job.cwd, env=env, stdin=stdin, stdout=stdout, stderr=log)
        if job.snapshots is not None:
            arguments = (process, job, started, interrupted, ended, stopped)
            threading.Thread(target=_take_snapshots, args=arguments, daemon=True).start()
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
            ended.set()
            for timer in timers:
                timer.cancel()
        seconds = time.perf_counter() - start
        others = watch.stop(own_seconds=usage.ru_utime + usage.ru_stime)
        process.returncode = os.waitstatus_to_exitcode(status)
    return Measured(
        returncode=process.returncode,
        seconds=seconds,
        peak_rss_mb=_recorded(stats, "vm_hwm_kib", 2**10),
        cuda_peak_mb=_recorded(stats, "cuda_max_memory_allocated", 2**20),
        interrupted=interrupted.is_set(),
        log=job.log,
        deadline=stopped.get("at") if job.interrupt_after is None else started + job.interrupt_after,
        others_cores=others,
        peak_load=watch.peak_load,
    )


def _take_snapshots(
    process: subprocess.Popen,
    job: Job,
    started: float,
    interrupted: threading.Event,
    ended: threading.Event,
    stopped: dict[str, float],
) -> None:
    """SIGUSR1 at each of the job's points, each pushed back by the checkpoint writes before it; once the
    last checkpoint is recorded (or one never is), SIGINT, then SIGTERM and SIGKILL as for a budget.
    `stopped["at"]`: when SIGINT was sent. Returns early when the process ends by itself."""
    snapshots, written = job.snapshots, 0.0
    assert snapshots is not None
    for index, at in enumerate(snapshots.at):
        if ended.wait(max(0.0, started + at + written - time.time())) or process.poll() is not None:
            return
        process.send_signal(signal.SIGUSR1)
        record = _record_of(snapshots, index, process, ended)
        if record is None:
            break
        written += record["save_s"]
    stopped["at"] = time.time()
    _interrupt(process, interrupted)
    if not ended.wait(job.settle):
        _terminate(process)
    if not ended.wait(max(0.0, job.grace - job.settle)):
        process.kill()


def _record_of(snapshots: Snapshots, index: int, process: subprocess.Popen, ended: threading.Event):
    """The `index`-th checkpoint record once written; None when the process ends or time runs out first."""
    give_up = time.time() + snapshots.timeout
    while time.time() < give_up and process.poll() is None:
        records = read_snapshots(snapshots.log)
        if len(records) > index:
            return records[index]
        ended.wait(POLL_SECONDS)
    return None


def read_snapshots(log: Path) -> list[dict]:
    """The checkpoint records a hooked toolkit wrote (launcher/bench_snapshots.py), in order; a line still
    being written is left for the next read."""
    if not log.is_file():
        return []
    lines = log.read_text(encoding="utf-8").split("\n")[:-1]  # complete lines only
    return [json.loads(line) for line in lines if line.strip()]


def _interrupt(process: subprocess.Popen, flag: threading.Event) -> None:
    if process.poll() is None:
        flag.set()
        process.send_signal(signal.SIGINT)


def _terminate(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()


def _recorded(stats: Path, key: str, per_mib: int) -> float | None:
    """A peak the launcher recorded at the child's exit, in MiB (`per_mib` of its units make one)."""
    if not stats.is_file():
        return None
    peak = json.loads(stats.read_text(encoding="utf-8")).get(key)
    return None if peak is None else peak / per_mib


def package_version(python: str | Path, package: str) -> str:
    """The installed version of `package` in the environment of `python` ('' when not installed)."""
    code = f"import importlib.metadata as m\ntry: print(m.version({package!r}))\nexcept Exception: print('')"
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    return result.stdout.strip()
