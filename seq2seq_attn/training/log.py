"""What training measures and where it goes.

- `Window`: the counters of the updates since the last log line, kept on the device so that adding to
  them never waits for the GPU; they are read once per `train.log_every` updates.
- `improves`: the one rule for "did the validation metric improve", shared by best-K checkpoints, early
  stopping and the plateau learning-rate schedule.
- `MetricsLog` / `read_metrics`: `<run>/metrics.jsonl` (one JSON object per logged line, the step and the
  training time first), the same as text in `<run>/train.log`, and TensorBoard events in
  `<run>/tensorboard` when the optional `tensorboard` package is installed.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import UserError
from ..io import write_text
from ..vocab.batching import Batch

METRICS_FILE = "metrics.jsonl"
LOG_FILE = "train.log"
HIGHER_IS_BETTER = ("bleu",)  # validation metrics where more is better; lower loss is better


def perplexity(loss: float) -> float:
    """exp(mean token loss), capped so that a diverged loss gives a large number, not an overflow."""
    return math.exp(min(loss, 50))


# ----------------------------------------------------------------------------------------------------------
# did it improve


def rank_value(metric: str, value: float) -> float:
    """`value` of validation `metric`, signed so that lower is better for every metric."""
    return -value if metric in HIGHER_IS_BETTER else value


def improves(metric: str, value: float, best: float | None) -> bool:
    """Whether `value` strictly beats `best` (None: nothing to beat yet)."""
    return best is None or rank_value(metric, value) < rank_value(metric, best)


# ----------------------------------------------------------------------------------------------------------
# the logging window


@dataclass
class WindowStats:
    loss: float  # mean token loss of the updates not skipped
    tokens_per_s: float  # target tokens of all updates per wall-clock second
    padding: float  # share of padded positions among source + target positions
    skipped: int  # updates skipped for a non-finite loss or gradient
    bad_run: int  # consecutive skipped updates up to now (may span several windows)
    grad_norm: float  # mean gradient norm before clipping, over the updates not skipped
    clipped: float  # share of the updates not skipped whose gradient was clipped (train.clip_norm)


class Window:
    """The updates since the last log line. Losses and non-finite flags are 0-dim device tensors, so
    `add` never synchronises; `take` reads them (one synchronisation) and starts the next window."""

    def __init__(self, device: torch.device, clip_norm: float = 0.0, bad_run: int = 0) -> None:
        """bad_run: consecutive skipped updates before this window (a resumed run's, from its checkpoint)."""
        self.clip_norm = clip_norm if clip_norm > 0 else math.inf
        self.loss = torch.zeros((), device=device)
        self.norm = torch.zeros((), device=device)  # summed pre-clip gradient norms of the kept updates
        self.clipped = torch.zeros((), device=device)  # kept updates that were clipped
        self.tokens = torch.zeros((), device=device)  # target tokens of the updates not skipped
        self.skipped = torch.zeros((), device=device)
        self.bad_run = torch.full((), float(bad_run), device=device)
        self._restart()

    def _restart(self) -> None:
        self.loss.zero_()
        self.tokens.zero_()
        self.skipped.zero_()
        self.norm.zero_()
        self.clipped.zero_()
        self.updates = self.all_tokens = self.real = self.padded = 0
        self.started = time.monotonic()

    def add(self, batch: Batch, loss_sum: torch.Tensor, bad: torch.Tensor, norm: torch.Tensor) -> None:
        """Count one update: `loss_sum` its summed token loss, `bad` 1.0 when it was skipped, else 0.0,
        `norm` its gradient norm before clipping."""
        kept = 1 - bad
        self.loss += loss_sum * kept
        self.tokens += batch.n_tokens * kept
        self.norm += torch.nan_to_num(norm * kept, nan=0.0, posinf=0.0)
        self.clipped += (norm > self.clip_norm).float() * kept
        self.skipped += bad
        self.bad_run = (self.bad_run + bad) * bad
        self.updates += 1
        self.all_tokens += batch.n_tokens
        self.real += batch.n_tokens + int(batch.src_lengths[: batch.n_sentences].sum())
        self.padded += batch.n_padded

    def pending(self) -> tuple[int, int]:
        """(updates skipped so far in this window, consecutive skipped updates up to now), read without
        ending the window: what a checkpoint written between log lines adds to the run's counters."""
        skipped, bad_run = torch.stack([self.skipped, self.bad_run]).tolist()  # one read of the device
        return int(skipped), int(bad_run)

    def take(self) -> WindowStats:
        seconds = time.monotonic() - self.started
        skipped = int(self.skipped.item())
        kept = max(self.updates - skipped, 1)
        stats = WindowStats(
            loss=self.loss.item() / max(self.tokens.item(), 1.0),
            tokens_per_s=self.all_tokens / max(seconds, 1e-9),
            padding=1 - self.real / max(self.padded, 1),
            skipped=skipped,
            bad_run=int(self.bad_run.item()),
            grad_norm=self.norm.item() / kept,
            clipped=self.clipped.item() / kept,
        )
        self._restart()
        return stats


# ----------------------------------------------------------------------------------------------------------
# metrics.jsonl, train.log, TensorBoard


class MetricsLog:
    """Appends each record to the run's metrics.jsonl, train.log and TensorBoard events (when installed)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.tensorboard = _tensorboard_writer(run_dir)

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()

    def write(self, record: dict[str, Any]) -> str:
        """Append `record` (its "step" first); returns it as the text line written to train.log."""
        with open(self.run_dir / METRICS_FILE, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.tensorboard is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float):
                    self.tensorboard.add_scalar(key, value, record["step"])
        line = text_line(record)
        with open(self.run_dir / LOG_FILE, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        return line


def text_line(record: dict[str, Any]) -> str:
    """A record as its line of train.log: `key=value` pairs."""
    return " ".join(f"{key}={_fmt(value)}" for key, value in record.items())


def truncate_metrics(run_dir: Path, step: int) -> None:
    """On resume, forget the records logged after the checkpoint's `step`, in metrics.jsonl and train.log
    alike: they will be logged again."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return
    kept = [record for record in _records(path) if record.get("step", 0) <= step]
    write_text(path, "".join(json.dumps(record) + "\n" for record in kept))
    write_text(run_dir / LOG_FILE, "".join(text_line(record) + "\n" for record in kept))


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise UserError(f"{run_dir}: no {METRICS_FILE} (is it a run directory?)")
    return _records(path)


def _records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of `path`; a line torn by a crash while it was appended is skipped."""
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


def _tensorboard_writer(run_dir: Path):
    """TensorBoard events in <run>/tensorboard when the optional `tensorboard` package is installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(log_dir=str(run_dir / "tensorboard"))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
