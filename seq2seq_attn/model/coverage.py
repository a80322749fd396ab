"""The coverage model of the attention (Tu et al. 2016, "Modeling Coverage for Neural Machine Translation",
sec. 3; `model.coverage`).

Why: RNNsearch's attention has no memory of where it has already looked, so on long sentences it skips
source words and translates others twice. A coverage vector C_j per source word remembers the attention
j has received; the alignment model reads it (attention.py, `Attention.forward`'s `coverage`):
    e_ij = v_a^T tanh(W_a s + U_a h_j + V_a C_{i-1,j})
and after each step the coverage is updated from the weights alpha_ij that step paid:
- linguistic (sec. 3.1.1), one number per word, the attention received over the word's fertility:
      Phi_j = N sigmoid(U_f h_j),   C_{i,j} = C_{i-1,j} + alpha_ij / Phi_j
- neural (sec. 3.1.2), `model.coverage_dim` numbers per word, a GRU over (alpha_ij, h_j, s):
      C_{i,j} = GRU(C_{i-1,j}, [alpha_ij ; h_j ; s])
s is the decoder state that queried attention (t_{i-1} in the paper).

What depends on the sentence only (1 / Phi_j; the GRU's input gates from h_j) is computed once per batch
(`prepare`), stored in `EncoderOutput.coverage_source` and shared by a sentence's beams, as the attention's
keys are. The coverage itself is per hypothesis, `DecoderState.coverage` (rows, src_len, size), so beam
search reorders it with the rest of the state. Padding positions keep C = 0.

Not to be confused with `decode.coverage_penalty` (search.py), which rescores finished hypotheses by the
attention they paid; the two combine: the penalty reads whatever weights the model gave.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from .recurrent import gru_update


class Coverage(nn.Module):
    def __init__(self, cfg: ModelConfig, annotation_size: int, query_size: int) -> None:
        super().__init__()
        self.kind = cfg.coverage
        self.size = cfg.coverage_dim if self.kind == "neural" else 1  # units of C per source word
        if self.kind == "linguistic":
            self.fertility = nn.Linear(annotation_size, 1)  # U_f (with a bias)
            self.max_fertility = cfg.max_fertility  # N
        else:  # the GRU's input gates from h_j, from s and from alpha, and its recurrent gates from C
            self.source_gates = nn.Linear(annotation_size, 3 * self.size)  # (with the input bias)
            self.query_gates = nn.Linear(query_size, 3 * self.size, bias=False)
            self.weight_gates = nn.Parameter(torch.empty(3 * self.size))
            nn.init.uniform_(self.weight_gates, -1.0, 1.0)  # nn.Linear's default for one input
            self.coverage_gates = nn.Linear(self.size, 3 * self.size)  # (with the recurrent bias)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, size={self.size}"

    def prepare(self, annotations: Tensor) -> Tensor:
        """What the update reads of each source word, once per batch: 1 / Phi_j (batch, src_len, 1)
        (linguistic) or the GRU's input gates from h_j (batch, src_len, 3 size) (neural)."""
        if self.kind == "linguistic":
            return 1 / (self.max_fertility * torch.sigmoid(self.fertility(annotations)))  # 1 / Phi_j
        return self.source_gates(annotations)

    def update(self, coverage: Tensor, alpha: Tensor, source: Tensor, mask: Tensor, query: Tensor) -> Tensor:
        """C_i from C_{i-1} (rows, src_len, size), the step's weights alpha_i (rows, src_len), `prepare`'s
        source terms (batch, src_len, ...), the mask (batch, src_len) and the query state s (rows, hid).

        rows is the batch or a multiple of it (a sentence's consecutive beams), as in attention."""
        batch, src_len = mask.shape
        per_sentence = coverage.view(batch, -1, src_len, self.size)  # (batch, beams, src_len, size)
        alpha = alpha.view(batch, -1, src_len, 1).to(coverage.dtype)
        if self.kind == "linguistic":
            updated = per_sentence + alpha * source.unsqueeze(1)  # C + alpha_ij / Phi_j
        else:
            query_gates = self.query_gates(query).view(batch, -1, 1, 3 * self.size)
            gates_x = source.unsqueeze(1) + query_gates + alpha * self.weight_gates  # [alpha ; h_j ; s]
            updated = gru_update(gates_x, self.coverage_gates(per_sentence), per_sentence)
        updated = updated * mask.view(batch, 1, src_len, 1)  # padding stays 0
        return updated.view_as(coverage)
