"""`seq2seq train`: the training loop a researcher can leave running for days.

The loop, in order: prepare data and vocabulary (idempotent), build or resume the run, then repeat
  batch -> forward (bf16 autocast on GPU) -> cross-entropy -> backward -> clip -> guarded update
with a log line every `log_every` updates, validation (dev loss, perplexity, BLEU) every `validate_every`
updates, best-K checkpoints, early stopping, and `latest.pt` for exact resume. What a checkpoint holds and
how a run resumes from it: state.py; what is logged and where: log.py.

The hot loop never waits for the GPU except at logging intervals: losses and the non-finite counters
stay on the device (log.Window), and fused optimisers skip non-finite updates by themselves (optim.py).
Under `torchrun`, each rank trains on its own shard of every epoch's batches (DDP all-reduces gradients),
and only rank 0 validates, logs and writes checkpoints (distributed.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import console
from ..config import Config, to_yaml
from ..data.prepare import prepare
from ..errors import UserError
from ..io import TEMP_SUFFIX, atomic_folder, exclusive, write_text
from ..model import Seq2Seq, build_model
from ..model.device import resolve_device, tf32_products, uses_bf16, uses_tf32
from ..runs.checkpoint import save_checkpoint
from ..runs.run_folder import (
    BEST,
    LATEST,
    VOCAB_DIR,
    checkpoint_dir,
    match_kept,
    record_sitting,
    save_validated,
)
from ..vocab.cache import build_cache, load_cache
from ..vocab.pieces import Vocab, build_vocab, vocab_dir
from . import distributed
from .batches import TrainingBatches
from .distributed import Ranks, StopSignals
from .graphs import CapturedUpdate, PaddedShapes, uses_cuda_graphs
from .log import MetricsLog, Window, WindowStats, perplexity, truncate_metrics
from .optim import Schedule, build_optimizer
from .state import (
    Progress,
    check_inputs,
    gather_rank_states,
    restore,
    resume_point,
    seed_everything,
    training_state,
)
from .step import Update
from .validate import dev_fingerprint, load_dev, validate


def train(config: Config, resume: bool = False, stop_after: int | None = None) -> Path:
    """Train `config` into its run directory and return that directory.

    `stop_after` ends the process after that many updates in this invocation (tests use it to simulate
    an interruption).
    """
    ranks = distributed.init_ranks(config.train.device)
    # One trainer per run, from before anything is written there; under DDP only rank 0 writes the run.
    with exclusive(config.run_dir) if ranks.is_main else contextlib.nullcontext():
        _train(config, ranks, resume, stop_after)
    return config.run_dir


def _train(config: Config, ranks: Ranks, resume: bool, stop_after: int | None) -> None:
    device = _pick_device(config, ranks)
    graphs = uses_cuda_graphs(config.train, device, ranks.is_distributed)
    run_dir = config.run_dir
    state = resume_point(config, required=resume)  # before anything is written
    if ranks.is_main:
        vocab = _prepare_inputs(config)
    ranks.barrier()
    if not ranks.is_main:
        vocab = Vocab.load(vocab_dir(config))
    dev = dev_fingerprint(config)
    if state is not None:
        check_inputs(state, config, vocab.fingerprint(), dev)

    seed_everything(config.seed + ranks.rank)
    model = build_model(config.model, vocab.src_size, vocab.tgt_size).to(device)
    optimizer = build_optimizer(list(model.parameters()), config.train, capturable=graphs)
    schedule = Schedule(optimizer, config.train)
    stream = _batch_stream(config, ranks, device, PaddedShapes.of(config.train) if graphs else None)
    progress = Progress() if state is None else restore(state, model, optimizer, schedule, stream, ranks)
    if ranks.is_main:
        _init_run_dir(run_dir, config, vocab, progress.step)
        match_kept(checkpoint_dir(run_dir), progress.kept)  # a fresh run's: none, whatever a kill left
        record_sitting(run_dir, device, progress.step)
        ddp = ranks.is_distributed and f", DDP with world size {ranks.world_size} ({distributed.backend()})"
        console.info(
            f"{'resuming' if state else 'training'} {run_dir} at step {progress.step} on {device}"
            f"{ddp or ''}{', updates in CUDA graphs' if graphs else ''} "
            f"({sum(p.numel() for p in model.parameters()):,} parameters, {len(stream)} batches/epoch)"
        )

    trainer = _Loop(config, model, optimizer, schedule, stream, progress, vocab, dev, device, ranks, graphs)
    trainer.run(stop_after)
    if ranks.is_distributed:
        del trainer  # DDP's reducer holds the process group: let it go first
        distributed.shutdown()


# ----------------------------------------------------------------------------------------------------------
# set-up


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


def _batch_stream(
    config: Config, ranks: Ranks, device: torch.device, pad_to: PaddedShapes | None
) -> TrainingBatches:
    """This rank's endless stream of training batches (padded to `pad_to`'s shapes for CUDA graphs)."""
    cfg = config.train
    stream = TrainingBatches(
        load_cache(vocab_dir(config), "train"),
        cfg.batch_type,
        cfg.batch_size,
        cfg.max_len,
        cfg.bucket_pool,
        config.seed,
        ranks.rank,
        ranks.world_size,
        pin=device.type == "cuda",
        concat_share=cfg.concat_share,
        concat_max=cfg.concat_max,
        pad_to=pad_to,
    )
    if len(stream) == 0:
        raise UserError(
            f"{config.data_dir}: no training pair fits train.max_len={cfg.max_len} "
            "and the batch size; raise train.max_len or train.batch_size"
        )
    return stream


def _init_run_dir(run_dir: Path, config: Config, vocab: Vocab, step: int) -> None:
    """Resolved config and a private copy of the vocabulary (written whole or not at all), so the run
    directory is self-contained.

    Temporary files of checkpoint and vocabulary writes killed half way (SIGKILL, power loss) are removed
    here.
    """
    checkpoint_dir(run_dir).mkdir(parents=True, exist_ok=True)
    for stale in checkpoint_dir(run_dir).glob(f".*{TEMP_SUFFIX}"):
        stale.unlink(missing_ok=True)
    for stale in run_dir.glob(f".{VOCAB_DIR}.*{TEMP_SUFFIX}"):
        shutil.rmtree(stale, ignore_errors=True)
    write_text(run_dir / "config.yaml", to_yaml(config))
    target = run_dir / VOCAB_DIR
    if not target.is_dir() or Vocab.load(target).fingerprint() != vocab.fingerprint():
        with atomic_folder(target, replace=True) as staging:
            vocab.copy_to(staging)
    truncate_metrics(run_dir, step)


# ----------------------------------------------------------------------------------------------------------
# the loop


@dataclass(eq=False)
class _Loop:
    config: Config
    model: Seq2Seq
    optimizer: torch.optim.Optimizer
    schedule: Schedule
    stream: TrainingBatches
    progress: Progress
    vocab: Vocab
    dev_fingerprint: str  # the dev set's text (validate.dev_fingerprint), recorded in checkpoints
    device: torch.device
    ranks: Ranks
    graphs: bool  # updates captured in CUDA graphs (graphs.py)

    def __post_init__(self) -> None:
        self.cfg = self.config.train
        self.run_dir = self.config.run_dir
        self.bf16 = uses_bf16(self.cfg.precision, self.device)
        self.model.compile_attention(self.cfg.compile)
        net: torch.nn.Module = self.model
        if self.ranks.is_distributed:
            ids = [self.device.index] if self.device.type == "cuda" else None
            net = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
        update = Update(
            self.model, net, self.optimizer, self.cfg, self.device, self.bf16, self.ranks.world_size
        )
        self.update = CapturedUpdate(update) if self.graphs else update
        self.window = Window(self.device, self.cfg.clip_norm, self.progress.bad_run)  # since the last log
        self.dev = load_dev(self.config) if self.ranks.is_main else None  # rank 0 validates
        self.started = time.monotonic()

    # -- main loop --------------------------------------------------------------------------------------

    def run(self, stop_after: int | None) -> None:
        """Train until a budget or early stopping ends the run, or `stop_after` updates in this process."""
        self.signals = StopSignals(self.ranks, every=self.cfg.log_every)
        self.metrics = MetricsLog(self.run_dir) if self.ranks.is_main else None
        self.bar = console.progress(
            total=self.cfg.max_steps or None,
            initial=self.progress.step,
            unit="step",
            disable=None if self.ranks.is_main else True,
        )
        tf32 = tf32_products(uses_tf32(self.cfg.precision, self.device))
        with self.signals, self.metrics or contextlib.nullcontext(), self.bar, tf32:
            reason = self._train(stop_after)
            if reason and self.ranks.is_main:
                best = checkpoint_dir(self.run_dir) / BEST
                console.info(f"done: {reason} (step {self.progress.step}); best checkpoint: {best}")

    def _train(self, stop_after: int | None) -> str | None:
        """Update, log, validate and checkpoint; return why training ended (None: after `stop_after`)."""
        cfg, progress = self.cfg, self.progress
        reason = self.out_of_budget() or self.out_of_patience()  # a run re-run after it ended stays ended
        for updates_here, batch in enumerate(self.stream, start=1):
            if reason:
                break
            rate = self.schedule.set_step(progress.step)
            loss_sum, bad, norm = self.update(batch)
            self.window.add(batch, loss_sum, bad, norm)
            progress.step += 1
            self.bar.update(1)
            if progress.step % cfg.log_every == 0:  # the only host-device synchronisation point
                self.log_window(self.window.take(), rate)
            reason = self.out_of_budget()
            if progress.step % cfg.validate_every == 0 or reason:
                self.validate_and_save()
                reason = reason or self.out_of_patience()
            elif cfg.checkpoint_every and progress.step % cfg.checkpoint_every == 0:
                self.save_latest()
            self.stop_on_signal()
            if stop_after is not None and updates_here >= stop_after:
                return None
        return reason

    # -- logging, budgets and signals -------------------------------------------------------------------

    def elapsed(self) -> float:
        """Training seconds of the whole run, earlier processes included."""
        return self.progress.elapsed + time.monotonic() - self.started

    def log(self, record: dict[str, Any]) -> None:
        """Rank 0: append `record` to the run's metrics; echo it when no progress bar shows."""
        if self.metrics is None:
            return
        line = self.metrics.write({"step": self.progress.step, "time": round(self.elapsed(), 2), **record})
        if self.bar.disable:
            console.info(line)

    def log_window(self, stats: WindowStats, rate: float) -> None:
        """Log the last `log_every` updates; stop the run after too many non-finite updates in a row."""
        self.progress.skipped_updates += stats.skipped
        self.log(
            {
                "loss": stats.loss,
                "ppl": perplexity(stats.loss),
                "lr": rate,
                "tokens_per_s": stats.tokens_per_s,
                "padding": stats.padding,
                "epoch": self.stream.epoch,
                "skipped": self.progress.skipped_updates,
                "grad_norm": stats.grad_norm,
                "clipped": stats.clipped,
            }
        )
        self.bar.set_postfix(
            loss=f"{stats.loss:.3f}",
            lr=f"{rate:.2e}",
            tok_s=f"{stats.tokens_per_s:.0f}",
            clipped=f"{stats.clipped:.0%}",
        )
        if stats.bad_run >= self.cfg.max_nonfinite:
            self.save_latest()
            raise UserError(
                f"{stats.bad_run} consecutive updates had a non-finite loss or "
                "gradient; lower train.learning_rate or set train.clip_norm"
            )

    def out_of_budget(self) -> str | None:
        cfg, step = self.cfg, self.progress.step
        if cfg.max_steps and step >= cfg.max_steps:
            return f"reached train.max_steps={cfg.max_steps}"
        if cfg.max_epochs and self.stream.epochs_done >= cfg.max_epochs:
            return f"reached train.max_epochs={cfg.max_epochs}"
        if cfg.max_minutes and step % cfg.log_every == 0 and self._time_up():
            return f"reached train.max_minutes={cfg.max_minutes}"
        return None

    def out_of_patience(self) -> str | None:
        """Early stopping: `patience` validations in a row without improvement (every rank holds rank 0's
        count: restored from the checkpoint, then sent with each validation's outcome)."""
        if self.cfg.patience and self.progress.bad_validations >= self.cfg.patience:
            return f"early stopping: no improvement in {self.cfg.patience} validations"
        return None

    def _time_up(self) -> bool:
        """Wall-clock budget, checked at log intervals; under DDP rank 0's clock decides for all."""
        return self.ranks.from_main(self.elapsed() >= self.cfg.max_minutes * 60)

    def stop_on_signal(self) -> None:
        """After SIGINT or SIGTERM (on any rank): save a checkpoint and end with KeyboardInterrupt."""
        stop = self.signals.agreed(self.progress.step)
        if stop is not None:
            self.save_latest()
            console.warn(f"stopped by signal {stop}; checkpoint saved at step {self.progress.step}")
            raise KeyboardInterrupt(f"signal {stop}: checkpoint saved at step {self.progress.step}")

    # -- validation and checkpoints ---------------------------------------------------------------------

    def validate_and_save(self) -> None:
        """Validate (rank 0), keep best-K checkpoints, write latest; then every rank takes rank 0's
        outcome: its early-stopping count and its schedule (a plateau lowers the rate of every rank, or
        the ranks would apply the same averaged gradients at different rates).

        Collectives (the gathers of per-rank RNG and data positions, the broadcast of the outcome)
        happen on every rank in the same order; only rank 0 validates and writes files.
        """
        rank_states = gather_rank_states(self.ranks, self.stream)
        if self.ranks.is_main:
            self._validate_main(rank_states)
        outcome = (self.progress.bad_validations, self.schedule.state_dict()) if self.ranks.is_main else None
        self.progress.bad_validations, schedule = self.ranks.from_main(outcome)
        self.schedule.load_state_dict(schedule)

    def _validate_main(self, rank_states: dict[str, list]) -> None:
        cfg, progress = self.cfg, self.progress
        result = validate(self.model, self.dev, self.config, self.vocab, self.device, self.bf16)
        self.log({f"valid_{k}": v for k, v in result.items()})
        entered, dropped = progress.validated(result, cfg.ranking_metric, cfg.keep_best)
        self.schedule.validated(result[cfg.ranking_metric])
        payload = self.checkpoint(rank_states)  # built once: the best-K copy and latest.pt are the same state
        save_validated(checkpoint_dir(self.run_dir), payload, progress.kept, entered, dropped)

    def save_latest(self) -> None:
        rank_states = gather_rank_states(self.ranks, self.stream)  # every rank takes part in the gathers
        if self.ranks.is_main:
            save_checkpoint(checkpoint_dir(self.run_dir) / LATEST, self.checkpoint(rank_states))

    def checkpoint(self, rank_states: dict[str, list]) -> dict[str, Any]:
        """The training state now; the counters include the updates skipped since the last log line."""
        skipped, bad_run = self.window.pending()
        progress = dataclasses.replace(
            self.progress, skipped_updates=self.progress.skipped_updates + skipped, bad_run=bad_run
        )
        return training_state(
            self.model,
            self.optimizer,
            self.schedule,
            rank_states,
            progress,
            self.elapsed(),
            self.config,
            self.vocab.fingerprint(),
            self.dev_fingerprint,
        )
