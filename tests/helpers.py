"""What several test files share: the one tiny config builder, tiny models and batches, corpora, run
directories, the command line run in this process or as a real process, and shared assertions.

Test files import this as a plain module (`from helpers import ...`): pytest puts tests/ on sys.path, as it
does for conftest.py, which holds the fixtures built from these helpers. No test file imports another.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import itertools
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from seq2seq_attn.config import Config, DecodeConfig, ModelConfig, from_dict, load_config, to_dict
from seq2seq_attn.decoding.search import beam_search, translate_ids
from seq2seq_attn.errors import UserError
from seq2seq_attn.model import DecoderState, EncoderOutput, build_model, fused
from seq2seq_attn.model.seq2seq import check_model_config
from seq2seq_attn.runs.checkpoint import load_checkpoint, save_checkpoint
from seq2seq_attn.runs.run_folder import checkpoint_dir, load_trained, point_best
from seq2seq_attn.training.graphs import CapturedUpdate, PaddedShapes
from seq2seq_attn.training.optim import Schedule, build_optimizer
from seq2seq_attn.training.step import Update
from seq2seq_attn.vocab.batching import collate
from seq2seq_attn.vocab.pieces import build_vocab

ROOT = Path(__file__).resolve().parent.parent

# ----------------------------------------------------------------------------------------------------------
# the tiny config: one builder for every test

TINY_MODEL = {
    "src_embed_dim": 8,
    "tgt_embed_dim": 8,
    "hidden_size": 16,
    "decoder_hidden_size": 16,
    "attention_dim": 16,
    "maxout_dim": 8,
    "init": "pytorch",
}


def tiny_raw(root: Path | str | None = None, **sections: object) -> dict:
    """The tiny experiment as a raw mapping (what a YAML file holds): name, seed, a bpe vocabulary of 40
    and the TINY_MODEL sizes; with `root`, data in root/data and the run in root/run (`root` may be a
    relative path, resolved against the config file's folder). Each keyword updates its section (a dict)
    or sets a top-level key (`seed=3`)."""
    raw: dict = {"name": "tiny", "seed": 1, "vocab": {"size": 40, "threads": 1}, "model": dict(TINY_MODEL)}
    if root is not None:
        raw["data"] = {"dir": str(Path(root) / "data")}
        raw["train"] = {"run_dir": str(Path(root) / "run")}
    for name, values in sections.items():
        if isinstance(values, dict):
            raw.setdefault(name, {}).update(values)
        else:
            raw[name] = values
    return raw


def tiny_config(root: Path | None = None, **sections: object) -> Config:
    """`tiny_raw(root, **sections)` as a validated Config."""
    return from_dict(tiny_raw(root, **sections))


def write_tiny_config(path: Path, root: str | None = None, **sections: object) -> Path:
    """`tiny_raw(root, **sections)` written as a YAML config file at `path`."""
    path.write_text(yaml.safe_dump(tiny_raw(root, **sections), sort_keys=False), encoding="utf-8")
    return path


# the model variants by name: ENCODERS x ATTENTIONS x DECODERS
ATTENTIONS = ["none", "bahdanau", "dot", "general", "concat"]
DECODERS = {  # name: the model keys that make it
    "rnnsearch": {"decoder": "rnnsearch", "decoder_step": "attend_then_update"},
    "rnnsearch-uta": {"decoder": "rnnsearch", "decoder_step": "update_then_attend"},
    "rnnsearch-cgru": {"decoder": "rnnsearch", "decoder_step": "conditional"},
    "rnnsearch-coverage-linguistic": {
        "decoder": "rnnsearch",
        "decoder_step": "attend_then_update",
        "coverage": "linguistic",
    },
    "rnnsearch-uta-coverage-linguistic": {
        "decoder": "rnnsearch",
        "decoder_step": "update_then_attend",
        "coverage": "linguistic",
    },
    "rnnsearch-cgru-coverage-linguistic": {
        "decoder": "rnnsearch",
        "decoder_step": "conditional",
        "coverage": "linguistic",
    },
    "rnnsearch-uta-coverage-neural": {
        "decoder": "rnnsearch",
        "decoder_step": "update_then_attend",
        "coverage": "neural",
        "coverage_dim": 3,
    },
    "rnnsearch-cgru-coverage-neural": {
        "decoder": "rnnsearch",
        "decoder_step": "conditional",
        "coverage": "neural",
        "coverage_dim": 3,
    },
    "luong-feed": {"decoder": "luong", "input_feeding": True},
    "luong-nofeed": {"decoder": "luong", "input_feeding": False},
}
ENCODERS = {  # (cell, bidirectional, layers)
    f"{cell}-{'bi' if bi else 'uni'}-{layers}": (cell, bi, layers)
    for cell, bi, layers in itertools.product(["gru", "lstm"], [True, False], [1, 2])
}


def tiny_model_config(
    encoder: str = "gru-bi-1", attention: str = "bahdanau", decoder: str = "rnnsearch", **model: object
) -> ModelConfig:
    """The model section of `tiny_config` for one named variant, with its own attention and output sizes
    and a decoder state size unlike the encoder's (a third size to catch mix-ups; dot attention needs the
    decoder state to match the annotations); `model` overrides any key."""
    cell, bidirectional, layers = ENCODERS[encoder]
    annotation = TINY_MODEL["hidden_size"] * (2 if bidirectional else 1)
    variant = {
        "attention": attention,
        "cell": cell,
        "decoder_hidden_size": annotation if attention == "dot" else 24,
        "encoder_layers": layers,
        "decoder_layers": layers,
        "bidirectional": bidirectional,
        "attention_dim": 12,
        "maxout_dim": 10,
        **DECODERS[decoder],
    }
    return tiny_config(model={**variant, **model}).model


def variant_exists(encoder: str, attention: str, decoder: str) -> bool:
    """Whether `build_model` accepts this named variant (a coverage model needs additive attention, the
    conditional GRU one GRU layer, ...)."""
    try:
        check_model_config(tiny_model_config(encoder, attention, decoder))
    except UserError:
        return False
    return True


def variants(encoders: object, attentions: object, decoders: object) -> list[tuple[str, str, str]]:
    """Every (encoder, attention, decoder) of the product of those names that `variant_exists`."""
    return [v for v in itertools.product(encoders, attentions, decoders) if variant_exists(*v)]


# ----------------------------------------------------------------------------------------------------------
# tiny models and batches

VOCAB = 20  # source and target vocabulary of `tiny_model`
PAD, BOS = 0, 2


def tiny_model(*variant: str, seed: int = 0, **model: object) -> nn.Module:
    """An untrained `tiny_model_config(*variant, **model)` over VOCAB ids, in eval mode."""
    torch.manual_seed(seed)
    return build_model(tiny_model_config(*variant, **model), VOCAB, VOCAB).eval()


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three sources of lengths 7, 3, 5 padded with 0, and targets <bos> + 5 tokens."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 3, 5])
    src = torch.randint(4, VOCAB, (3, 7), generator=g)
    src[torch.arange(7) >= lengths.unsqueeze(1)] = PAD
    tgt_in = torch.randint(4, VOCAB, (3, 6), generator=g)
    tgt_in[:, 0] = BOS
    return src, lengths, tgt_in


SEARCH_VOCAB = 30  # source and target vocabulary of `random_model`
SEARCH_FAMILIES = [  # a GRU RNNsearch, an LSTM Luong decoder, the RNNencdec, a conditional GRU with coverage
    {"decoder": "rnnsearch", "attention": "bahdanau", "cell": "gru"},
    {"decoder": "luong", "attention": "general", "cell": "lstm"},
    {"decoder": "rnnsearch", "attention": "none", "cell": "gru"},
    {
        "decoder": "rnnsearch",
        "attention": "bahdanau",
        "cell": "gru",
        "decoder_step": "conditional",
        "coverage": "neural",
    },
]


def random_model(seed: int = 0, **model: object) -> nn.Module:
    """An untrained tiny model (the `tiny_config` sizes, with `model`) over SEARCH_VOCAB ids, in eval mode,
    on the CPU."""
    torch.manual_seed(seed)
    return build_model(tiny_config(model=model).model, SEARCH_VOCAB, SEARCH_VOCAB).eval()


def random_sources(n: int, seed: int = 0, longest: int = 12, vocab: int = SEARCH_VOCAB) -> list[list[int]]:
    """`n` sentences of 1 to `longest` random non-special ids below `vocab`."""
    rng = random.Random(seed)
    return [[rng.randrange(4, vocab) for _ in range(rng.randint(1, longest))] for _ in range(n)]


class ScriptedModel(nn.Module):
    """A stand-in for Seq2Seq whose next-token distribution depends only on the step number.

    `script[t]` maps tokens to probabilities at step t (the rest of the mass is spread evenly over the
    other tokens); steps past the script repeat its last entry. Attention is one-hot on `attend[t]`.
    """

    def __init__(
        self, script: list[dict[int, float]], attend: list[int] | None = None, vocab: int = SEARCH_VOCAB
    ):
        super().__init__()
        self.script, self.attend, self.vocab, self.steps = script, attend or [], vocab, 0

    def encode(self, src, src_lengths):
        mask = torch.arange(src.size(1)) < src_lengths.unsqueeze(1)
        return EncoderOutput(
            annotations=torch.zeros(*src.shape, 1), mask=mask, final=torch.zeros(len(src), 1)
        )

    def init_state(self, enc):
        return DecoderState(hidden=torch.zeros(len(enc.mask), 1, 1))  # hidden = the step number

    def step(self, enc, state, y_prev):
        self.steps += 1
        t = int(state.hidden[0, 0, 0])
        probs = self.script[min(t, len(self.script) - 1)]
        rest = (1.0 - sum(probs.values())) / (self.vocab - len(probs))
        row = torch.full((self.vocab,), rest)
        for token, p in probs.items():
            row[token] = p
        attention = torch.zeros(enc.mask.shape)
        if t < len(self.attend):
            attention[:, self.attend[t]] = 1.0
        else:
            attention = enc.mask.float() / enc.mask.sum(1, keepdim=True)
        rows = len(y_prev)
        beams = rows // len(enc.mask)  # search keeps one encoder row per sentence for its beams
        attention = attention.repeat_interleave(beams, dim=0)
        return row.log().expand(rows, -1).clone(), DecoderState(hidden=state.hidden + 1), attention


# ----------------------------------------------------------------------------------------------------------
# corpora and run directories

SRC_WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "to", "house", "big", "red", "naïve"]
TGT_WORDS = ["le", "chat", "assis", "sur", "tapis", "un", "chien", "couru", "à", "maison", "grand", "rouge"]


def write_corpus(data_dir: Path, n: int = 200, seed: int = 0) -> None:
    """Line-aligned {train,valid,test}.{src,tgt} of random word sequences."""
    rng = random.Random(seed)
    data_dir.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        for side, words in (("src", SRC_WORDS), ("tgt", TGT_WORDS)):
            lines = [" ".join(rng.choices(words, k=rng.randint(2, 9))) for _ in range(n)]
            (data_dir / f"{split}.{side}").write_text(
                "".join(line + "\n" for line in lines), encoding="utf-8"
            )


def make_run_dir(config: Config, steps: tuple[int, ...] = (1,)) -> Path:
    """What training leaves: run/config.yaml, run/vocab/, run/checkpoints/step-N.pt and best.pt -> the last.

    Each checkpoint holds a differently seeded random model (so averaging them changes the weights).
    """
    vocab = build_vocab(config)
    run = config.run_dir
    folder = checkpoint_dir(run)
    folder.mkdir(parents=True, exist_ok=True)
    vocab.copy_to(run / "vocab")
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(config)), encoding="utf-8")
    for step in steps:
        torch.manual_seed(step)
        model = build_model(config.model, vocab.src_size, vocab.tgt_size)
        payload = {
            "model": model.state_dict(),
            "config": to_dict(config),
            "vocab_fingerprint": vocab.fingerprint(),
            "step": step,
        }
        save_checkpoint(folder / f"step-{step}.pt", payload)
    point_best(folder, folder / f"step-{steps[-1]}.pt")
    return run


def with_eval_section(run: Path, folder: Path, **keys: object) -> Path:
    """A copy of `run` whose checkpoints carry a config with these `eval` keys."""
    copy = folder / run.name
    shutil.copytree(run, copy, symlinks=True)
    for path in (copy / "checkpoints").glob("*.pt"):
        if not path.is_symlink():
            payload = load_checkpoint(path)
            payload["config"]["eval"].update(keys)
            save_checkpoint(path, payload)
    return copy


# The tiny config that trains (`prepared` in conftest.py): a synthetic corpus, dropout, 30 updates by
# default; paths relative to the config's folder, so that a copy of the folder is a separate experiment.
TRAINABLE = {
    "seed": 3,
    "data": {
        "source": "synthetic",
        "dir": "data",
        "synthetic": {
            "train_size": 400,
            "valid_size": 16,
            "test_size": 16,
            "vocab_size": 100,
            "irregular_words": 20,
            "max_words": 12,
        },
    },
    "vocab": {"type": "bpe", "size": 120},
    "model": {
        "src_embed_dim": 16,
        "tgt_embed_dim": 16,
        "hidden_size": 24,
        "decoder_hidden_size": 24,
        "attention_dim": 24,
        "maxout_dim": 12,
        "dropout_hidden": 0.1,
        "dropout_output": 0.1,
    },
    "train": {
        "run_dir": "run",
        "device": "cpu",
        "batch_type": "sentences",
        "batch_size": 16,
        "max_len": 40,
        "bucket_pool": 4,
        "learning_rate": 0.01,
        "log_every": 5,
        "validate_every": 10,
        "max_steps": 30,
    },
    "decode": {"beam_size": 2, "max_len_a": 1.2, "max_len_b": 3},
}


def config_of(workdir: Path, *overrides: str) -> Config:
    """The trainable tiny config in `workdir` (a copy of `prepared`) with `key=value` overrides."""
    return load_config(workdir / "tiny.yaml", list(overrides))


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def parameters(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)["model"]


# ----------------------------------------------------------------------------------------------------------
# the command line: a real process, or the entry point in this process

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def quiet_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def train_cli(workdir: Path, *args: str) -> list[str]:
    """The command line that trains the tiny config in `workdir` in a process of its own."""
    return [sys.executable, "-m", "seq2seq_attn", "--quiet", "train", str(workdir / "tiny.yaml"), *args]


def seq2seq(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """`python -m seq2seq_attn --quiet ARGS` in a process of its own; stdin, stdout and stderr are bytes."""
    command = [sys.executable, "-m", "seq2seq_attn", "--quiet", *args]
    return subprocess.run(command, cwd=cwd, input=stdin, capture_output=True, env=ENV, timeout=300)


def ddp_train(workdir: Path, processes: int, backend: str, *overrides: str) -> None:
    """12 updates of the tiny config under torchrun with `processes` ranks: they join one `backend` process
    group (even a group of one), step in lockstep and leave a loadable run."""
    command = torchrun_train(
        workdir, "train.max_steps=12", "train.validate_every=6", *overrides, processes=processes
    )
    env = {**quiet_env(), "PYTHONFAULTHANDLER": "1"}  # a crashing rank prints its Python stack
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[:6000]
    assert f"DDP with world size {processes} ({backend})" in result.stderr
    state = load_checkpoint(workdir / "run" / "checkpoints" / "latest.pt")
    assert state["step"] == 12
    assert len(state["data"]) == processes and all(d == state["data"][0] for d in state["data"])
    model, _, _ = load_trained(workdir / "run")
    assert sum(p.numel() for p in model.parameters()) > 0


def torchrun_train(workdir: Path, *overrides: str, processes: int = 2) -> list[str]:
    """`torchrun` (as `python -m torch.distributed.run`, the same program) training the tiny config; not
    `--quiet`, so that rank 0's status lines name the process group."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}"]
    sets = [item for override in overrides for item in ("--set", override)]
    return [*torchrun, "--standalone", "-m", "seq2seq_attn", "train", str(workdir / "tiny.yaml"), *sets]


# What Python shows by default (no -W, no dev mode), in the order it tries them
DEFAULT_WARNING_FILTERS = [
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
]


def run_main(
    *args: str, cwd: Path | None = None, stdin: bytes = b"", text: bool = False
) -> subprocess.CompletedProcess:
    """`seq2seq ARGS` in this process: the console-script entry point (`seq2seq_attn.cli.main`) with
    sys.argv, the working directory and the standard streams replaced for the call, and its SystemExit
    turned into a return code, as in `python -m seq2seq_attn ARGS` minus the process start (seconds, for
    torch's import). stdout and stderr are bytes (str with `text`); Python warnings that a process would
    print under the default filters go to stderr, as they would there. Global settings the call changes
    (`--quiet`, `--debug`) are put back.
    """
    from seq2seq_attn import cli, console

    out, err = io.BytesIO(), io.BytesIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
    saved = (sys.argv, sys.stdin, sys.stdout, sys.stderr, os.getcwd(), console.QUIET, cli.DEBUG)
    code: int | str | None = 0
    try:
        sys.argv = ["seq2seq", *args]
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
        sys.stdout, sys.stderr = stdout, stderr
        if cwd is not None:
            os.chdir(cwd)
        with warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()
            for action, category, module in reversed(DEFAULT_WARNING_FILTERS):
                warnings.filterwarnings(action, category=category, module=module)
            try:
                cli.main()
            except SystemExit as stop:
                code = stop.code
        for warning in caught:
            stderr.write(
                warnings.formatwarning(
                    warning.message, warning.category, warning.filename, warning.lineno, warning.line
                )
            )
        if isinstance(code, str):  # sys.exit("message"): the message on stderr, exit code 1
            stderr.write(code + "\n")
            code = 1
        stdout.flush()
        stderr.flush()
    finally:
        sys.argv, sys.stdin, sys.stdout, sys.stderr, cwd_before, console.QUIET, cli.DEBUG = saved
        os.chdir(cwd_before)
    streams = [out.getvalue(), err.getvalue()]
    if text:
        streams = [stream.decode("utf-8", errors="replace") for stream in streams]
    return subprocess.CompletedProcess(["seq2seq", *args], code or 0, *streams)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit 2, one `seq2seq: error:` line naming every fragment, no traceback, nothing on stdout."""
    stderr = result.stderr.decode("utf-8", errors="replace")
    assert result.returncode == 2, stderr
    assert "Traceback" not in stderr
    assert stderr.startswith("seq2seq: error: ") and stderr.count("\n") == 1 and stderr.endswith("\n"), stderr
    for fragment in fragments:
        assert fragment in stderr
    assert result.stdout == b""
    return stderr


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` (following links), by relative path."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


# ----------------------------------------------------------------------------------------------------------
# shared assertions: search, and the fused recurrences against autograd (CPU here, CUDA in test_cuda.py)


def assert_search_is_batch_invariant(model: nn.Module, device: str) -> None:
    """Beam search in fp32 on `device` gives each sentence the same n-best list searched alone as in batches
    of several sizes, among other sentences in shuffled order."""
    srcs = random_sources(16, seed=5, longest=15)
    cfg = DecodeConfig(beam_size=4, nbest=2, precision="fp32")
    alone = [translate_ids(model, [s], cfg, device)[0] for s in srcs]
    order = list(range(len(srcs)))
    random.Random(0).shuffle(order)
    for budget in (16 * 4, 10_000):  # several batches, and everything in one batch
        together = translate_ids(model, [srcs[i] for i in order], cfg, device, batch_tokens=budget)
        for i, nbest in zip(order, together, strict=True):
            assert [h.tokens for h in nbest] == [h.tokens for h in alone[i]]
            # matrix kernels pick their blocking by row count, so the last float bits may differ
            assert [h.score for h in nbest] == pytest.approx([h.score for h in alone[i]], rel=1e-5, abs=1e-6)


def recurrence(model, src, lengths, tgt_in, use_fused: bool, monkeypatch) -> tuple[list, list]:
    """The decoder's loop outputs (s_{i-1}, c_i, alpha_i, s_T) and, for a fixed random weighting of all of
    them, the gradients of every parameter and of the encoder output and embeddings fed to the loop."""
    monkeypatch.setattr(fused, "applies", lambda decoder: use_fused)
    decoder = model.decoder
    enc = model.encode(src, lengths)
    embedded = decoder.embed(tgt_in)
    leaves = [enc.keys, enc.annotations, embedded]
    for leaf in leaves:
        leaf.retain_grad()
    outputs = loop_outputs(decoder._recur(enc, decoder.init(enc), decoder.rnn.project_static(embedded)))
    generator = torch.Generator().manual_seed(3)
    total = sum((out * torch.randn(out.shape, generator=generator).to(out)).sum() for out in outputs)
    total.backward()
    grads = [leaf.grad for leaf in leaves] + [p.grad for _, p in sorted(model.named_parameters())]
    return outputs, grads


def loop_outputs(recurred: tuple) -> list:
    """RNNsearch's (s, c_i, alpha_i) or Luong's (h~_t, a_t), then the final state's hidden, its feed (Luong,
    and RNNsearch's update_then_attend) and its coverage (a coverage model's)."""
    *tensors, state = recurred
    extras = [x for x in (state.feed, state.coverage) if x is not None]
    return [*tensors, state.hidden, *extras]


def assert_as_accurate(
    fused_errors: list, autograd_errors: list, largest: float, slack: float, ratio: float
) -> None:
    """Each fused error at most `ratio` x the step-by-step code's + `slack`, and those below `largest`.

    The two codes round differently, so their errors are independent draws of about the same size, and a
    wrong formula gives errors of order 1. For a gradient of few elements that are sums of cancelling terms
    (the key projection's bias: its gradient sums d keys over positions whose softmax gradients sum to 0)
    one draw can be twice the other.
    """
    assert max(autograd_errors) < largest
    for got, reference in zip(fused_errors, autograd_errors, strict=True):
        assert got <= ratio * reference + slack


def errors_against_float64(variant: tuple, device: str, bf16: bool, monkeypatch) -> tuple[list, list]:
    """The relative errors (norm of the difference / norm) of every output and gradient of `recurrence`, run
    on `device` in fp32 or under bf16 autocast, against the step-by-step code in float64: the fused code's
    and the step-by-step code's."""
    src, lengths, tgt_in = batch()
    src, tgt_in = src.to(device), tgt_in.to(device)
    exact_model = tiny_model(*variant).double().train().to(device)
    exact = recurrence(exact_model, src, lengths, tgt_in, False, monkeypatch)
    errors = []
    for use_fused in (True, False):
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
            model = tiny_model(*variant).train().to(device)
            outputs, grads = recurrence(model, src, lengths, tgt_in, use_fused, monkeypatch)
        errors.append(
            [
                ((got.double() - want).norm() / want.norm()).item()
                for got, want in zip(outputs + grads, exact[0] + exact[1], strict=True)
                if want is not None
            ]
        )
    return errors[0], errors[1]


def assert_compiled_attention_equals_eager(device: str, monkeypatch) -> None:
    """The fused training loop's outputs and gradients, and beam search's n-best lists, of a float64
    RNNsearch on `device` are the same with the attention kernels compiled as run eagerly."""
    model = tiny_model("gru-bi-1", "bahdanau", "rnnsearch").double().train().to(device)
    src, lengths, tgt_in = batch()
    src, tgt_in = src.to(device), tgt_in.to(device)
    runs, searches = [], []
    for compiled in (True, False):
        model.compile_attention(compiled)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(5)  # the same dropout masks
        runs.append(recurrence(model, src, lengths, tgt_in, True, monkeypatch))
        with torch.no_grad():
            searches.append(beam_search(model.eval(), src, lengths, DecodeConfig(beam_size=3, nbest=3)))
        model.train()
    (outputs, grads), (want_outputs, want_grads) = runs
    for got, want in zip(outputs + grads, want_outputs + want_grads, strict=True):
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
    assert grads[0][1, 3:].abs().sum() == 0  # padding still gets no gradient
    for got, want in zip(*searches, strict=True):
        assert [h.tokens for h in got] == [h.tokens for h in want]
        assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-9)


def graph_batches(n: int = 10, seed: int = 0) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    """`n` batches of 3 or 4 sentence pairs of 1 to 11 ids below VOCAB: under `train.max_len` 12 they
    pad to few shapes, so that most shapes come back."""
    rng = np.random.default_rng(seed)
    return [
        tuple([rng.integers(4, VOCAB, rng.integers(1, 12)) for _ in range(rows)] for _ in range(2))
        for rows in rng.choice([3, 4], n)
    ]


def updates_with_and_without_graphs(
    device: str, bf16: bool = False, compiled: bool = False, **train: object
) -> list[tuple[list[list[float]], list[torch.Tensor], int]]:
    """The same updates of the same tiny RNNsearch, as training runs them eagerly and as a
    `CapturedUpdate` (batches padded to their shapes, a rising learning rate written before each): for
    each, every update's (summed loss, skipped, gradient norm), the parameters after them, and the graphs
    captured."""
    settings = {
        "batch_type": "sentences",
        "batch_size": 4,
        "max_len": 12,
        "clip_norm": 0.5,
        "warmup_steps": 20,
    }
    cfg = tiny_config(train={**settings, **train}).train
    runs = []
    for graphs in (False, True):
        model = tiny_model().to(device)
        model.compile_attention(compiled)
        optimizer = build_optimizer(list(model.parameters()), cfg, capturable=graphs)
        schedule = Schedule(optimizer, cfg)
        update = Update(model, model, optimizer, cfg, torch.device(device), bf16)
        update = CapturedUpdate(update) if graphs else update
        pad_to = PaddedShapes.of(cfg) if graphs else None
        outcomes = []
        for step, (src, tgt) in enumerate(graph_batches()):
            schedule.set_step(step)
            outcome = update(collate(src, tgt, pin=device == "cuda", pad_to=pad_to))
            outcomes.append([tensor.item() for tensor in outcome])
        captured = len(update) if graphs else 0
        runs.append((outcomes, [p.detach().cpu() for p in model.parameters()], captured))
    return runs


def assert_graphs_update_as_eager(device: str, rtol: float, params_atol: float, **settings: object) -> int:
    """`updates_with_and_without_graphs`: the same losses, skips and gradient norms, to `rtol`, and the
    same parameters to `params_atol` (Adam's step is about its rate wherever a gradient is near 0, whatever
    its size); returns the graphs captured."""
    (eager, eager_params, _), (graphed, graphed_params, captured) = updates_with_and_without_graphs(
        device, **settings
    )
    assert [bad for _, bad, _ in graphed] == [bad for _, bad, _ in eager] == [0.0] * len(eager)
    torch.testing.assert_close(torch.tensor(graphed), torch.tensor(eager), rtol=rtol, atol=1e-6)
    for got, want in zip(graphed_params, eager_params, strict=True):
        torch.testing.assert_close(got, want, rtol=rtol, atol=params_atol)
    return captured


# ----------------------------------------------------------------------------------------------------------
# evaluation corpora

EVAL_VOCAB = [f"w{i}" for i in range(300)]


def corpus(
    size: int, seed: int, noise: float = 0.3, max_words: int = 80
) -> tuple[list[str], list[str], list[str]]:
    """Sources, references (the source upper-cased: a perfect 'translation') and noisy hypotheses."""
    rng = random.Random(seed)
    sources, references, hypotheses = [], [], []
    for _ in range(size):
        words = [rng.choice(EVAL_VOCAB) for _ in range(rng.randint(1, max_words))]
        target = [word.upper() for word in words]
        sources.append(" ".join(words))
        references.append(" ".join(target))
        hypotheses.append(
            " ".join(
                w if rng.random() > noise else rng.choice(EVAL_VOCAB).upper()
                for w in target
                if rng.random() > noise / 3
            )
        )
    return sources, references, hypotheses


def noisy(references: list[str], noise: float, seed: int) -> list[str]:
    """Each reference with a `noise` share of its words replaced and a third as many dropped."""
    rng = random.Random(seed)
    return [
        " ".join(
            word if rng.random() > noise else f"X{rng.randrange(300)}"
            for word in line.split()
            if rng.random() > noise / 3
        )
        for line in references
    ]


def load_script(name: str):
    """scripts/<name>.py as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------------------------------------
# a real browser (the HTML report's and the server page's tests)

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--window-size=1280,1400",
]


@functools.cache
def find_chromium() -> str:
    """Chromium on PATH, else installed with apt-get (as root); the test is skipped only if neither works."""
    found = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    if found is None and shutil.which("apt-get") and os.geteuid() == 0:
        for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
            subprocess.run(command, capture_output=True, timeout=900, check=False)
        found = shutil.which("chromium")
    if found is None:
        pytest.skip("no Chromium found and none could be installed")
    return found


def browse(page: Path | str, folder: Path, *actions: str) -> tuple[str, list[str], list[str]]:
    """Open `page` (a file, or a URL) in headless Chromium with a fresh profile and do `actions`
    (--dump-dom, --screenshot=..., with the flags they need).

    Returns (stdout, the page's console messages, the URLs the page requested from the network).
    The browser's own background requests carry no initiator ("not an origin") and are left out.
    """
    folder.mkdir(parents=True, exist_ok=True)
    netlog = folder / "netlog.json"
    command = [find_chromium(), *FLAGS, f"--user-data-dir={folder / 'profile'}", f"--log-net-log={netlog}"]
    url = page.as_uri() if isinstance(page, Path) else page
    result = subprocess.run([*command, *actions, url], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    text = netlog.read_text(encoding="utf-8").rstrip()
    log = json.loads(text if text.endswith("}") else text.rstrip(",") + "]}")  # a log cut at exit
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    requests = [
        event["params"]["url"]
        for event in log["events"]
        if event["type"] == start
        and "url" in event.get("params", {})
        and event["params"].get("initiator") != "not an origin"
    ]
    return result.stdout, console, requests


# ----------------------------------------------------------------------------------------------------------
# a real server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(*args: str) -> tuple[subprocess.Popen, str]:
    """`seq2seq serve ARGS` as a process on a free port, once it answers; its output piped, merged."""
    import httpx

    port = free_port()
    command = [sys.executable, "-m", "seq2seq_attn", "serve", "--port", str(port), *args]
    server = subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                return server, url
        except httpx.TransportError:
            if server.poll() is not None:
                break
            time.sleep(0.2)
    server.kill()
    raise AssertionError(f"the server did not start: {server.stdout.read().decode()[-2000:]}")


def record_compiles(monkeypatch) -> list[str]:
    """The names of the functions the additive attention compiles from now on (model/attention.kernel),
    each run eagerly instead: compiling takes seconds and a C++ compiler."""
    from seq2seq_attn.model import attention

    compiled: list[str] = []

    def record(function):
        compiled.append(function.__name__)
        return function

    monkeypatch.setattr(attention, "_compiled", record)
    return compiled
