"""The hand-written backward passes of the decoders' recurrences (model/fused.py: RNNsearch's and Luong's
input feeding) against autograd on the step-by-step code: the same outputs and the same gradient for every
input and weight."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers import (
    assert_as_accurate,
    assert_compiled_attention_equals_eager,
    batch,
    errors_against_float64,
    recurrence,
    tiny_model,
)

from seq2seq_attn.model import fused
from seq2seq_attn.model.attention import INDUCTOR_CACHE, separate_kernel_cache

FUSED = [
    ("rnnsearch", "bahdanau"),
    ("rnnsearch", "concat"),
    ("rnnsearch-uta", "bahdanau"),
    ("rnnsearch-cgru", "bahdanau"),
    ("rnnsearch-cgru", "concat"),
    ("rnnsearch-coverage-linguistic", "bahdanau"),
    ("rnnsearch-uta-coverage-linguistic", "bahdanau"),
    ("rnnsearch-cgru-coverage-linguistic", "concat"),
    ("luong-feed", "general"),
    ("luong-feed", "dot"),
]


@pytest.mark.parametrize(("decoder", "attention"), FUSED)
@pytest.mark.parametrize("encoder", ["gru-bi-1", "gru-uni-1"])
def test_fused_recurrence_equals_autograd_in_float64(encoder, decoder, attention, monkeypatch):
    model = tiny_model(encoder, attention, decoder).double().train()
    assert fused.applies(model.decoder)
    src, lengths, tgt_in = batch()
    runs = []
    for use_fused in (True, False):
        model.zero_grad(set_to_none=True)
        runs.append(recurrence(model, src, lengths, tgt_in, use_fused, monkeypatch))
    (outputs, grads), (want_outputs, want_grads) = runs
    for got, want in zip(outputs, want_outputs, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    names = ["keys", "annotations", "embedded"] + [name for name, _ in sorted(model.named_parameters())]
    for name, got, want in zip(names, grads, want_grads, strict=True):
        assert (got is None) == (want is None), name
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12, msg=name)
    assert grads[0][1, 3:].abs().sum() == 0  # the padding of sentence 2 (length 3) gets no gradient


@pytest.mark.parametrize(
    ("decoder", "attention"),
    [
        ("rnnsearch", "bahdanau"),
        ("rnnsearch-cgru", "bahdanau"),
        ("rnnsearch-uta-coverage-linguistic", "bahdanau"),
        ("luong-feed", "general"),
    ],
)
def test_fused_recurrence_under_bf16_autocast_is_as_accurate_as_autograd(decoder, attention, monkeypatch):
    """bf16 rounds differently in the two codes; both must be as close to the float64 result."""
    fused_errors, autograd_errors = errors_against_float64(
        ("gru-bi-1", attention, decoder), "cpu", True, monkeypatch
    )
    assert_as_accurate(fused_errors, autograd_errors, largest=0.2, slack=0.01, ratio=1.25)


@pytest.mark.parametrize(
    ("decoder", "attention", "function"),
    [("rnnsearch", "bahdanau", "attentive_gru"), ("luong-feed", "general", "feeding_gru")],
)
def test_training_loss_uses_the_fused_recurrence_only_when_gradients_are_needed(
    decoder, attention, function, monkeypatch
):
    model = tiny_model("gru-bi-1", attention, decoder).train()
    calls = []
    original = getattr(fused, function)
    monkeypatch.setattr(fused, function, lambda *a: calls.append(1) or original(*a))
    src, lengths, tgt_in = batch()
    targets = tgt_in.roll(-1, 1)
    model(src, lengths, tgt_in, targets).backward()
    assert calls == [1]
    with torch.no_grad():
        model(src, lengths, tgt_in, targets)
    assert calls == [1]


def test_fused_recurrences_cover_one_layer_grus_with_their_decoders_scores():
    covered = [("gru-bi-1", a, d) for d, a in FUSED] + [("gru-uni-1", "general", "luong-feed")]
    not_covered = [
        ("lstm-bi-1", "bahdanau", "rnnsearch"),
        ("gru-bi-1", "general", "rnnsearch"),
        ("gru-bi-2", "bahdanau", "rnnsearch"),
        ("gru-bi-1", "bahdanau", "luong-feed"),
        ("lstm-bi-1", "general", "luong-feed"),
        ("gru-bi-2", "dot", "luong-feed"),
        ("gru-bi-1", "bahdanau", "rnnsearch-uta-coverage-neural"),
        ("gru-bi-1", "bahdanau", "rnnsearch-cgru-coverage-neural"),
    ]
    assert all(fused.applies(tiny_model(*variant).decoder) for variant in covered)
    assert not any(fused.applies(tiny_model(*variant).decoder) for variant in not_covered)


@pytest.mark.slow
def test_compiled_attention_computes_what_the_eager_code_does(monkeypatch):
    """`train.compile` / `decode.compile`: the torch.compile'd attention kernels (fused training loop,
    forward and backward; the step path of search) against the same model run eagerly, in float64."""
    assert_compiled_attention_equals_eager("cpu", monkeypatch)


@pytest.mark.slow
def test_compiled_attention_under_autograd_on_the_step_path():
    """Configurations without a fused Function (here an LSTM) train through the compiled kernel under
    autograd: the same loss and gradients as eager, in float64."""
    src, lengths, tgt_in = batch()
    runs = []
    for compiled in (True, False):
        model = tiny_model("lstm-bi-1", "bahdanau", "rnnsearch").double().train()
        assert not fused.applies(model.decoder)
        model.decoder.attention.compiled = compiled
        torch.manual_seed(5)
        loss = model(src, lengths, tgt_in, tgt_in.roll(-1, 1))
        loss.backward()
        runs.append([loss] + [p.grad for p in model.parameters()])
    for got, want in zip(*runs, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)


def test_compiled_kernels_are_cached_apart_per_cpu_capability(monkeypatch, tmp_path):
    """torch.compile's kernel cache does not tell ATen's CPU capabilities apart (kernels built under avx512
    computed NaN under avx2): each capability gets its own folder, unless the user chose one."""
    monkeypatch.delenv(INDUCTOR_CACHE, raising=False)
    separate_kernel_cache()
    capability = torch.backends.cpu.get_cpu_capability().lower()
    assert Path(os.environ[INDUCTOR_CACHE]).name == capability
    default = Path(os.environ[INDUCTOR_CACHE]).parent
    monkeypatch.setenv(INDUCTOR_CACHE, str(default))  # what importing torch._dynamo (an optimiser) writes
    separate_kernel_cache()
    assert os.environ[INDUCTOR_CACHE] == str(default / capability)
    monkeypatch.setenv(INDUCTOR_CACHE, str(tmp_path))
    separate_kernel_cache()
    assert os.environ[INDUCTOR_CACHE] == str(tmp_path)
