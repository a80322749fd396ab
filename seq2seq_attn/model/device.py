"""Where tensors live and in which precision: one rule for every command that takes `auto | cpu | cuda`
and for both `train.precision` and `decode.precision`.

The precisions: fp32; tf32, fp32 numbers whose matrix products and cuDNN RNNs run on a GPU's TF32 tensor
cores (Ampere and newer: 10 mantissa bits in the products, fp32 sums); bf16, autocast; auto, bf16 on a GPU
and fp32 on a CPU. fp32 means fp32 on a GPU too: torch's own default lets cuDNN's RNNs use TF32.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from pathlib import Path

import torch

from ..console import warn
from ..errors import UserError
from ..provenance import CPUINFO, cpu

# CPU instructions that multiply bf16 natively; without them bf16 products are emulated, many times slower
# than fp32 (docs/performance.md).
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def resolve_device(choice: str, option: str, index: int = 0) -> torch.device:
    """`auto` is CUDA device `index` when one is available, else the CPU; `cuda` is device `index`,
    `cuda:N` device N. Asking for a CUDA device that is not there, or for anything else, is a one-line
    error naming the option (`train.device`, `--device`, the API's `device`)."""
    kind, _, number = choice.partition(":")
    if kind not in ("auto", "cpu", "cuda") or (":" in choice and (kind != "cuda" or not number.isdigit())):
        raise UserError(f"{option} must be auto, cpu, cuda or cuda:N, got {choice!r}")
    if kind == "cuda":
        wanted = int(number) if number else index
        found = torch.cuda.device_count()
        if wanted >= found:
            there = f"only {found} CUDA device(s) are available" if found else "no CUDA device is available"
            raise UserError(f"{option} is {choice!r} but {there}")
        return torch.device("cuda", wanted)
    if kind == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", index)


def uses_bf16(precision: str, device: torch.device) -> bool:
    """`bf16`, or `auto` on CUDA: bf16 autocast. `auto` stays fp32 on CPU, where exact resume and
    batch-invariant search are fp32 guarantees and bf16 pays only on some CPUs: opt-in, with a warning
    where the CPU lacks native bf16 (`cpu_has_bf16`)."""
    if precision == "bf16" and device.type == "cpu" and not cpu_has_bf16():
        _warn_slow_bf16()
    return precision == "bf16" or (precision == "auto" and device.type == "cuda")


def uses_tf32(precision: str, device: torch.device) -> bool:
    """`tf32` on a CUDA device. On a CPU, which has no TF32, it runs fp32, with a warning."""
    if precision == "tf32" and device.type == "cpu":
        _warn_cpu_tf32()
    return precision == "tf32" and device.type == "cuda"


_tf32_lock = threading.Lock()
_tf32_inside: list[bool] = []  # the `enabled` of each block now inside tf32_products, in any thread
_tf32_before = [False, False]  # torch's (cuBLAS, cuDNN) settings before the first of them


@contextlib.contextmanager
def tf32_products(enabled: bool) -> Iterator[None]:
    """Inside: fp32 matrix products (cuBLAS) and cuDNN's RNNs in TF32 when `enabled`, in fp32 otherwise;
    torch's settings as they were once the last such block ends.

    torch's switch is process-wide (backward passes run inside it too), and a server's searches take
    turns step by step in several threads: TF32 is on while any block inside asks for it, so a TF32
    search keeps it to its end (a block that set and restored the switch on its own would turn it off
    under another's feet), and an fp32 search beside a TF32 one runs in TF32 too."""
    with _tf32_lock:
        if not _tf32_inside:
            _tf32_before[:] = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        _tf32_inside.append(enabled)
        on = any(_tf32_inside)
        _set_tf32(on, on)
    try:
        yield
    finally:
        with _tf32_lock:
            _tf32_inside.remove(enabled)
            on = any(_tf32_inside)
            _set_tf32(*((on, on) if _tf32_inside else _tf32_before))


def _set_tf32(cublas: bool, cudnn: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = cublas, cudnn


@functools.cache
def _warn_cpu_tf32() -> None:
    warn("precision tf32 on a CPU: TF32 is a GPU format (Ampere and newer); this runs fp32")


@functools.cache
def cpu_has_bf16(cpuinfo: Path = CPUINFO) -> bool:
    """Whether the CPU has native bf16 products (AVX-512 BF16 or AMX); True where its flags cannot be
    read, so that nothing is claimed about a CPU not looked at."""
    flags = cpu(cpuinfo).flags
    return flags is None or not flags.isdisjoint(BF16_CPU_FLAGS)


@functools.cache
def onednn_lacks_bf16() -> bool:
    """Whether this CPU's oneDNN, where torch runs the LSTM, has no bf16 kernels (CPUs without AVX-512,
    such as AMD Zen 3): autocast hands it bf16 there all the same, and the LSTM fails
    (recurrent.run_library keeps it out of autocast)."""
    return torch.backends.mkldnn.is_available() and not torch.ops.mkldnn._is_mkldnn_bf16_supported()


@functools.cache
def _warn_slow_bf16() -> None:
    warn(
        "precision bf16 on a CPU without AVX-512 BF16 or AMX: bf16 products are emulated there and run "
        "many times slower than fp32 (docs/performance.md); precision fp32 is faster on this CPU"
    )


def bf16_autocast(device_type: str, enabled: bool) -> torch.autocast:
    """The one mixed-precision context of training, validation and search: bf16 autocast when enabled
    (see `uses_bf16`); a no-op context otherwise."""
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=enabled)


@contextlib.contextmanager
def decode_precision(precision: str, device: torch.device) -> Iterator[None]:
    """Inside: a model run in `decode.precision` on `device` (bf16 autocast or TF32 products where it asks
    for them), as search and the forced pass run it."""
    bf16, tf32 = uses_bf16(precision, device), uses_tf32(precision, device)
    with bf16_autocast(device.type, bf16), tf32_products(tf32):
        yield


def captures(choice: str, key: str, obstacle: str | None) -> bool:
    """Whether a `cuda_graphs` setting `choice` (config key `key`) captures CUDA graphs: `auto` where
    nothing stands in the way, `on` the same and a one-line error where something does (`obstacle`, why
    not, or None), `off` never."""
    if choice == "on" and obstacle:
        raise UserError(f"{key} is 'on' but {obstacle}; set {key} to auto or off")
    return choice != "off" and obstacle is None


def attention_dtype(device_type: str) -> torch.dtype:
    """The dtype of attention's scores, softmax and context products under autocast.

    On a CPU these are elementwise work and small per-sentence products (batch x 1 x src_len @ src_len x
    annotation), which run faster in fp32 than in bf16 there (docs/performance.md); on a GPU, the autocast
    dtype.
    """
    return torch.float32 if device_type == "cpu" else torch.get_autocast_dtype(device_type)
