"""`seq2seq train`: the training loop a researcher can leave running for days.

The loop, in order: prepare data and vocabulary (idempotent), build or resume the run, then repeat
  batch -> forward (bf16 autocast on GPU) -> cross-entropy -> backward -> clip -> guarded update
with validation (dev loss, perplexity, BLEU) every `validate_every` updates, best-K checkpoints, early
stopping, and `latest.pt` for exact resume. A checkpoint holds everything the next update depends on
(weights, optimiser, schedule, RNG states, data position), so a run killed at any point and resumed
reaches step N with the same parameters as an uninterrupted run (CPU, same thread count).

The hot loop never waits for the GPU except at logging intervals: losses and the non-finite counters
stay on the device, and fused optimisers skip non-finite updates by themselves (see optim.py).
Under `torchrun`, each rank trains on its own shard of every epoch's batches (DDP all-reduces gradients),
and only rank 0 validates, logs and writes checkpoints.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import random
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from . import console
from .batching import BatchStream
from .checkpoint import BEST, LATEST, checkpoint_dir, load_checkpoint, point_best, save_checkpoint
from .config import Config, to_dict, to_yaml
from .data.prepare import prepare
from .device import resolve_device, uses_bf16
from .errors import UserError
from .io import TEMP_SUFFIX, write_text
from .loss import batch_loss
from .model import build_model
from .optim import FUSED, Schedule, build_optimizer, step_optimizer
from .validate import validate
from .vocab import Vocab, build_cache, build_vocab, load_cache

# Config sections that fix what a checkpoint means; changing them makes a resume meaningless.
RESUME_CRITICAL = ("data", "vocab", "model")


@dataclass
class Ranks:
    """Where this process sits in a DDP job; `distributed` is False for a plain process (no process group)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    distributed: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0


@dataclass
class Progress:
    """Counters that survive a resume."""

    step: int = 0
    elapsed: float = 0.0  # training seconds before this process started
    history: list[dict[str, Any]] = field(default_factory=list)  # one dict per validation
    kept: list[dict[str, Any]] = field(default_factory=list)  # best-K checkpoints: {"step", "metric", "file"}
    bad_validations: int = 0
    skipped_updates: int = 0


def train(config: Config, resume: bool = False, stop_after: int | None = None) -> Path:
    """Train `config` into its run directory and return that directory.

    `stop_after` ends the process after that many updates in this invocation (tests use it to simulate
    an interruption).
    """
    ranks = _init_distributed(config)
    device = _pick_device(config, ranks)
    run_dir = config.run_dir
    if ranks.is_main:
        vocab = _prepare_inputs(config)
    _barrier(ranks)
    if not ranks.is_main:
        vocab = Vocab.load(config.data_dir / "vocab")

    latest = checkpoint_dir(run_dir) / LATEST
    state = None
    if latest.is_file():
        state = load_checkpoint(latest)
        _check_resumable(state, config, vocab, latest)
    elif resume:
        raise UserError(f"{run_dir}: --resume given but the run has no checkpoint ({latest})")

    _seed_everything(config.seed + ranks.rank)
    model = build_model(config.model, vocab.src_size, vocab.tgt_size).to(device)
    optimizer = build_optimizer(list(model.parameters()), config.train)
    schedule = Schedule(optimizer, config.train)
    stream = BatchStream(
        load_cache(config.data_dir / "vocab", "train"),
        config.train.batch_type,
        config.train.batch_size,
        config.train.max_len,
        config.train.bucket_pool,
        config.seed,
        ranks.rank,
        ranks.world_size,
        pin=device.type == "cuda",
    )
    if len(stream) == 0:
        raise UserError(
            f"{config.data_dir}: no training pair fits train.max_len={config.train.max_len} "
            "and the batch size; raise train.max_len or train.batch_size"
        )
    progress = Progress()
    if state is not None:
        progress = _restore(state, model, optimizer, schedule, stream, ranks)
    if ranks.is_main:
        _init_run_dir(run_dir, config, vocab, progress.step)
        ddp = f", DDP with world size {ranks.world_size} ({dist.get_backend()})" if ranks.distributed else ""
        console.info(
            f"{'resuming' if state else 'training'} {run_dir} at step {progress.step} on {device}{ddp} "
            f"({sum(p.numel() for p in model.parameters()):,} parameters, {len(stream)} batches/epoch)"
        )

    trainer = _Loop(config, model, optimizer, schedule, stream, progress, vocab, device, ranks, run_dir)
    trainer.run(stop_after)
    if ranks.distributed:
        del trainer  # DDP's reducer holds the process group: let it go first
        _shutdown_distributed()
    return run_dir


# ----------------------------------------------------------------------------------------------------------
# set-up


def _init_distributed(config: Config) -> Ranks:
    """Join the process group a launcher (torchrun) describes in the environment (WORLD_SIZE, RANK, ...),
    even a group of one process: `torchrun --nproc_per_node=1` runs the same DDP code as a larger job."""
    if "WORLD_SIZE" not in os.environ:
        return Ranks()
    ranks = Ranks(
        int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0")), True
    )
    if not dist.is_initialized():
        use_cuda = config.train.device != "cpu" and torch.cuda.is_available()
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return ranks


def _shutdown_distributed() -> None:
    """End a DDP job cleanly: every rank leaves the group together, with nothing in flight.

    Only after a run that finished on every rank: after an error or a signal, a rank that waited here for
    the others could wait forever, so the process just exits and torchrun stops the rest.
    """
    gc.collect()  # the DDP wrapper and its reducer, which hold the group, must be gone before it is
    dist.barrier()
    dist.destroy_process_group()


def _barrier(ranks: Ranks) -> None:
    if ranks.distributed:
        dist.barrier()


def _pick_device(config: Config, ranks: Ranks) -> torch.device:
    device = resolve_device(config.train.device, "train.device", ranks.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def _prepare_inputs(config: Config) -> Vocab:
    """Data, vocabulary and token cache: each step does no work when already up to date."""
    prepare(config)
    vocab = build_vocab(config)
    build_cache(config, vocab)
    return vocab


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _init_run_dir(run_dir: Path, config: Config, vocab: Vocab, step: int) -> None:
    """Resolved config and a private copy of the vocabulary, so the run directory is self-contained.

    Temporary files of checkpoint writes killed half way (SIGKILL, power loss) are removed here.
    """
    checkpoint_dir(run_dir).mkdir(parents=True, exist_ok=True)
    for stale in checkpoint_dir(run_dir).glob(f".*{TEMP_SUFFIX}"):
        stale.unlink(missing_ok=True)
    write_text(run_dir / "config.yaml", to_yaml(config))
    target = run_dir / "vocab"
    if not target.is_dir() or Vocab.load(target).fingerprint() != vocab.fingerprint():
        shutil.rmtree(target, ignore_errors=True)
        vocab.copy_to(target)
    _truncate_metrics(run_dir / "metrics.jsonl", step)


def _truncate_metrics(path: Path, step: int) -> None:
    """On resume, forget records logged after the checkpoint: they will be logged again."""
    if not path.is_file():
        return
    kept = [json.dumps(record) for record in _records(path) if record.get("step", 0) <= step]
    write_text(path, "".join(line + "\n" for line in kept))


def _records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of `path`; a line torn by a crash while it was appended is skipped."""
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


# ----------------------------------------------------------------------------------------------------------
# checkpoints and resume


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _check_resumable(state: dict, config: Config, vocab: Vocab, path: Path) -> None:
    if state.get("vocab_fingerprint") != vocab.fingerprint():
        raise UserError(
            f"{path}: cannot resume: the vocabulary changed since this checkpoint was written "
            "(train into a new run directory)"
        )
    old = _flatten({k: state["config"][k] for k in RESUME_CRITICAL})
    new = _flatten({k: to_dict(config)[k] for k in RESUME_CRITICAL})
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if changed:
        first = changed[0]
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        raise UserError(
            f"{path}: cannot resume: config changed: {first} was {old.get(first)!r}, now "
            f"{new.get(first)!r}{more} (train into a new run directory)"
        )


def _rng_state() -> dict[str, Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [kind, keys.tolist(), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _restore(
    state: dict, model, optimizer, schedule: Schedule, stream: BatchStream, ranks: Ranks
) -> Progress:
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    if len(state["data"]) != ranks.world_size:
        raise UserError(f"cannot resume a run of {len(state['data'])} processes with {ranks.world_size}")
    stream.load_state_dict(state["data"][ranks.rank])
    _set_rng_state(state["rng"][ranks.rank])
    return Progress(**state["progress"])


# ----------------------------------------------------------------------------------------------------------
# the loop


class _Loop:
    def __init__(
        self,
        config: Config,
        model,
        optimizer,
        schedule: Schedule,
        stream: BatchStream,
        progress: Progress,
        vocab: Vocab,
        device: torch.device,
        ranks: Ranks,
        run_dir: Path,
    ) -> None:
        self.config, self.cfg = config, config.train
        self.model, self.optimizer, self.schedule, self.stream = model, optimizer, schedule, stream
        self.progress, self.vocab, self.device, self.ranks, self.run_dir = (
            progress,
            vocab,
            device,
            ranks,
            run_dir,
        )
        self.fused = self.cfg.optimizer in FUSED
        self.bf16 = uses_bf16(self.cfg.precision, device)
        model.compile_attention(self.cfg.compile)
        self.net = model
        if ranks.distributed:
            ids = [device.index] if device.type == "cuda" else None
            self.net = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
        self.stop_signal: int | None = None
        self.started = time.monotonic()
        self.tensorboard = _tensorboard_writer(run_dir) if ranks.is_main else None

    # -- helpers ----------------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return self.progress.elapsed + time.monotonic() - self.started

    def log(self, record: dict[str, Any]) -> None:
        if not self.ranks.is_main:
            return
        record = {"step": self.progress.step, "time": round(self.elapsed(), 2), **record}
        with open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.tensorboard is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float):
                    self.tensorboard.add_scalar(key, value, self.progress.step)
        line = " ".join(f"{k}={_fmt(v)}" for k, v in record.items())
        with open(self.run_dir / "train.log", "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        if self.bar.disable:
            console.info(line)

    def out_of_budget(self) -> str | None:
        cfg, step = self.cfg, self.progress.step
        if cfg.max_steps and step >= cfg.max_steps:
            return f"reached train.max_steps={cfg.max_steps}"
        if cfg.max_epochs and self.stream.epoch >= cfg.max_epochs:
            return f"reached train.max_epochs={cfg.max_epochs}"
        if cfg.max_minutes and step % cfg.log_every == 0 and self._time_up():
            return f"reached train.max_minutes={cfg.max_minutes}"
        return None

    def _time_up(self) -> bool:
        """Wall-clock budget, checked at log intervals; under DDP rank 0's clock decides for all."""
        up = [self.elapsed() >= self.cfg.max_minutes * 60]
        if self.ranks.distributed:
            dist.broadcast_object_list(up, src=0)
        return up[0]

    # -- one update -------------------------------------------------------------------------------------

    def update(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """One guarded update; returns (summed token loss, bad flag) as device tensors (no sync)."""
        self.net.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = batch_loss(self.net, batch, self.bf16, self.cfg.label_smoothing)
        (loss_sum / batch.n_tokens).backward()
        max_norm = self.cfg.clip_norm if self.cfg.clip_norm > 0 else math.inf
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        bad = (~(torch.isfinite(loss_sum) & torch.isfinite(norm))).float()
        step_optimizer(self.optimizer, bad, self.fused)
        return loss_sum.detach(), bad

    # -- main loop --------------------------------------------------------------------------------------

    def run(self, stop_after: int | None) -> None:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        self.bar = console.progress(
            total=self.cfg.max_steps or None,
            initial=self.progress.step,
            unit="step",
            disable=None if self.ranks.is_main else True,
        )
        try:
            self._run(stop_after)
        finally:
            self.bar.close()
            if self.tensorboard is not None:
                self.tensorboard.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run(self, stop_after: int | None) -> None:
        cfg, progress = self.cfg, self.progress
        window_loss = torch.zeros((), device=self.device)
        window_tokens = torch.zeros((), device=self.device)  # target tokens of the updates not skipped
        bad_total = torch.zeros((), device=self.device)
        bad_run = torch.zeros((), device=self.device)  # consecutive non-finite updates
        tokens = padded = real = 0
        window_start = time.monotonic()
        reason = self.out_of_budget()
        for updates_here, batch in enumerate(self.stream, start=1):
            if reason:
                break
            rate = self.schedule.set_step(progress.step)
            loss_sum, bad = self.update(batch.to(self.device))
            window_loss += loss_sum * (1 - bad)
            window_tokens += batch.n_tokens * (1 - bad)
            bad_total += bad
            bad_run = (bad_run + bad) * bad
            tokens += batch.n_tokens
            real += batch.n_tokens + int(batch.src_lengths.sum())
            padded += batch.n_padded
            progress.step += 1
            self.bar.update(1)

            if progress.step % cfg.log_every == 0:  # the only host-device synchronisation point
                skipped = int(bad_total.item())
                seconds = time.monotonic() - window_start
                loss = window_loss.item() / max(window_tokens.item(), 1.0)
                progress.skipped_updates += skipped
                self.log(
                    {
                        "loss": loss,
                        "ppl": math.exp(min(loss, 50)),
                        "lr": rate,
                        "tokens_per_s": tokens / max(seconds, 1e-9),
                        "padding": 1 - real / max(padded, 1),
                        "epoch": self.stream.epoch,
                        "skipped": progress.skipped_updates,
                    }
                )
                self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{rate:.2e}", tok_s=f"{tokens / seconds:.0f}")
                if bad_run.item() >= cfg.max_nonfinite:
                    self.save_latest()
                    raise UserError(
                        f"{int(bad_run.item())} consecutive updates had a non-finite loss or "
                        "gradient; lower train.learning_rate or set train.clip_norm"
                    )
                window_loss.zero_()
                window_tokens.zero_()
                bad_total.zero_()
                tokens = padded = real = 0
                window_start = time.monotonic()

            reason = self.out_of_budget()
            if progress.step % cfg.validate_every == 0 or reason:
                if self.validate_and_save():
                    reason = f"early stopping: no improvement in {cfg.patience} validations"
            elif cfg.checkpoint_every and progress.step % cfg.checkpoint_every == 0:
                self.save_latest()
            stop = self._agreed_signal()
            if stop is not None:
                self.save_latest()
                console.warn(f"stopped by signal {stop}; checkpoint saved at step {progress.step}")
                raise KeyboardInterrupt(f"signal {stop}: checkpoint saved at step {progress.step}")
            if stop_after is not None and updates_here >= stop_after:
                return
        if reason and self.ranks.is_main:
            console.info(
                f"done: {reason} (step {progress.step}); best checkpoint: "
                f"{checkpoint_dir(self.run_dir) / BEST}"
            )

    def _on_signal(self, signum: int, frame) -> None:  # noqa: ARG002
        self.stop_signal = signum

    def _agreed_signal(self) -> int | None:
        """The signal that stops the run, the same on every rank, or None.

        A single process stops after the update in which a signal arrived. Under DDP the ranks must stop
        after the same update, or one would enter the checkpoint's gathers while another enters the next
        update's all-reduce and both would wait forever; a signal may reach them between two updates (or
        only one of them). So they compare their flags at log intervals, where the loop synchronises
        anyway, and all stop when any rank was signalled: at most train.log_every updates later.
        """
        if not self.ranks.distributed:
            return self.stop_signal
        if self.progress.step % self.cfg.log_every:
            return None
        flags: list[int | None] = [None] * self.ranks.world_size
        dist.all_gather_object(flags, self.stop_signal)
        return next((flag for flag in flags if flag is not None), None)

    # -- validation and checkpoints ---------------------------------------------------------------------

    def validate_and_save(self) -> bool:
        """Validate (rank 0), keep best-K checkpoints, write latest; return True when patience ran out.

        Collectives (the gathers of per-rank RNG and data positions, the broadcast of the decision)
        happen on every rank in the same order; only rank 0 validates and writes files.
        """
        ranks_state = self.rank_states()
        stop = [False]
        if self.ranks.is_main:
            stop[0] = self._validate_main(ranks_state)
        if self.ranks.distributed:
            dist.broadcast_object_list(stop, src=0)
        return stop[0]

    def _validate_main(self, ranks_state: dict[str, list]) -> bool:
        cfg, progress = self.cfg, self.progress
        result = validate(self.model, self.config, self.vocab, self.device, self.bf16)
        self.log({f"valid_{k}": v for k, v in result.items()})
        metric = result[cfg.early_stop_metric]
        higher = cfg.early_stop_metric == "bleu"
        previous = [h[cfg.early_stop_metric] for h in progress.history]
        improved = not previous or (metric > max(previous) if higher else metric < min(previous))
        progress.history.append({"step": progress.step, **result})
        progress.bad_validations = 0 if improved else progress.bad_validations + 1
        self.schedule.validated(metric, higher)
        entered, dropped = self._rank_best(metric, higher)
        payload = self.payload(ranks_state)  # built once: the best-K copy and latest.pt are the same state
        folder = checkpoint_dir(self.run_dir)
        if entered:
            save_checkpoint(folder / f"step-{progress.step}.pt", payload)
            point_best(folder, folder / f"step-{progress.kept[0]['step']}.pt")
        save_checkpoint(folder / LATEST, payload)
        for step in dropped:  # only once latest.pt no longer lists them
            (folder / f"step-{step}.pt").unlink(missing_ok=True)
        return bool(cfg.patience) and progress.bad_validations >= cfg.patience

    def _rank_best(self, metric: float, higher: bool) -> tuple[bool, list[int]]:
        """Put this step into the best-K list; return (it entered, steps that fell out)."""
        candidate = {"step": self.progress.step, "metric": metric}
        ranked = sorted(
            self.progress.kept + [candidate],
            key=lambda k: (-k["metric"] if higher else k["metric"], k["step"]),
        )
        survivors = ranked[: self.cfg.keep_best]
        dropped = [k["step"] for k in self.progress.kept if k not in survivors]
        self.progress.kept = survivors
        return candidate in survivors, dropped

    def rank_states(self) -> dict[str, list]:
        """RNG states and data positions of every rank (a collective under DDP)."""
        rng, data = _rng_state(), self.stream.state_dict()
        if not self.ranks.distributed:
            return {"rng": [rng], "data": [data]}
        return {"rng": self._gather(rng), "data": self._gather(data)}

    def payload(self, ranks_state: dict[str, list]) -> dict[str, Any]:
        return {
            "format": 1,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            **ranks_state,
            "progress": {**vars(self.progress), "elapsed": self.elapsed()},
            "step": self.progress.step,
            "config": to_dict(self.config),
            "vocab_fingerprint": self.vocab.fingerprint(),
        }

    def _gather(self, item: Any) -> list[Any]:
        items: list[Any] = [None] * self.ranks.world_size
        dist.all_gather_object(items, item)
        return items

    def save_latest(self) -> None:
        ranks_state = self.rank_states()  # every rank takes part in the gathers
        if self.ranks.is_main:
            save_checkpoint(checkpoint_dir(self.run_dir) / LATEST, self.payload(ranks_state))


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


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{run_dir}: no metrics.jsonl (is it a run directory?)")
    return _records(path)
