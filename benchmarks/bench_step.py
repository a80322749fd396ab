"""Micro-benchmark of our models alone: one training update and one beam-search step, on fixed shapes.

`benchmarks.bench` compares whole toolkits on a corpus; this isolates the model, so the effect of one change
(precision, torch.compile, a config key, the CPU) is measured without data loading, bucketing or output
lengths in the way. Every variant gets random ids of the same shapes: `--batch` sentences of `--src-len`
source and `--tgt-len` target tokens, vocabularies of `--vocab`. Beam search runs exactly `--tgt-len` steps
(min and max length both set to it), so its time per step is comparable across models. `--compile` adds
variants whose attention runs compiled (`train.compile` / `decode.compile`), training and search.

    python -m benchmarks.bench_step configs/small_rnnsearch.yaml configs/small_luong.yaml \\
        --precision fp32,bf16 --out benchmarks/results/step

writes benchmarks/results/step.json and step.md (one row per config x precision x compile, under the CPU
model, its flags and whether other processes competed). With `--profile` the torch.profiler table of the
heaviest operators is printed for every variant.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import torch

from seq2seq_attn.config import Config, load_config
from seq2seq_attn.decoding.search import beam_search
from seq2seq_attn.io import write_json, write_text
from seq2seq_attn.model import build_model
from seq2seq_attn.model.device import bf16_autocast
from seq2seq_attn.training.optim import build_optimizer
from seq2seq_attn.vocab.pieces import BOS_ID, EOS_ID

from .machine import (
    LoadWatch,
    describe,
    load_warning,
    own_cpu_seconds,
    provenance_warnings,
    span_warning,
    summary,
)
from .ours_decode import multiply_adds

PROG = f"python -m {__spec__.name}"  # how it is run, for --help and the report
FIRST_ID = EOS_ID + 1  # random ids avoid the special ones
PEAK_SIZE, PEAK_REPS = 2048, 10  # `--peak`: square fp32 products of this size, this many times


@dataclasses.dataclass(frozen=True)
class Shapes:
    batch: int
    src_len: int
    tgt_len: int
    vocab: int


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("configs", nargs="+", type=Path, help="experiment configs whose `model` section is measured")
    add("--set", action="append", default=[], dest="overrides", help="config override KEY=VALUE, for all")
    add("--batch", type=int, default=64, help="sentences per batch")
    add("--src-len", type=int, default=30, help="source tokens per sentence (EOS included)")
    add(
        "--tgt-len", type=int, default=30, help="target tokens per sentence; beam search runs this many steps"
    )
    add("--vocab", type=int, default=4000, help="source and target vocabulary size")
    add("--beam", type=int, default=5, help="beam width (0: no search measurement)")
    add("--warmup", type=int, default=3, help="untimed repetitions first (compilation happens there)")
    add("--reps", type=int, default=10, help="timed training updates (search: a third as many batches)")
    add("--precision", default="fp32", help="comma-separated: fp32, bf16 (autocast)")
    add("--compile", action="store_true", help="also measure every variant with compiled attention")
    add("--device", default="cpu", help="cpu or cuda")
    add("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    add("--profile", action="store_true", help="print the profiler's top operators for every variant")
    add(
        "--peak",
        action="store_true",
        help="also measure the CPU's fp32 matrix-product peak (torch.mm of PEAK_SIZE, 1 and 2 threads)",
    )
    add("--out", type=Path, help="write OUT.json and OUT.md")
    args = parser.parse_args(argv)
    precisions = args.precision.split(",")
    if set(precisions) - {"fp32", "bf16"}:
        parser.error(f"--precision: expected fp32 and/or bf16, got {args.precision!r}")
    if min(args.batch, args.src_len, args.tgt_len, args.reps) < 1 or args.vocab <= FIRST_ID or args.beam < 0:
        parser.error("--batch, --src-len, --tgt-len and --reps must be >= 1, --vocab > 4, --beam >= 0")
    args.precisions = precisions
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    shapes = Shapes(args.batch, args.src_len, args.tgt_len, args.vocab)
    machine = describe(device.type, args.threads)
    own_at_start, watch = own_cpu_seconds(), LoadWatch()
    rows = []
    for config_path in args.configs:
        for precision in args.precisions:
            for compiled in (False, True) if args.compile else (False,):
                name = f"{config_path.stem} {precision}{' compiled' if compiled else ''}"
                print(f"bench_step: {name}", file=sys.stderr, flush=True)
                config = load_config(config_path, args.overrides)
                row = measure(config, shapes, precision, compiled, device, args)
                rows.append({"config": str(config_path), "precision": precision, "compile": compiled, **row})
    others = watch.stop(own_seconds=own_cpu_seconds() - own_at_start)
    machine |= {"others_cores": others, "peak_load": round(watch.peak_load, 2)}
    if args.peak and device.type == "cpu":
        machine["matmul_peak_gflop_per_s"] = {threads: matmul_peak(threads) for threads in (1, 2)}
    found = (load_warning(machine["load_before"]), span_warning("the measurements", others))
    warnings = [warning for warning in found if warning] + provenance_warnings(machine)
    result = {
        "command": f"{PROG} " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine,
        "shapes": dataclasses.asdict(shapes),
        "rows": rows,
        "warnings": warnings,
    }
    for warning in warnings:
        print(f"bench_step: warning: {warning}", file=sys.stderr)
    text = markdown(result)
    print(text)
    if args.out:
        write_json(args.out.with_suffix(".json"), result)
        write_text(args.out.with_suffix(".md"), text)


def measure(config: Config, shapes: Shapes, precision: str, compiled: bool, device, args) -> dict:
    """Train-update and beam-step timings of one variant (fresh model, same seed and data), with the
    config's optimiser as training builds it."""
    torch.manual_seed(0)
    model = build_model(config.model, shapes.vocab, shapes.vocab).to(device)
    parameters = sum(p.numel() for p in model.parameters())
    model.compile_attention(compiled)
    optimizer = build_optimizer(list(model.parameters()), config.train)
    src = torch.randint(FIRST_ID, shapes.vocab, (shapes.batch, shapes.src_len), device=device)
    src[:, -1] = EOS_ID
    lengths = torch.full((shapes.batch,), shapes.src_len, device=device)
    tgt = torch.randint(FIRST_ID, shapes.vocab, (shapes.batch, shapes.tgt_len + 1), device=device)
    tgt[:, 0] = BOS_ID
    autocast = bf16_autocast(device.type, precision == "bf16")
    reset_peak_memory(device)

    def update() -> None:
        with autocast:
            loss = model(src, lengths, tgt[:, :-1], tgt[:, 1:])  # the summed token loss, as in training
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    warmup_s = timed(update, args.warmup, device)
    train_s = timed(update, args.reps, device) / args.reps
    row: dict[str, Any] = {
        "parameters": parameters,
        "warmup_s": round(warmup_s, 2),
        "train_ms": round(train_s * 1000, 2),
        "train_tokens_per_s": round(shapes.batch * shapes.tgt_len / train_s),
        "train_sentences_per_s": round(shapes.batch / train_s, 1),
        "train_peak_mib": peak_memory_mib(device),
    }
    if args.profile:
        print(profile_table(update, device), file=sys.stderr)
    if args.beam:
        settings = dataclasses.replace(
            config.decode,
            beam_size=args.beam,
            nbest=1,
            max_len_a=0.0,
            max_len_b=shapes.tgt_len,
            min_len=shapes.tgt_len,
        )
        model.eval()
        optimizer.zero_grad(set_to_none=True)  # the search's peak without the training's gradients
        reset_peak_memory(device)

        def search() -> None:
            with autocast:
                beam_search(model, src, lengths, settings)

        timed(search, 1, device)
        batches = max(1, args.reps // 3)
        search_s = timed(search, batches, device) / batches
        _, macs = multiply_adds(search)  # the matrix products', counted by torch's FlopCounterMode
        steps = shapes.tgt_len + 1  # every output piece, and EOS
        row |= {
            "beam_ms_per_step": round(search_s / steps * 1000, 2),
            "beam_sentences_per_s": round(shapes.batch / search_s, 1),
            "beam_macs_per_step": round(macs / shapes.batch / steps),  # one sentence's step, all its beams
            "beam_matmul_gflop_per_s": round(2 * macs / search_s / 1e9, 3),
            "beam_peak_mib": peak_memory_mib(device),
        }
        if args.profile:
            print(profile_table(search, device), file=sys.stderr)
    return row


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mib(device: torch.device) -> float | None:
    """The most GPU memory torch's allocator held since the last reset (weights, optimiser state and
    activations together), in MiB; None on a CPU, where torch keeps no such count."""
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)


def matmul_peak(threads: int) -> float:
    """GFLOP/s of a large fp32 `torch.mm` on `threads` threads: the CPU's measured peak for the products
    that dominate a step (flags alone mislead: a first-generation Zen core has half the FMA width of
    later ones)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(PEAK_SIZE, PEAK_SIZE), torch.randn(PEAK_SIZE, PEAK_SIZE)
        torch.mm(a, b)
        seconds = timed(lambda: torch.mm(a, b), PEAK_REPS, torch.device("cpu"))
    finally:
        torch.set_num_threads(before)
    return round(2 * PEAK_SIZE**3 * PEAK_REPS / seconds / 1e9, 1)


def timed(work, reps: int, device: torch.device) -> float:
    """Seconds for `reps` calls of `work`, the device's queue drained at both ends."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(reps):
        work()
    sync()
    return time.perf_counter() - start


def profile_table(work, device: torch.device) -> str:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof, contextlib.redirect_stdout(sys.stderr):
        work()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)


def markdown(result: dict[str, Any]) -> str:
    s, m = result["shapes"], result["machine"]
    lines = [
        "# Model micro-benchmark (`benchmarks/bench_step.py`)",
        "",
        f"    {result['command']}",
        "",
        f"- machine: {summary(m)}; device {m['device']}; {m['date']}",
        f"- load: 1-minute load average {m['load_before']:.2f} before, at most {m['peak_load']:.2f} during "
        f"(ours included); other processes kept {_cores(m['others_cores'])} cores busy meanwhile",
        *(f"- **warning**: {warning}" for warning in result["warnings"]),
        f"- shapes: batch {s['batch']}, source {s['src_len']}, target {s['tgt_len']} tokens, "
        f"vocabularies {s['vocab']}; random ids; beam search runs exactly {s['tgt_len']} steps + EOS",
        *(
            f"- fp32 matrix-product peak (`torch.mm`, {PEAK_SIZE} x {PEAK_SIZE}): "
            + ", ".join(f"{gflops} GFLOP/s on {threads} thread(s)" for threads, gflops in peak.items())
            for peak in [m.get("matmul_peak_gflop_per_s")]
            if peak
        ),
        "- beam matmul GFLOP/s: the search's matrix-product operations (torch's FlopCounterMode) per second; "
        "multiply-adds per step: those of one sentence's step (all its beams, the encoder spread over the "
        "steps), as `benchmarks.bench` reports them for every toolkit's search",
        "",
        "- peak MiB: the most GPU memory torch's allocator held (CUDA only), training with the optimiser's "
        "state, and the search",
        "",
        "| config | precision | compile | parameters | warm-up (s) | train update (ms) | train target tok/s "
        "| train sentences/s | train peak MiB | beam step (ms) | beam sentences/s "
        "| beam multiply-adds per step | beam matmul GFLOP/s | beam peak MiB |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {Path(r['config']).stem} | {r['precision']} | {'yes' if r['compile'] else 'no'} "
            f"| {r['parameters']:,} | {r['warmup_s']} | {r['train_ms']} | {r['train_tokens_per_s']:,} "
            f"| {r['train_sentences_per_s']} | {_cell(r['train_peak_mib'])} "
            f"| {r.get('beam_ms_per_step', '-')} | {r.get('beam_sentences_per_s', '-')} "
            f"| {_cell(r.get('beam_macs_per_step'), ',')} "
            f"| {r.get('beam_matmul_gflop_per_s', '-')} | {_cell(r.get('beam_peak_mib'))} |"
        )
    return "\n".join(lines) + "\n"


def _cell(value: float | None, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def _cores(value: float | None) -> str:
    return "an unknown number of" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
