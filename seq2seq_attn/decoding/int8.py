"""int8 search (`decode.precision: int8`): the decoder's matrix products with int8 weights.

The fastest CPU decoders (Marian, CTranslate2) run their products in 8-bit integers. Here a search-only
copy of the model gets, in every decoder: each weight matrix W (out, in) stored as int8 with one scale
per output row, s_r = max_c |W_rc| / 127, so that a row of small weights keeps its precision next to a
row of large ones; each input x quantised when the product runs (dynamic quantisation, one scale and
zero point per call); the product accumulated in int32 and scaled back to fp32, the bias added in fp32.
The kernels are fbgemm's (PyTorch's `x86` quantised engine), which has AVX2 and AVX-512 code paths.

What becomes int8: every linear layer of the decoder (the attention's query and key projections, the
deep output / Luong's combination, the output layer, the initial state's projection) and the recurrent
cell's per-step matrices (RecurrentStack.step). What stays fp32: the encoder (one pass per sentence,
run by the library RNN), the input-gate table of the target embeddings (a lookup, not a product), the
attention's scores and context sums, and every log-probability and score the search adds up.
"""

from __future__ import annotations

import copy
import functools
import warnings

import torch
from torch import Tensor, nn

from ..console import warn
from ..errors import UserError
from ..model.recurrent import LayerWeights, RecurrentStack
from ..provenance import cpu

INT8_MAX = 127
# The SIMD instructions fbgemm's int8 kernels are written for; without them its products fall back to
# reference code, slower than fp32.
INT8_CPU_FLAGS = ("avx2", "avx512f")
# fbgemm's AVX2 kernels add pairs of int8 x uint8 products in int16, which a full-range input can overflow;
# 7-bit inputs cannot (PyTorch's dynamic quantisation does the same on x86)
REDUCE_RANGE = True


class Int8Weight:
    """W (out, in) and its bias, packed once as int8 with one scale per row; `self(x)` = x W^T + b."""

    def __init__(self, weight: Tensor, bias: Tensor | None = None) -> None:
        weight = weight.detach().float()
        scales = (weight.abs().amax(dim=1) / INT8_MAX).clamp_min(torch.finfo(torch.float32).tiny)
        zero_points = torch.zeros(len(weight), dtype=torch.long)
        # PyTorch deprecates quantised tensors, from which torch 2.13 still packs fbgemm's int8 weights
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "torch.quantize_per_tensor, torch.quantize_per_channel")
            quantized = torch.quantize_per_channel(weight, scales.double(), zero_points, 0, torch.qint8)
        bias = None if bias is None else bias.detach().float()
        self.packed = torch.ops.quantized.linear_prepack(quantized, bias)
        self.out_features = len(weight)

    def __call__(self, x: Tensor) -> Tensor:
        """x (..., in) fp32 -> (..., out) fp32."""
        flat = x.reshape(-1, x.size(-1)).float().contiguous()
        out = torch.ops.quantized.linear_dynamic(flat, self.packed, REDUCE_RANGE)
        return out.view(*x.shape[:-1], self.out_features)


class Int8Linear(nn.Module):
    """An nn.Linear whose forward is the int8 product. It keeps the fp32 parameters it was made from
    (shared, not copied) for whatever reads them, e.g. the lexical shortlist's rows of the output layer."""

    def __init__(self, layer: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self.weight, self.bias = layer.weight, layer.bias
        self.int8 = Int8Weight(layer.weight, layer.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.int8(x)


def int8_step_weights(stack: RecurrentStack) -> list[LayerWeights]:
    """`stack.step_weights()` with every matrix packed as int8 (each bias packed with its matrix)."""
    return [
        LayerWeights(
            None if w.w_ih is None else Int8Weight(w.w_ih, w.b_ih), None, Int8Weight(w.w_hh, w.b_hh), None
        )
        for w in stack.step_weights()
    ]


def quantized(model: nn.Module) -> nn.Module:
    """A copy of `model` (a Seq2Seq or an Ensemble of them, on the CPU) for int8 search: every decoder's
    linear layers and recurrent step matrices int8 (module docstring); `model` itself is left as it is."""
    search_copy = copy.deepcopy(model).eval()
    decoders = [module for name, module in search_copy.named_modules() if name.split(".")[-1] == "decoder"]
    for decoder in decoders:
        for parent in list(decoder.modules()):
            for name, child in parent.named_children():
                if type(child) is nn.Linear:
                    setattr(parent, name, Int8Linear(child))
            if isinstance(parent, RecurrentStack):
                parent.int8_weights = int8_step_weights(parent)
    return search_copy


def search_copy(model: nn.Module, device: torch.device | str, option: str) -> nn.Module:
    """`quantized(model)` for `decode.precision: int8` (`option`: how the caller names that setting): a
    one-line error on a GPU, and a warning where the CPU lacks the kernels' instructions."""
    if torch.device(device).type != "cpu":
        raise UserError(f"{option} int8 runs on the CPU only: use bf16 or fp32 on {device}")
    flags = cpu().flags
    if flags is not None and flags.isdisjoint(INT8_CPU_FLAGS):
        _warn_slow_int8()
    return quantized(model)


@functools.cache
def _warn_slow_int8() -> None:
    warn(
        "precision int8 on a CPU without AVX2: the int8 kernels fall back to reference code there and run "
        "slower than fp32 (docs/performance.md); precision fp32 is faster on this CPU"
    )
