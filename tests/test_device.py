"""The precision rule: bf16 on a CPU without native bf16 products is allowed, with one warning."""

from __future__ import annotations

import contextlib

import pytest
import torch

from seq2seq_attn.errors import UserError
from seq2seq_attn.model import device


def flags_file(tmp_path, name: str, flags: str):
    path = tmp_path / name
    path.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse2 avx2 {flags}\n")
    return path


def test_native_bf16_is_read_from_the_cpu_flags(tmp_path):
    assert device.cpu_has_bf16(flags_file(tmp_path, "zen4", "avx512f avx512_bf16"))
    assert device.cpu_has_bf16(flags_file(tmp_path, "sapphire", "amx_bf16 amx_tile"))
    assert not device.cpu_has_bf16(flags_file(tmp_path, "avx512-only", "avx512f fma"))
    assert not device.cpu_has_bf16(flags_file(tmp_path, "avx2-only", "fma"))
    assert device.cpu_has_bf16(tmp_path / "missing")  # unreadable: nothing claimed


def test_bf16_on_a_cpu_without_it_warns_once(monkeypatch, capsys):
    monkeypatch.setattr(device, "cpu_has_bf16", lambda: False)
    device._warn_slow_bf16.cache_clear()
    cpu = torch.device("cpu")
    assert device.uses_bf16("bf16", cpu) and device.uses_bf16("bf16", cpu)
    assert not device.uses_bf16("auto", cpu) and not device.uses_bf16("fp32", cpu)
    assert capsys.readouterr().err.count("without AVX-512 BF16 or AMX") == 1
    monkeypatch.setattr(device, "cpu_has_bf16", lambda: True)
    device._warn_slow_bf16.cache_clear()
    assert device.uses_bf16("bf16", cpu)
    assert capsys.readouterr().err == ""


def test_tf32_is_a_gpu_setting_that_a_cpu_runs_as_fp32(capsys):
    device._warn_cpu_tf32.cache_clear()
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert device.uses_tf32("tf32", cuda) and not device.uses_tf32("fp32", cuda)
    assert not device.uses_tf32("auto", cuda) and not device.uses_tf32("bf16", cuda)
    assert not device.uses_tf32("tf32", cpu) and not device.uses_tf32("tf32", cpu)
    assert capsys.readouterr().err.count("TF32 is a GPU format") == 1
    assert not device.uses_bf16("tf32", cuda)


def test_tf32_products_switch_cublas_and_cudnn_and_put_them_back():
    """fp32 is fp32 inside (torch lets cuDNN use TF32 by default), tf32 is TF32 for both; as before after."""
    settings = lambda: (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)  # noqa: E731
    before = settings()
    for enabled in (True, False):
        with device.tf32_products(enabled):
            assert settings() == (enabled, enabled)
        assert settings() == before


def test_tf32_stays_on_while_any_search_inside_asks_for_it():
    """Searches of a server interleave (threads taking turns): one that ends puts nothing back under
    another still inside; torch's settings come back when the last one ends."""
    settings = lambda: (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)  # noqa: E731
    before = settings()
    first, second = contextlib.ExitStack(), contextlib.ExitStack()
    first.enter_context(device.tf32_products(True))
    second.enter_context(device.tf32_products(True))
    first.close()  # the first search ends while the second goes on
    assert settings() == (True, True)
    first.enter_context(device.tf32_products(False))  # an fp32 search beside it runs in TF32 too
    assert settings() == (True, True)
    second.close()
    assert settings() == (False, False)
    first.close()
    assert settings() == before


def test_decode_precision_runs_a_model_as_decode_precision_asks(monkeypatch):
    """bf16: autocast; tf32 on a GPU: TF32 products (switched without one: only torch's flags change);
    fp32: neither; torch's settings as they were afterwards."""
    monkeypatch.setattr(device, "cpu_has_bf16", lambda: True)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    tf32 = lambda: torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32  # noqa: E731
    before = tf32(), torch.is_autocast_enabled("cpu")
    with device.decode_precision("bf16", cpu):
        assert torch.is_autocast_enabled("cpu") and not tf32()
    with device.decode_precision("tf32", cuda):
        assert tf32() and not torch.is_autocast_enabled("cuda")
    for precision in ("fp32", "int8", "auto"):
        with device.decode_precision(precision, cpu):
            assert not tf32() and not torch.is_autocast_enabled("cpu")
    assert (tf32(), torch.is_autocast_enabled("cpu")) == before


def test_a_device_is_auto_cpu_cuda_or_cuda_n_and_a_missing_one_is_an_error(monkeypatch):
    """`cuda:N` names device N (the API's `device`); a device that is not there, or a misspelt one, is a
    one-line error naming the option, never a silent fall-back to the CPU or to device 0."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert device.resolve_device("cuda:1", "device") == torch.device("cuda", 1)
    assert device.resolve_device("cuda", "train.device", index=1) == torch.device("cuda", 1)
    assert device.resolve_device("auto", "device") == torch.device("cuda", 0)
    assert device.resolve_device("cpu", "device") == torch.device("cpu")
    with pytest.raises(UserError, match=r"^device is 'cuda:2' but only 2 CUDA device\(s\) are available$"):
        device.resolve_device("cuda:2", "device")
    for wrong in ("gpu", "cuda:x", "cpu:0", "cuda:"):
        with pytest.raises(UserError, match=rf"^--device must be auto, cpu, cuda or cuda:N, got '{wrong}'$"):
            device.resolve_device(wrong, "--device")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert device.resolve_device("auto", "device") == torch.device("cpu")
    with pytest.raises(UserError, match="^device is 'cuda:1' but no CUDA device is available$"):
        device.resolve_device("cuda:1", "device")
