"""Checkpoints on request while a toolkit trains: the points of a quality-against-time curve.

`launch.py` installs this when $BENCH_SNAPSHOT_HOOK names a toolkit (`ours`, `opennmt`). The harness then
sends SIGUSR1 at each fixed point of the curve; after the update in progress the toolkit writes a checkpoint
in its own format, and one JSON line goes to the file named by $BENCH_SNAPSHOTS:

    {"step": 1234, "checkpoint": ".../model_step_1234.pt", "age_s": 600.4, "cpu_s": 1187.2,
     "save_s": 0.41, "save_cpu_s": 0.40}

`age_s`: seconds since the harness started the process ($BENCH_STARTED, epoch seconds), taken before the
write; `cpu_s`: CPU seconds of the process and all its descendants by then (`tree_cpu_seconds`: data-loader
workers included, whether still running or already waited for); `save_s`, `save_cpu_s`: what the write
itself took, so that the harness can leave every write out of both budgets.

A request is served between two updates, never inside one, by wrapping a method each toolkit calls once
per update: ours `_Loop.stop_on_signal`, OpenNMT-py 3.5.1 `Trainer._maybe_report_training` (one training
process, as the benchmark runs them: under DDP only the signalled rank would gather). Standard
library only at import: it runs inside every toolkit's own virtual environment (the toolkit's modules are
imported by the hooks, when they run). Its name is prefixed so that it shadows no module of a toolkit.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import time
from pathlib import Path

HOOK_ENV = "BENCH_SNAPSHOT_HOOK"  # which toolkit's training loop to hook
SNAPSHOTS_ENV = "BENCH_SNAPSHOTS"  # the JSON-lines file of the checkpoints written
STARTED_ENV = "BENCH_STARTED"  # epoch seconds at which the harness started the process
PROC = Path("/proc")


class Requests:
    """SIGUSR1 asks for a checkpoint; the flag is read (and cleared) between updates."""

    def __init__(self) -> None:
        self.pending = False
        signal.signal(signal.SIGUSR1, self._ask)

    def _ask(self, signum: int, frame: object) -> None:
        self.pending = True

    def take(self) -> bool:
        asked, self.pending = self.pending, False
        return asked


def install(toolkit: str) -> None:
    """Hook `toolkit`'s training loop (before its module runs)."""
    hooks = {"ours": _hook_ours, "opennmt": _hook_opennmt}
    if toolkit not in hooks:
        raise SystemExit(f"bench_snapshots: no hook for {toolkit!r} (known: {', '.join(hooks)})")
    hooks[toolkit](Requests(), Path(os.environ[SNAPSHOTS_ENV]), float(os.environ[STARTED_ENV]))


def _before(owner: type, name: str, requests: Requests, log: Path, started: float, save) -> None:
    """Wrap `owner.name` so that a pending request is served by `save(self, *args)` before it runs."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapped(self, *args, **kwargs):
        if requests.take():
            snapshot(lambda: save(self, *args), log, started)
        return original(self, *args, **kwargs)

    setattr(owner, name, wrapped)


def snapshot(save, log: Path, started: float) -> dict:
    """Run `save()` (-> the step and the checkpoint it wrote), measure it, append its record to `log`."""
    pid = os.getpid()
    age, cpu = time.time() - started, tree_cpu_seconds(pid)
    step, checkpoint = save()
    record = {
        "step": int(step),
        "checkpoint": str(checkpoint),
        "age_s": round(age, 3),
        "cpu_s": round(cpu, 2),
        "save_s": round(time.time() - started - age, 3),
        "save_cpu_s": round(tree_cpu_seconds(pid) - cpu, 2),
    }
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    return record


def _hook_ours(requests: Requests, log: Path, started: float) -> None:
    from seq2seq_attn.runs.checkpoint import save_checkpoint
    from seq2seq_attn.training.state import gather_rank_states
    from seq2seq_attn.training.train import _Loop

    def save(loop: _Loop) -> tuple[int, Path]:
        # run/snapshots/step_N.pt: one folder below the run, as decoding finds a checkpoint's run
        path = Path(loop.run_dir) / "snapshots" / f"step_{loop.progress.step}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(path, loop.checkpoint(gather_rank_states(loop.ranks, loop.stream)))
        return loop.progress.step, path

    _before(_Loop, "stop_on_signal", requests, log, started, save)


def _hook_opennmt(requests: Requests, log: Path, started: float) -> None:
    from onmt.trainer import Trainer

    def save(trainer: Trainer, step: int, *_: object) -> tuple[int, Path]:
        # its own saver, as its periodic checkpoints: `<save_model>_step_<step>.pt`
        trainer.model_saver.save(step, moving_average=trainer.moving_average)
        return step, Path(f"{trainer.model_saver.base_path}_step_{step}.pt")

    _before(Trainer, "_maybe_report_training", requests, log, started, save)


def tree_cpu_seconds(pid: int, proc: Path = PROC) -> float:
    """CPU seconds (user + system) of process `pid` and every descendant alive now, each with the CPU of
    its children already waited for: what `getrusage` would give with every child ended and waited for."""
    stats = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(entry / "stat")
            if fields is not None:
                stats[int(entry.name)] = fields
    children: dict[int, list[int]] = {}
    for child, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(child)
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        if current in stats:
            utime, stime, cutime, cstime = (int(value) for value in stats[current][11:15])
            total += utime + stime + cutime + cstime
        todo += children.get(current, [])
    return total / os.sysconf("SC_CLK_TCK")


def _stat_fields(path: Path) -> list[str] | None:
    """/proc/PID/stat after the command name (which may hold spaces and parentheses): state, ppid, ...;
    None when the process ended meanwhile."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()
