"""Micro-benchmark of our models alone: one training update and one beam-search step, on fixed shapes.

`benchmarks.bench` compares whole toolkits on a corpus; this isolates the model, so the effect of one change
(precision, torch.compile, CUDA graphs, the batch size, a config key, the CPU) is measured without data
loading, bucketing or output lengths in the way. Every variant gets random ids of the same shapes: batches
of `--batch` sentences (or as many as `--tokens` padded positions hold) of `--src-len` source and
`--tgt-len` target tokens, vocabularies of `--vocab`. The training update is the one `seq2seq train` runs
(training/step.py: the config's optimiser, gradient clipping at `train.clip_norm`, the learning-rate
schedule stepping from update 0), with `--cuda-graphs on` replayed from CUDA graphs as `train.cuda_graphs`
does (its batch padded as training pads it). Beam search runs exactly `--tgt-len` steps (min and max length
both set to it), so its time per step is comparable across models; with `--cuda-graphs on` its decoder step
is replayed from CUDA graphs as `decode.cuda_graphs` does (decoding/graphs.py). `--compile` adds variants
whose attention runs compiled (`train.compile` / `decode.compile`), training and search.

    python -m benchmarks.bench_step configs/small_rnnsearch.yaml configs/small_luong.yaml \\
        --precision fp32,bf16 --out benchmarks/results/step

writes benchmarks/results/step.json and step.md (one row per config x batch x precision x compile x
graphs, under the CPU model, its flags, the GPU and its driver, and whether other processes competed).
With `--profile` one update and one search of every variant run under torch.profiler: the kernels per
update and per search step, the host's launch calls, the GPU's busy fraction and the kernels that take
the most time (on a CPU: the ATen operator calls and those with the most time of their own), into the
report.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import functools
import itertools
import json
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seq2seq_attn.config import Config, load_config
from seq2seq_attn.decoding.graphs import StepGraphs
from seq2seq_attn.decoding.search import beam_search
from seq2seq_attn.io import write_json, write_text
from seq2seq_attn.model import build_model
from seq2seq_attn.model.device import bf16_autocast, tf32_products, uses_tf32
from seq2seq_attn.training.graphs import CapturedUpdate, PaddedShapes
from seq2seq_attn.training.optim import Schedule, build_optimizer
from seq2seq_attn.training.step import Update
from seq2seq_attn.vocab.batching import Batch, collate
from seq2seq_attn.vocab.pieces import EOS_ID

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


PRECISIONS = ("fp32", "tf32", "bf16")
GRAPHS = ("off", "on")
TOP_KERNELS = 10  # `--profile`: the kernels (CPU: operators) listed, by time
GPU_ACTIVITIES = ("kernel", "gpu_memcpy", "gpu_memset")  # what a GPU runs, in a torch.profiler trace


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("configs", nargs="+", type=Path, help="experiment configs: their `model` and `train` sections")
    add("--set", action="append", default=[], dest="overrides", help="config override KEY=VALUE, for all")
    add("--batch", default="64", help="sentences per batch; comma-separated for several")
    add(
        "--tokens",
        default="",
        help="also batches of this many padded source + target positions (train.batch_type tokens), each "
        "as many sentences as it holds at these lengths; comma-separated",
    )
    add("--src-len", type=int, default=30, help="source tokens per sentence (EOS included)")
    add(
        "--tgt-len", type=int, default=30, help="target tokens per sentence; beam search runs this many steps"
    )
    add("--vocab", type=int, default=4000, help="source and target vocabulary size")
    add("--beam", type=int, default=5, help="beam width (0: no search measurement)")
    add(
        "--warmup",
        type=int,
        default=3,
        help="untimed repetitions first (compilation, and with graphs the capture, happen there)",
    )
    add("--reps", type=int, default=10, help="timed training updates (search: a third as many batches)")
    add("--precision", default="fp32", help=f"comma-separated: {', '.join(PRECISIONS)} (bf16: autocast)")
    add("--compile", action="store_true", help="also measure every variant with compiled attention")
    add(
        "--cuda-graphs",
        default="off",
        help="comma-separated: off, on (the update and the search step replayed from CUDA graphs, "
        "train.cuda_graphs and decode.cuda_graphs; CUDA only)",
    )
    add("--device", default="cpu", help="cpu or cuda")
    add("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    add(
        "--profile",
        action="store_true",
        help="profile one update and one search of every variant: kernels per update and per search "
        "step, launch calls, the GPU's busy fraction, the top kernels by time (CPU: ATen operators)",
    )
    add(
        "--peak",
        action="store_true",
        help="also measure the CPU's fp32 matrix-product peak (torch.mm of PEAK_SIZE, 1 and 2 threads)",
    )
    add("--out", type=Path, help="write OUT.json and OUT.md")
    args = parser.parse_args(argv)
    precisions, graphs = args.precision.split(","), args.cuda_graphs.split(",")
    if set(precisions) - set(PRECISIONS):
        parser.error(f"--precision: expected some of {', '.join(PRECISIONS)}, got {args.precision!r}")
    if set(graphs) - set(GRAPHS):
        parser.error(f"--cuda-graphs: expected off and/or on, got {args.cuda_graphs!r}")
    if "on" in graphs and args.device != "cuda":
        parser.error("--cuda-graphs on: CUDA graphs need --device cuda")
    try:
        batches = [(int(n), None) for n in args.batch.split(",") if n]
        budgets = [int(n) for n in args.tokens.split(",") if n]
    except ValueError:
        parser.error(f"--batch and --tokens: comma-separated integers, got {args.batch!r}, {args.tokens!r}")
    batches += [(budget // (args.src_len + args.tgt_len), budget) for budget in budgets]
    sizes = [sentences for sentences, _ in batches]
    if min(sizes + [args.src_len, args.tgt_len, args.reps]) < 1 or args.vocab <= FIRST_ID or args.beam < 0:
        parser.error(
            "--batch, --src-len, --tgt-len and --reps must be >= 1 (and --tokens hold a sentence), "
            "--vocab > 4, --beam >= 0"
        )
    args.precisions, args.graphs, args.batches = precisions, [g == "on" for g in graphs], batches
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    machine = describe(device.type, args.threads)
    if device.type == "cuda":
        machine["gpu_driver"] = gpu_driver()
    own_at_start, watch = own_cpu_seconds(), LoadWatch()
    rows = []
    variants = itertools.product(
        args.configs, args.batches, args.precisions, (False, True) if args.compile else (False,), args.graphs
    )
    for config_path, (sentences, tokens), precision, compiled, graphs in variants:
        name = f"{config_path.stem} batch {sentences} {precision}{' compiled' if compiled else ''}"
        print(f"bench_step: {name}{' graphs' if graphs else ''}", file=sys.stderr, flush=True)
        config = load_config(config_path, args.overrides)
        shapes = Shapes(sentences, args.src_len, args.tgt_len, args.vocab)
        try:
            row = measure(config, shapes, precision, compiled, device, args, graphs)
        except Exception as err:  # reported in its row; the other variants still run
            traceback.print_exc()
            row = {"error": f"{type(err).__name__}: {' '.join(str(err).split())}"[:300]}
        rows.append(
            {
                "config": str(config_path),
                "batch": sentences,
                "tokens": tokens,
                "precision": precision,
                "compile": compiled,
                "cuda_graphs": graphs,
                **row,
            }
        )
    others = watch.stop(own_seconds=own_cpu_seconds() - own_at_start)
    machine |= {"others_cores": others, "peak_load": round(watch.peak_load, 2)}
    if args.peak and device.type == "cpu":
        machine["matmul_peak_gflop_per_s"] = {threads: matmul_peak(threads) for threads in (1, 2)}
    found = (load_warning(machine["load_before"]), span_warning("the measurements", others))
    warnings = [warning for warning in found if warning] + provenance_warnings(machine)
    result = {
        "command": f"{PROG} " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine,
        "shapes": {
            "batches": [{"sentences": sentences, "tokens": tokens} for sentences, tokens in args.batches],
            "src_len": args.src_len,
            "tgt_len": args.tgt_len,
            "vocab": args.vocab,
        },
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
    if any("error" in row for row in rows):
        sys.exit(f"bench_step: {sum('error' in row for row in rows)} variant(s) failed (their rows say why)")


def measure(
    config: Config, shapes: Shapes, precision: str, compiled: bool, device, args, graphs: bool = False
) -> dict:
    """Train-update and beam-step timings of one variant (fresh model, same seed and data), the update
    as training runs it (training/step.py), replayed from CUDA graphs when `graphs`."""
    torch.manual_seed(0)
    model = build_model(config.model, shapes.vocab, shapes.vocab).to(device)
    parameters = sum(p.numel() for p in model.parameters())
    model.compile_attention(compiled)
    optimizer = build_optimizer(list(model.parameters()), config.train, capturable=graphs)
    schedule = Schedule(optimizer, config.train)
    bf16 = precision == "bf16"
    update = Update(model, model, optimizer, config.train, device, bf16)
    update = CapturedUpdate(update) if graphs else update
    sides = random_sides(shapes)
    batch = collate(*sides, pin=device.type == "cuda", pad_to=PaddedShapes(shapes.batch) if graphs else None)
    steps = itertools.count()

    def train_update() -> None:
        schedule.set_step(next(steps))
        update(batch)

    row: dict[str, Any] = {"parameters": parameters}
    with tf32_products(uses_tf32(precision, device)):
        reset_peak_memory(device)
        warmup_s = timed(train_update, args.warmup, device)
        train_s = timed(train_update, args.reps, device) / args.reps
        row |= {
            "padded_shape": list(batch.src.shape) + [batch.tgt_in.size(1)],
            "warmup_s": round(warmup_s, 2),
            "train_ms": round(train_s * 1000, 2),
            "train_tokens_per_s": round(shapes.batch * shapes.tgt_len / train_s),
            "train_sentences_per_s": round(shapes.batch / train_s, 1),
            "train_peak_mib": peak_memory_mib(device),
        }
        if args.profile:
            row["train_profile"] = profile(train_update, device, units=1)
        if args.beam:
            model.eval()
            optimizer.zero_grad(set_to_none=True)  # the search's peak without the training's gradients
            row |= measure_search(
                model, collate(*sides).to(device), config, shapes, bf16, graphs, device, args
            )
    return row


def random_sides(shapes: Shapes) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """`shapes.batch` random sentence pairs whose batch is `shapes.src_len` x `shapes.tgt_len` (EOS and
    BOS added by `collate`), ids avoiding the special ones."""
    rng = np.random.default_rng(0)
    side = lambda length: [rng.integers(FIRST_ID, shapes.vocab, length - 1) for _ in range(shapes.batch)]  # noqa: E731
    return side(shapes.src_len), side(shapes.tgt_len)


def measure_search(
    model, batch: Batch, config: Config, shapes: Shapes, bf16: bool, graphs: bool, device: torch.device, args
) -> dict[str, Any]:
    """Beam search over the batch's sources, exactly `shapes.tgt_len` steps and EOS; with `graphs` its
    decoder step replayed from CUDA graphs, captured by the first (untimed) search."""
    settings = dataclasses.replace(
        config.decode,
        beam_size=args.beam,
        nbest=1,
        max_len_a=0.0,
        max_len_b=shapes.tgt_len,
        min_len=shapes.tgt_len,
    )
    reset_peak_memory(device)

    def run(searched) -> None:
        with bf16_autocast(device.type, bf16):
            beam_search(searched, batch.src, batch.src_lengths, settings)

    graphed = StepGraphs(model) if graphs else model  # one for every search: its graphs are reused
    search = functools.partial(run, graphed)
    timed(search, 1, device)
    batches = max(1, args.reps // 3)
    search_s = timed(search, batches, device) / batches
    # the matrix products', counted by torch's FlopCounterMode, which sees no operator of a replayed graph
    _, macs = multiply_adds(functools.partial(run, model))
    steps = shapes.tgt_len + 1  # every output piece, and EOS
    row = {
        "beam_ms_per_step": round(search_s / steps * 1000, 2),
        "beam_sentences_per_s": round(shapes.batch / search_s, 1),
        "beam_macs_per_step": round(macs / shapes.batch / steps),  # one sentence's step, all its beams
        "beam_matmul_gflop_per_s": round(2 * macs / search_s / 1e9, 3),
        "beam_peak_mib": peak_memory_mib(device),
    }
    if graphs:
        row["beam_graphs"] = len(graphed)  # the step shapes captured: the first step and the rest
    if args.profile:
        row["beam_profile"] = profile(search, device, units=steps)
    return row


def gpu_driver() -> str | None:
    """The NVIDIA driver's version, as nvidia-smi reports it (None without one)."""
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        lines = subprocess.run(query, capture_output=True, text=True, timeout=60, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return lines[0] if lines else None


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
    drain(device)
    start = time.perf_counter()
    for _ in range(reps):
        work()
    drain(device)
    return time.perf_counter() - start


def drain(device: torch.device) -> None:
    """Wait for everything queued on a GPU (a CPU has no queue)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile(work, device: torch.device, units: int) -> dict[str, Any]:
    """One call of `work` under torch.profiler, summarised per unit of it (an update, or a search step):
    see `trace_summary`."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    drain(device)  # nothing queued before
    with profiler(activities=activities) as prof, contextlib.redirect_stdout(sys.stderr):
        timed(work, 1, device)
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    return trace_summary([e for e in events if e.get("ph") == "X"], cuda, units)


def trace_summary(events: list[dict[str, Any]], cuda: bool, units: int) -> dict[str, Any]:
    """What a torch.profiler trace's complete events say, per unit of work.

    On CUDA: the GPU's activities (kernels, copies, fills) and the host's launch calls; the busy fraction,
    the share of the traced span (first host operator to last GPU activity) in which the GPU ran
    something; the activities that took the most GPU time. On a CPU: the ATen operator calls (nested
    ones included) and the operators with the most time of their own (their time less their callees').
    """
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    if cuda:
        activities = [e for e in events if e.get("cat") in GPU_ACTIVITIES]
        launches = sum(e.get("cat") == "cuda_runtime" and "Launch" in e["name"] for e in events)
        times = [(e["name"], e["dur"]) for e in activities]
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in ops + activities]
        span = max(end for _, end in spans) - min(start for start, _ in spans) if spans else 0
        busy = round(covered([(e["ts"], e["ts"] + e["dur"]) for e in activities]) / span, 3) if span else None
    else:
        activities = [e for e in ops if e["name"].startswith("aten::")]
        launches, busy = None, None  # nothing is launched on a CPU
        times = [(e["name"], own) for e, own in own_times(ops) if e["name"].startswith("aten::")]
    total: dict[str, float] = collections.defaultdict(float)
    calls: collections.Counter = collections.Counter()
    for name, duration in times:
        total[name] += duration
        calls[name] += 1
    whole = sum(total.values()) or 1.0
    top = sorted(total, key=total.get, reverse=True)[:TOP_KERNELS]
    return {
        "activity": "cuda" if cuda else "cpu",
        "units": units,
        "kernels_per_unit": round(len(activities) / units, 1),
        "launch_calls_per_unit": None if launches is None else round(launches / units, 1),
        "busy": busy,
        "ms_per_unit": round(whole / units / 1000, 3),
        "top": [
            {
                "name": name[:100],
                "ms_per_unit": round(total[name] / units / 1000, 3),
                "calls_per_unit": round(calls[name] / units, 1),
                "share": round(total[name] / whole, 3),
            }
            for name in top
        ],
    }


def covered(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals."""
    length, reached = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reached:
            length += end - max(start, reached)
            reached = end
    return length


def own_times(ops: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    """Each host operator with its own time: its duration less that of the operators it called (those
    nested in it on its thread)."""
    own: dict[int, float] = {}
    by_thread: dict[Any, list[int]] = collections.defaultdict(list)
    for i, e in enumerate(ops):
        by_thread[e.get("pid"), e.get("tid")].append(i)
        own[i] = e["dur"]
    for indices in by_thread.values():
        stack: list[int] = []
        for i in sorted(indices, key=lambda i: (ops[i]["ts"], -ops[i]["dur"])):
            while stack and ops[stack[-1]]["ts"] + ops[stack[-1]]["dur"] <= ops[i]["ts"]:
                stack.pop()
            if stack:
                own[stack[-1]] -= ops[i]["dur"]
            stack.append(i)
    return [(e, own[i]) for i, e in enumerate(ops)]


def markdown(result: dict[str, Any]) -> str:
    s, m = result["shapes"], result["machine"]
    gpu = f" ({m['gpu']}, driver {m.get('gpu_driver')}, CUDA {m['cuda']})" if m.get("gpu") else ""
    batches = ", ".join(
        f"{b['sentences']}" + (f" ({b['tokens']:,} tokens)" if b["tokens"] else "") for b in s["batches"]
    )
    lines = [
        "# Model micro-benchmark (`benchmarks/bench_step.py`)",
        "",
        f"    {result['command']}",
        "",
        f"- machine: {summary(m)}; device {m['device']}{gpu}; {m['date']}",
        f"- load: 1-minute load average {m['load_before']:.2f} before, at most {m['peak_load']:.2f} during "
        f"(ours included); other processes kept {_cores(m['others_cores'])} cores busy meanwhile",
        *(f"- **warning**: {warning}" for warning in result["warnings"]),
        f"- shapes: batches of {batches} sentences, source {s['src_len']}, target {s['tgt_len']} tokens, "
        f"vocabularies {s['vocab']}; random ids; beam search runs exactly {s['tgt_len']} steps + EOS",
        "- the update is `seq2seq train`'s: the config's optimiser, clipping and learning-rate schedule; "
        "with graphs, replayed from CUDA graphs, its batch padded to its shape (rows, source, target) as "
        "training pads it; sentences/s and tokens/s count the real ones",
        *(
            f"- fp32 matrix-product peak (`torch.mm`, {PEAK_SIZE} x {PEAK_SIZE}): "
            + ", ".join(f"{gflops} GFLOP/s on {threads} thread(s)" for threads, gflops in peak.items())
            for peak in [m.get("matmul_peak_gflop_per_s")]
            if peak
        ),
        "- beam matmul GFLOP/s: the search's matrix-product operations (torch's FlopCounterMode) per second; "
        "multiply-adds per step: those of one sentence's step (all its beams, the encoder spread over the "
        "steps), as `benchmarks.bench` reports them for every toolkit's search; with graphs, the search's "
        "decoder step is replayed from CUDA graphs (decode.cuda_graphs)",
        "",
        "- peak MiB: the most GPU memory torch's allocator held (CUDA only), training with the optimiser's "
        "state, and the search",
        "",
        "| config | batch | precision | compile | graphs | padded shape | parameters | warm-up (s) "
        "| train update (ms) | train target tok/s | train sentences/s | train peak MiB | beam step (ms) "
        "| beam sentences/s | beam multiply-adds per step | beam matmul GFLOP/s | beam peak MiB |",
        "|---|---:|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        variant = (
            f"| {Path(r['config']).stem} | {r['batch']} | {r['precision']} "
            f"| {'yes' if r['compile'] else 'no'} | {'on' if r['cuda_graphs'] else 'off'} "
        )
        if "error" in r:
            lines.append(f"{variant}| **failed**: {r['error'].replace('|', '/')} |" + " |" * 11)
            continue
        lines.append(
            f"{variant}| {' x '.join(map(str, r['padded_shape']))} "
            f"| {r['parameters']:,} | {r['warmup_s']} | {r['train_ms']} | {r['train_tokens_per_s']:,} "
            f"| {r['train_sentences_per_s']} | {_cell(r['train_peak_mib'])} "
            f"| {r.get('beam_ms_per_step', '-')} | {r.get('beam_sentences_per_s', '-')} "
            f"| {_cell(r.get('beam_macs_per_step'), ',')} "
            f"| {r.get('beam_matmul_gflop_per_s', '-')} | {_cell(r.get('beam_peak_mib'))} |"
        )
    profiled = [r for r in result["rows"] if "train_profile" in r]
    if profiled:
        lines += ["", *profile_markdown(profiled)]
    return "\n".join(lines) + "\n"


def profile_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The `--profile` tables: one line per variant, then each profile's top kernels (operators)."""
    cuda = rows[0]["train_profile"]["activity"] == "cuda"
    what = "kernels" if cuda else "ATen calls"
    lines = [
        "## Profile (`--profile`)",
        "",
        f"One update and one search under torch.profiler. {what}: "
        + (
            "the GPU's kernels, copies and fills; launch calls: the host's kernel and graph launches; busy: "
            "the share of the traced time in which the GPU ran something."
            if cuda
            else "every ATen operator call, nested ones included (a CPU has no kernel launches)."
        ),
        "",
        f"| variant | {what} per update | launch calls per update | busy | {what} per search step "
        "| launch calls per search step | busy (search) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    profiles = []
    for r in rows:
        name = (
            f"{Path(r['config']).stem} batch {r['batch']} {r['precision']}"
            f"{' compiled' if r['compile'] else ''}{' graphs' if r['cuda_graphs'] else ''}"
        )
        train, beam = r["train_profile"], r.get("beam_profile") or {}
        lines.append(
            f"| {name} | {train['kernels_per_unit']:,} | {_cell(train['launch_calls_per_unit'], ',')} "
            f"| {_share(train['busy'])} | {_cell(beam.get('kernels_per_unit'), ',')} "
            f"| {_cell(beam.get('launch_calls_per_unit'), ',')} | {_share(beam.get('busy'))} |"
        )
        profiles += [(f"{name}: update", train)] + ([(f"{name}: search step", beam)] if beam else [])
    for title, found in profiles:
        lines += [
            "",
            f"### {title}: top {what} by {'GPU' if cuda else 'own CPU'} time "
            f"({found['ms_per_unit']} ms in all)",
            "",
            "| name | ms | calls | share |",
            "|---|---:|---:|---:|",
        ]
        lines += [
            f"| `{top['name']}` | {top['ms_per_unit']} | {top['calls_per_unit']} | {_share(top['share'])} |"
            for top in found["top"]
        ]
    return lines


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _cell(value: float | None, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def _cores(value: float | None) -> str:
    return "an unknown number of" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
