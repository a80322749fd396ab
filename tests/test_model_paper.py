"""The paper-sized models: parameter counts against the closed form of Bahdanau et al. 2014's matrices,
the paper's initialisation, the shipped configs, and `seq2seq model-info`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from helpers import run_main, tiny_config

from seq2seq_attn.config import load_config
from seq2seq_attn.model import build_model

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))

# Paper sizes (Sec. 4.2, Appendix A): vocabulary K_x = K_y, embedding m, hidden n, maxout l, alignment n'.
K, M, N, L, N_ALIGN = 30000, 620, 1000, 500, 1000


def gru(inputs: int, hidden: int) -> int:
    """W, W_z, W_r (3 x hidden x inputs), U, U_z, U_r (3 x hidden x hidden); PyTorch has two bias vectors."""
    return 3 * hidden * inputs + 3 * hidden * hidden + 2 * 3 * hidden


def linear(inputs: int, outputs: int, bias: bool = True) -> int:
    return inputs * outputs + (outputs if bias else 0)


RNNSEARCH = (
    K * M  # source embeddings E_x
    + 2 * gru(M, N)  # forward and backward encoder RNNs
    + linear(2 * N, N_ALIGN)  # U_a h_j (+ the alignment bias)
    + linear(N, N_ALIGN, bias=False)  # W_a s_{i-1}
    + N_ALIGN  # v_a
    + linear(N, N)  # W_s in s_0 = tanh(W_s bwd h_1)
    + K * M  # target embeddings E
    + gru(M + 2 * N, N)  # decoder: E y_{i-1} through W, c_i (2n) through C
    + linear(N + M + 2 * N, 2 * L)  # U_o, V_o, C_o of the deep output (2l units before max-pooling)
    + linear(L, K)  # W_o
)
RNNENCDEC = (
    K * M  # source embeddings
    + gru(M, N)  # one unidirectional encoder RNN
    + linear(N, N)  # W_s in s_0 = tanh(W_s c), c = h_T (no V: `fixed_context: last_state`)
    + K * M  # target embeddings
    + gru(M + N, N)  # decoder: E y_{i-1} and the fixed c
    + linear(N + M + N, 2 * L)  # deep output
    + linear(L, K)  # W_o
)


@pytest.mark.parametrize(
    ("name", "formula"),
    [
        ("rnnsearch50", RNNSEARCH),
        ("rnnencdec50", RNNENCDEC),
        ("rnnsearch30", RNNSEARCH),
        ("rnnencdec30", RNNENCDEC),
    ],
)
def test_paper_parameter_counts_match_the_closed_form(name, formula):
    cfg = load_config(ROOT / "configs" / f"{name}.yaml")
    with torch.device("meta"):  # shapes only: no memory for 80M parameters
        model = build_model(cfg.model, cfg.vocab.size, cfg.vocab.size)
    assert sum(p.numel() for p in model.parameters()) == formula


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_shipped_config_builds(path):
    cfg = load_config(path)
    with torch.device("meta"):
        model = build_model(cfg.model, cfg.vocab.size, cfg.vocab.size)
    assert model.decoder.output.out_features == cfg.vocab.size


@pytest.mark.parametrize("coverage", ["none", "linguistic", "neural"])
def test_paper_initialisation(coverage):
    """Appendix A.2: orthogonal recurrent matrices per gate, W_a / U_a ~ N(0, 0.001^2), v_a = 0, biases 0,
    every other weight ~ N(0, 0.01^2); the padding embedding is 0. A coverage model's alike (Tu et al.)."""
    sizes = {"src_embed_dim": 40, "tgt_embed_dim": 40, "hidden_size": 32, "decoder_hidden_size": 32}
    more = {"coverage": coverage, "coverage_dim": 32}
    cfg = tiny_config(model={**sizes, **more, "attention_dim": 48, "maxout_dim": 24, "init": "paper"}).model
    torch.manual_seed(0)
    model = build_model(cfg, 300, 300)
    for name, param in model.named_parameters():
        if "weight_hh" in name or "coverage_gates.weight" in name:
            for block in param.detach().split(32):
                torch.testing.assert_close(block @ block.T, torch.eye(32), atol=1e-5, rtol=0)
        elif "bias" in name or name.endswith(".v"):
            assert torch.all(param == 0), name
        else:
            expected = 0.001 if ".attention.key_proj" in name or ".attention.query_proj" in name else 0.01
            assert param.std().item() == pytest.approx(expected, rel=0.15), name
    for embed in (model.encoder.embed, model.decoder.embed):
        assert torch.all(embed.weight[0] == 0)


def model_info(*args: str) -> subprocess.CompletedProcess:
    """`seq2seq model-info ARGS` from the repository root (the entry point, in this process)."""
    return run_main("model-info", *args, cwd=ROOT, text=True)


def test_model_info_prints_modules_and_the_total():
    result = model_info("configs/rnnsearch50.yaml")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1].split() == ["total", f"{RNNSEARCH:,}"]
    modules = ("encoder.embed", "encoder.layers", "decoder.attention", "decoder.maxout", "decoder.output")
    for module in modules:
        assert any(line.startswith(module + " ") for line in lines), module


def test_model_info_vocabulary_sizes_from_the_command_line():
    result = model_info("configs/small_luong.yaml", "--src-vocab", "100", "--tgt-vocab", "50")
    assert result.returncode == 0, result.stderr
    cfg = load_config(ROOT / "configs" / "small_luong.yaml")
    expected = sum(p.numel() for p in build_model(cfg.model, 100, 50).parameters())
    assert result.stdout.splitlines()[-1].split() == ["total", f"{expected:,}"]


def test_model_info_impossible_tying_is_a_one_line_error():
    result = model_info("configs/rnnsearch50.yaml", "--set", "model.tie_embeddings=true")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("seq2seq: error: model.tie_embeddings")
