"""What a GPU runs that a CPU does not: attention in bf16, cuBLAS / cuDNN / Triton kernels, pinned-memory
batches, NCCL.

Tests marked `cuda` need a CUDA device and are skipped without one (conftest.py); `scripts/gpu_check.sh` runs
this file on a GPU machine (docs/gpu.md). The others run anywhere: the GPU's precision rule emulated on the
CPU, and the command line, scripts and this file on an image without `datasets` and `hypothesis`, as GPU
images often are.
"""

from __future__ import annotations

import dataclasses
import math
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import (
    SEARCH_FAMILIES,
    SEARCH_VOCAB,
    assert_as_accurate,
    assert_compiled_attention_equals_eager,
    assert_graphs_update_as_eager,
    assert_search_is_batch_invariant,
    batch,
    config_of,
    ddp_train,
    errors_against_float64,
    graph_batches,
    metrics,
    parameters,
    random_model,
    tiny_config,
    tiny_model,
    write_tiny_config,
)

from seq2seq_attn.config import DecodeConfig
from seq2seq_attn.decoding import search as search_module
from seq2seq_attn.decoding.graphs import StepGraphs
from seq2seq_attn.decoding.search import translate_ids
from seq2seq_attn.model import seq2seq
from seq2seq_attn.runs.checkpoint import load_checkpoint
from seq2seq_attn.training import graphs as graphs_module
from seq2seq_attn.training import train as train_module
from seq2seq_attn.training.graphs import CapturedUpdate, PaddedShapes
from seq2seq_attn.training.optim import Schedule, build_optimizer
from seq2seq_attn.training.step import Update
from seq2seq_attn.vocab.batching import collate

FUSED_DECODERS = [  # each fused Function, the conditional GRU's loop in AttentiveGRU too
    ("rnnsearch", "bahdanau"),
    ("rnnsearch-cgru", "bahdanau"),
    ("luong-feed", "general"),
]
# (largest relative error of the step-by-step code, slack of the fused code's) against float64
TOLERANCE = {"fp32": (1e-3, 1e-5), "bf16": (0.2, 0.01)}


@pytest.fixture
def fp32_is_fp32(monkeypatch) -> None:
    """No TF32 in fp32 products (cuDNN's RNNs use it by default on Ampere and newer): fp32 tests compare
    with fp32's own precision."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)


@pytest.mark.cuda
@pytest.mark.usefixtures("fp32_is_fp32")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize(("decoder", "attention"), FUSED_DECODERS)
def test_fused_recurrences_on_cuda_are_as_accurate_as_autograd(decoder, attention, precision, monkeypatch):
    """Both fused Functions against the step-by-step code on CUDA, outputs and every gradient, in fp32 and
    under bf16 autocast (where attention runs in bf16 too)."""
    variant = ("gru-bi-1", attention, decoder)
    errors = errors_against_float64(variant, "cuda", precision == "bf16", monkeypatch)
    assert_as_accurate(*errors, *TOLERANCE[precision], ratio=2.0)


@pytest.mark.cuda
def test_the_training_loss_needs_no_host_sync_on_cuda() -> None:
    """A training update reads nothing back from the GPU until its logging interval (training/train.py):
    the loss selects its real targets from the count the batch carries, not with `nonzero`."""
    model = tiny_model().cuda().train()
    src, lengths, tgt = batch()
    src, lengths, tgt = src.cuda(), lengths.cuda(), tgt.cuda()
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    n_real = int((tgt_out != 0).sum())
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss = model(src, lengths, tgt_in, tgt_out, n_targets=n_real)
        loss.backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(loss).item()


@pytest.mark.parametrize(("decoder", "attention"), FUSED_DECODERS)
def test_fused_recurrences_with_attention_in_bf16_as_on_a_gpu(decoder, attention, monkeypatch):
    """Under autocast a GPU runs attention in bf16 (device.attention_dtype), a CPU in fp32: here the CPU
    follows the GPU's rule, so that combination is checked on every machine."""
    monkeypatch.setattr(seq2seq, "attention_dtype", torch.get_autocast_dtype)
    variant = ("gru-bi-1", attention, decoder)
    src, lengths, _ = batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert tiny_model(*variant).encode(src, lengths).annotations.dtype == torch.bfloat16
    errors = errors_against_float64(variant, "cpu", True, monkeypatch)
    assert_as_accurate(*errors, *TOLERANCE["bf16"], ratio=2.0)


@pytest.mark.cuda
def test_compiled_attention_on_cuda_computes_what_the_eager_code_does(monkeypatch):
    """The Triton kernels of `train.compile` / `decode.compile`, training and search, in float64."""
    assert_compiled_attention_equals_eager("cuda", monkeypatch)


@pytest.mark.cuda
@pytest.mark.usefixtures("fp32_is_fp32")
@pytest.mark.parametrize("family", SEARCH_FAMILIES[:2], ids=lambda f: f["decoder"])
def test_search_on_cuda_is_batch_invariant(family: dict) -> None:
    assert_search_is_batch_invariant(random_model(2, **family).cuda(), "cuda")


@pytest.mark.cuda
@pytest.mark.usefixtures("fp32_is_fp32")
@pytest.mark.parametrize("family", SEARCH_FAMILIES, ids=lambda f: "-".join(map(str, f.values())))
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_search_steps_replayed_from_cuda_graphs_translate_as_eager_steps(family, precision, monkeypatch):
    """`translate_ids` with decode.cuda_graphs on, every decoder family, in several batches (each under its
    own autocast, so that a graph reading autocast's cached casts would read freed memory in the next):
    the same n-best lists as the same padded steps run eagerly (capture off), so on identical shapes; in
    fp32 also as decode.cuda_graphs off, for sources whose widths graphs do not pad (7, 15 and 23 pieces +
    EOS). Every shape is captured, and after the weights change in place a new call searches with the new
    weights. A capture fails on any read back from the GPU, so this also shows that the step makes none."""
    made: list[StepGraphs] = []

    class Recorded(StepGraphs):
        capturing = True

        def __init__(self, model) -> None:
            super().__init__(model)
            self.capture = self.capture and Recorded.capturing
            made.append(self)

    monkeypatch.setattr(search_module, "StepGraphs", Recorded)
    model = random_model(2, **family).cuda()
    rng = random.Random(3)
    sources = [[rng.randrange(4, SEARCH_VOCAB) for _ in range(n)] for n in [7, 15, 23] * 16]
    on = DecodeConfig(beam_size=4, nbest=2, precision=precision, cuda_graphs="on", batch_tokens=192)
    for _ in range(2):
        graphed = translate_ids(model, sources, on, "cuda")
        Recorded.capturing = False
        padded_eager = translate_ids(model, sources, on, "cuda")
        Recorded.capturing = True
        assert len(made[-2]) >= 3 and len(made[-2]) == len(made[-2].slots) and len(made[-1]) == 0
        references = [(padded_eager, 1e-6)]
        if precision == "fp32":  # bf16 rounds other row counts' products differently: near ties may flip
            references.append(
                (translate_ids(model, sources, dataclasses.replace(on, cuda_graphs="off"), "cuda"), 1e-5)
            )
        for reference, rel in references:
            for mine, theirs in zip(graphed, reference, strict=True):
                assert [h.tokens for h in mine] == [h.tokens for h in theirs]
                assert [h.score for h in mine] == pytest.approx([h.score for h in theirs], rel=rel, abs=rel)
        with torch.no_grad():
            for weight in model.parameters():
                weight.mul_(1.25)


@pytest.mark.cuda
def test_bf16_training_on_cuda_stays_finite_and_resumes_exactly(workdir):
    """200 updates in bf16 autocast from pinned-memory batches, validated (loss and greedy-search BLEU) every
    100; a run stopped after 150 resumes from step 100's checkpoint to the same weights, bit for bit."""
    on_gpu = ("train.device=cuda", "train.precision=bf16", "train.max_steps=200", "train.validate_every=100")
    settings = (*on_gpu, "train.log_every=20")
    reference = train_module.train(config_of(workdir, *settings, "train.run_dir=reference"))
    config = config_of(workdir, *settings, "train.run_dir=resumed")
    train_module.train(config, stop_after=150)  # updates 101-150 are lost: no checkpoint after step 100
    assert load_checkpoint(config.run_dir / "checkpoints" / "latest.pt")["step"] == 100
    resumed = train_module.train(config)

    logged = [r for r in metrics(reference) if "loss" in r]
    losses = [r["loss"] for r in logged]
    assert len(losses) == 10 and all(math.isfinite(loss) for loss in losses)
    assert logged[-1]["skipped"] == 0
    assert sum(losses[-3:]) < 0.8 * sum(losses[:3])  # it learns
    assert [r["loss"] for r in metrics(resumed) if "loss" in r] == losses
    want, got = (parameters(run / "checkpoints" / "latest.pt") for run in (reference, resumed))
    assert all(torch.isfinite(value).all() for value in want.values())
    diverged = [name for name, value in want.items() if not torch.equal(got[name], value)]
    assert not diverged, f"the resumed run's weights differ: {diverged}"


@pytest.mark.cuda
@pytest.mark.usefixtures("fp32_is_fp32")
@pytest.mark.parametrize(
    ("optimizer", "precision", "compiled", "rtol", "params_atol"),
    [
        ("adam", "fp32", False, 1e-4, 1e-3),
        ("adadelta", "fp32", False, 1e-4, 1e-4),
        ("adam", "bf16", False, 3e-2, 2e-2),
        ("adam", "fp32", True, 1e-4, 1e-3),
    ],
)
def test_updates_replayed_from_cuda_graphs_are_the_eager_updates(
    optimizer, precision, compiled, rtol, params_atol
):
    """Ten updates of a tiny RNNsearch over batches of a few shapes, captured once per shape and replayed
    (training/graphs.py), against the eager updates of the same batches unpadded: the same losses,
    gradient norms and parameters, in fp32 (TF32 off), bf16 and with the compiled attention. A capture
    fails on any read back from the GPU, so this also shows that the update makes none."""
    rate = 1.0 if optimizer == "adadelta" else 0.01
    settings = {"optimizer": optimizer, "learning_rate": rate}
    captured = assert_graphs_update_as_eager(
        "cuda", rtol, params_atol, bf16=precision == "bf16", compiled=compiled, **settings
    )
    assert captured >= 2  # several shapes captured, and replayed by the later batches


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def captured_update(device: str, optimizer: str, **model: object):
    """A tiny RNNsearch in training mode whose update is a `CapturedUpdate` (on a CPU: eager on the same
    buffers), its optimiser capturable, and one batch padded to its shape."""
    cfg = tiny_config(
        train={"optimizer": optimizer, "batch_type": "sentences", "batch_size": 4, "max_len": 12}
    ).train
    net = tiny_model(**model).to(device).train()
    built = build_optimizer(list(net.parameters()), cfg, capturable=True)
    update = CapturedUpdate(Update(net, net, built, cfg, torch.device(device), False))
    src, tgt = graph_batches(1)[0]
    batch = collate(src, tgt, pin=device == "cuda", pad_to=PaddedShapes.of(cfg))
    return net, built, Schedule(built, cfg), update, batch


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("optimizer", ["adam", "adadelta"])
def test_an_update_replayed_with_a_non_finite_gradient_changes_nothing(device, optimizer, monkeypatch):
    """The guarded step inside a graph (Adam's found_inf, Adadelta's undo on the device): a replay whose
    gradient is not finite (its loss divided by 0) reports itself skipped and leaves the parameters and
    the optimiser's state as they were; the next replay steps again."""
    net, built, schedule, update, batch = captured_update(device, optimizer)
    for step in range(3):  # the eager first update, then the capture; the third replays
        schedule.set_step(step)
        update(batch)
    assert len(update) == (1 if device == "cuda" else 0)
    params = [p.detach().clone() for p in net.parameters()]
    state = [t.clone() for p in net.parameters() for t in built.state[p].values() if torch.is_tensor(t)]
    monkeypatch.setattr(graphs_module, "loss_divisor", lambda *args: 0.0)
    _, bad, _ = update(batch)
    assert bad.item() == 1.0
    assert all(torch.equal(p, old) for p, old in zip(net.parameters(), params, strict=True))
    after = [t for p in net.parameters() for t in built.state[p].values() if torch.is_tensor(t)]
    assert all(torch.equal(t, old) for t, old in zip(after, state, strict=True))
    monkeypatch.undo()
    _, bad, _ = update(batch)
    assert bad.item() == 0.0
    assert not all(torch.equal(p, old) for p, old in zip(net.parameters(), params, strict=True))


@pytest.mark.parametrize("device", DEVICES)
def test_replayed_updates_draw_new_dropout_masks(device):
    """Dropout in a captured update: each replay of the same batch draws new masks (torch registers its
    generator with the capture), so the same batch gives a new loss each time, as eagerly."""
    _, _, schedule, update, batch = captured_update(
        device, "adam", dropout_embed=0.3, dropout_hidden=0.3, dropout_output=0.3
    )
    schedule.set_step(0)
    losses = []
    for _ in range(4):
        update.update.optimizer.param_groups[0]["lr"].fill_(0.0)  # the same weights every time
        losses.append(update(batch)[0].item())
    assert len(set(losses)) == 4


@pytest.mark.cuda
def test_training_in_cuda_graphs_logs_what_training_without_them_logs(workdir):
    """`seq2seq train` with train.cuda_graphs on and off, in fp32 without dropout: the same logged losses,
    gradient norms, clip rates and dev losses, to float rounding; a graphed run stopped after 25 updates
    resumes to the weights of the uninterrupted one."""
    settings = ("train.device=cuda", "train.precision=fp32", "train.max_steps=40", "train.validate_every=20")
    settings += ("train.valid_bleu=false", "train.clip_norm=0.5")
    settings += ("model.dropout_hidden=0", "model.dropout_output=0")  # padding would draw other masks
    runs = {
        graphs: train_module.train(
            config_of(workdir, *settings, f"train.cuda_graphs={graphs}", f"train.run_dir={graphs}")
        )
        for graphs in ("off", "on")
    }
    logged = {graphs: [r for r in metrics(run) if "loss" in r] for graphs, run in runs.items()}
    assert len(logged["on"]) == len(logged["off"]) == 8
    for on, off in zip(logged["on"], logged["off"], strict=True):
        assert on["skipped"] == off["skipped"] == 0
        assert on["loss"] == pytest.approx(off["loss"], rel=1e-3)
        assert on["grad_norm"] == pytest.approx(off["grad_norm"], rel=1e-3)
        assert on["clipped"] == pytest.approx(off["clipped"], abs=0.2)  # one update of the five at most
        assert on["padding"] >= off["padding"]  # the graphs' batches are padded to their shapes
    dev = {
        graphs: [r["valid_loss"] for r in metrics(run) if "valid_loss" in r] for graphs, run in runs.items()
    }
    assert len(dev["on"]) == 2 and dev["on"] == pytest.approx(dev["off"], rel=1e-3)

    config = config_of(
        workdir, *settings, "train.cuda_graphs=on", "train.run_dir=resumed", "train.checkpoint_every=25"
    )
    train_module.train(config, stop_after=25)
    resumed = train_module.train(config)
    want, got = (parameters(run / "checkpoints" / "latest.pt") for run in (runs["on"], resumed))
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
@pytest.mark.slow
def test_torchrun_one_process_with_nccl(workdir):
    ddp_train(workdir, 1, "nccl", "train.device=cuda")


# Runs a module (`-m` style) or a script as on a GPU image that lacks `datasets` and `hypothesis`: importing
# them fails.
ON_GPU_IMAGE = textwrap.dedent(
    """
    import runpy, sys

    class Absent:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("datasets", "hypothesis"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    sys.meta_path.insert(0, Absent())
    target = sys.argv.pop(1)
    sys.argv[0] = target
    if target.endswith(".py"):
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    """
)
ROOT = Path(__file__).resolve().parent.parent
SMALL_SYNTHETIC = {
    "train_size": 60,
    "valid_size": 8,
    "test_size": 8,
    "vocab_size": 100,
    "irregular_words": 5,
    "max_words": 8,
}


def on_gpu_image(target: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", ON_GPU_IMAGE, target, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@pytest.mark.e2e
@pytest.mark.slow(seconds=9)
def test_command_line_scripts_and_these_tests_work_without_datasets_and_hypothesis(tmp_path):
    """Only `data.source: huggingface` needs `datasets`, and it says so in one line; everything else, and
    this file's tests, import and run without it (and without hypothesis, a test dependency)."""
    for target in ("seq2seq_attn", str(ROOT / "scripts" / "reproduce.py"), "benchmarks.bench_step"):
        result = on_gpu_image(target, "--help")
        assert result.returncode == 0, result.stderr[-3000:]
        assert "usage" in result.stdout.lower()

    for source in ("synthetic", "huggingface"):
        data = {"source": source, "dir": "data", "synthetic": SMALL_SYNTHETIC}
        write_tiny_config(
            tmp_path / f"{source}.yaml", data={**data, "huggingface": {"name": "wmt14", "config": "fr-en"}}
        )
    result = on_gpu_image("seq2seq_attn", "data", "prepare", str(tmp_path / "synthetic.yaml"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert len((tmp_path / "data" / "train.src").read_text().splitlines()) == 60
    result = on_gpu_image("seq2seq_attn", "data", "prepare", str(tmp_path / "huggingface.yaml"))
    assert result.returncode == 2
    assert "needs the `datasets` package" in result.stderr and "Traceback" not in result.stderr

    pytest_args = ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest"]
    result = on_gpu_image("pytest", *pytest_args, "--rootdir", str(ROOT), __file__)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "test_torchrun_one_process_with_nccl" in result.stdout
