"""The source encoder: embeddings and a (bidirectional) GRU or LSTM.

Bahdanau et al. 2014, Sec. 3.2: the annotation of word j is h_j = [fwd h_j ; bwd h_j], so it summarises
the words around j in both directions. Padding must never change an output, so the backward RNN has to
start at each sentence's own last word. Rather than packing the batch, each layer runs one library RNN per
direction over the padded batch, the backward one over every sentence reversed within its length: padding
then only ever follows the real words, in both directions, and its outputs are set to zero afterwards.
Why not `pack_padded_sequence`: on a CPU the packed RNN's backward pass accumulates a full-size gradient
at every time step, and PyTorch runs its oneDNN RNN kernels only on padded input, so the unpacked forward +
backward is the faster one (measure with `python -m benchmarks.bench_step`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..config import ModelConfig
from ..vocab.pieces import PAD_ID
from .recurrent import RNN_CLASSES, run_library


class Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, cfg.src_embed_dim, padding_idx=PAD_ID)
        self.directions = 2 if cfg.bidirectional else 1
        self.hidden_size = cfg.hidden_size
        self.output_size = self.directions * cfg.hidden_size
        # layers[k][d]: one single-layer RNN per layer k and direction d (0 forward, 1 backward);
        # layer k > 0 reads [fwd ; bwd] of layer k - 1
        self.layers = nn.ModuleList(
            nn.ModuleList(
                RNN_CLASSES[cfg.cell](
                    cfg.src_embed_dim if k == 0 else self.output_size, cfg.hidden_size, batch_first=True
                )
                for _ in range(self.directions)
            )
            for k in range(cfg.encoder_layers)
        )
        self.dropout_embed = nn.Dropout(cfg.dropout_embed)
        self.dropout_between = cfg.dropout_hidden if cfg.encoder_layers > 1 else 0.0  # as nn.GRU's dropout
        self.dropout_hidden = nn.Dropout(cfg.dropout_hidden)

    def forward(self, src: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Annotations (batch, src_len, output_size), mask (batch, src_len), last states (batch, output_size).

        `lengths` must be >= 1; positions at or past a sentence's length are padding whatever they contain.
        They belong on src's device (training's batches and search put them there): a copy made here from
        the CPU waits for the GPU, and a training update captured in a CUDA graph cannot make it.
        """
        src_len = src.size(1)
        lengths = lengths.to(src.device)
        positions = torch.arange(src_len, device=src.device)
        mask = positions < lengths.unsqueeze(1)  # (batch, src_len)
        # position read at time t by the backward RNN: len - 1 - t inside the sentence, t in the padding
        reverse = torch.where(mask, lengths.unsqueeze(1) - 1 - positions, positions)  # (batch, src_len)
        x = self.dropout_embed(self.embed(src))  # (batch, src_len, src_embed)
        for k, rnns in enumerate(self.layers):
            if k:
                x = F.dropout(x, self.dropout_between, self.training)
            outputs = [run_library(rnns[0], x)[0]]  # fwd h_j: (batch, src_len, hidden)
            if self.directions == 2:
                backward, _ = run_library(rnns[1], reorder(x, reverse))
                outputs.append(reorder(backward, reverse))  # bwd h_j, back in source order
            x = torch.cat(outputs, dim=-1)  # (batch, src_len, output_size)
        annotations = x * mask.unsqueeze(-1)  # zeros at padding
        # [fwd h_T ; bwd h_1]: the forward state at each sentence's last word, the backward one at its first
        last = x[torch.arange(len(x), device=x.device), lengths - 1, : self.hidden_size]  # (batch, hidden)
        final = torch.cat([last, x[:, 0, self.hidden_size :]], dim=-1)  # (batch, output_size)
        return self.dropout_hidden(annotations), mask, final


def reorder(x: Tensor, index: Tensor) -> Tensor:
    """x (batch, len, features) with time steps taken in the order index (batch, len) gives."""
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.size(-1)))
