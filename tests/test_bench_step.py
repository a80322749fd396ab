"""The model micro-benchmark's update is training's (its schedule, its clipping, graphs as training pads
them), and its profile: what a torch.profiler trace says per update and per search step."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import tiny_config, write_tiny_config

from benchmarks import bench_step
from seq2seq_attn.training.optim import Schedule


def test_the_timed_update_is_trainings_with_its_schedule_and_clipping(monkeypatch):
    steps, norms = [], []
    set_step, clip = Schedule.set_step, torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(Schedule, "set_step", lambda self, step: steps.append(step) or set_step(self, step))
    monkeypatch.setattr(
        torch.nn.utils, "clip_grad_norm_", lambda params, norm: norms.append(norm) or clip(params, norm)
    )
    config = tiny_config(train={"clip_norm": 0.25, "warmup_steps": 4})
    args = bench_step.parse_args(["x.yaml", "--reps", "2", "--warmup", "1", "--beam", "0"])
    row = bench_step.measure(config, bench_step.Shapes(2, 4, 3, 20), "fp32", False, torch.device("cpu"), args)
    assert steps == [0, 1, 2] and norms == [0.25] * 3
    assert row["padded_shape"] == [2, 4, 3] and row["train_ms"] > 0


def test_options_batches_of_tokens_and_graphs():
    args = bench_step.parse_args(["x.yaml", "--batch", "80,256", "--tokens", "6000", "--src-len", "30"])
    assert args.batches == [(80, None), (256, None), (100, 6000)]  # 6,000 positions of 30 + 30
    assert bench_step.parse_args(["x.yaml", "--device", "cuda", "--cuda-graphs", "off,on"]).graphs == [
        False,
        True,
    ]
    for wrong in (["--cuda-graphs", "on"], ["--cuda-graphs", "yes"], ["--batch", "8x"], ["--tokens", "10"]):
        with pytest.raises(SystemExit):
            bench_step.parse_args(["x.yaml", *wrong])


def event(cat: str, name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_a_cuda_trace_gives_kernels_launches_and_the_gpus_busy_share():
    """Two search steps: 3 kernels and a copy, 4 launch calls; the GPU ran during 50 of the 100 us traced."""
    events = [
        event("cpu_op", "aten::mm", 0, 100),
        event("cuda_runtime", "cudaLaunchKernel", 1, 2),
        event("cuda_runtime", "cudaLaunchKernel", 3, 2),
        event("cuda_runtime", "cudaGraphLaunch", 5, 2),
        event("cuda_runtime", "cudaLaunchKernelExC", 7, 2),
        event("cuda_runtime", "cudaStreamSynchronize", 9, 90),
        event("kernel", "gemm", 10, 20),
        event("kernel", "gemm", 20, 20),  # overlaps the first: 30 us covered by both
        event("kernel", "softmax", 60, 10),
        event("gpu_memcpy", "Memcpy HtoD", 90, 10),
    ]
    summary = bench_step.trace_summary(events, cuda=True, units=2)
    assert summary["kernels_per_unit"] == 2 and summary["launch_calls_per_unit"] == 2
    assert summary["busy"] == 0.5
    assert [(top["name"], top["ms_per_unit"], top["calls_per_unit"]) for top in summary["top"]] == [
        ("gemm", 0.02, 1.0),
        ("softmax", 0.005, 0.5),
        ("Memcpy HtoD", 0.005, 0.5),
    ]
    assert summary["top"][0]["share"] == pytest.approx(40 / 60, abs=1e-3)


def test_a_cpu_trace_gives_aten_calls_and_their_own_times():
    """An operator's own time is its time less that of the operators nested in it, thread by thread."""
    events = [
        event("cpu_op", "aten::linear", 0, 50),
        event("cpu_op", "aten::addmm", 5, 40),
        event("cpu_op", "aten::copy_", 10, 10),
        event("cpu_op", "aten::add", 60, 5),
        event("cpu_op", "aten::mul", 0, 30, tid=2),  # another thread: nests in nothing
        event("cpu_op", "Optimizer.step", 70, 30),  # not an ATen operator
    ]
    summary = bench_step.trace_summary(events, cuda=False, units=1)
    assert summary["kernels_per_unit"] == 5 and summary["launch_calls_per_unit"] is None
    assert summary["busy"] is None
    own = {top["name"]: top["ms_per_unit"] for top in summary["top"]}
    assert own == {
        "aten::addmm": 0.03,
        "aten::mul": 0.03,
        "aten::linear": 0.01,
        "aten::copy_": 0.01,
        "aten::add": 0.005,
    }


def test_the_profile_of_a_cpu_update_and_search_is_in_the_report(tmp_path):
    config = write_tiny_config(tmp_path / "tiny.yaml")
    out = tmp_path / "step"
    options = ["--batch", "2", "--src-len", "4", "--tgt-len", "3", "--vocab", "20", "--reps", "1"]
    bench_step.main([str(config), *options, "--warmup", "0", "--beam", "2", "--profile", "--out", str(out)])
    (row,) = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert row["train_profile"]["kernels_per_unit"] > 50 and row["beam_profile"]["units"] == 4
    assert all(top["name"].startswith("aten::") for top in row["train_profile"]["top"])
    text = out.with_suffix(".md").read_text()
    assert "## Profile (`--profile`)" in text and "tiny batch 2 fp32: search step: top ATen calls" in text


def test_a_variant_that_fails_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    measure = bench_step.measure

    def failing_bf16(config, shapes, precision, *args):
        if precision == "bf16":
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        return measure(config, shapes, precision, *args)

    monkeypatch.setattr(bench_step, "measure", failing_bf16)
    out = tmp_path / "step"
    options = [
        "--batch",
        "2",
        "--src-len",
        "4",
        "--tgt-len",
        "3",
        "--vocab",
        "20",
        "--reps",
        "1",
        "--beam",
        "0",
    ]
    with pytest.raises(SystemExit, match="1 variant\\(s\\) failed"):
        bench_step.main(
            [
                str(write_tiny_config(tmp_path / "tiny.yaml")),
                *options,
                "--precision",
                "fp32,bf16",
                "--out",
                str(out),
            ]
        )
    fp32, bf16 = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert fp32["train_ms"] > 0 and bf16["error"].startswith("RuntimeError: CUDA error: operation not")
    assert "| tiny | 2 | bf16 | no | off | **failed**: RuntimeError" in out.with_suffix(".md").read_text()
