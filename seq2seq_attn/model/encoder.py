"""The source encoder: embeddings and a (bidirectional) GRU or LSTM over packed sequences.

Bahdanau et al. 2014, Sec. 3.2: the annotation of word j is h_j = [fwd h_j ; bwd h_j], so it summarises
the words around j in both directions. Packing the batch (pack_padded_sequence) lets cuDNN skip padding,
so the backward RNN starts at each sentence's real last word and padding never changes any output.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..config import ModelConfig
from .recurrent import RNN_CLASSES

PAD = 0  # the padding id (unk 1, bos 2, eos 3), fixed across the project


class Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, cfg.src_embed_dim, padding_idx=PAD)
        self.rnn = RNN_CLASSES[cfg.cell](
            cfg.src_embed_dim,
            cfg.hidden_size,
            num_layers=cfg.encoder_layers,
            bidirectional=cfg.bidirectional,
            batch_first=True,
            dropout=cfg.dropout_hidden if cfg.encoder_layers > 1 else 0.0,
        )
        self.dropout_embed = nn.Dropout(cfg.dropout_embed)
        self.dropout_hidden = nn.Dropout(cfg.dropout_hidden)
        self.directions = 2 if cfg.bidirectional else 1
        self.output_size = self.directions * cfg.hidden_size

    def forward(self, src: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Annotations (batch, src_len, output_size), mask (batch, src_len), last states (batch, output_size).

        `lengths` must be >= 1; positions at or past a sentence's length are padding whatever they contain.
        """
        src_len = src.size(1)
        positions = torch.arange(src_len, device=src.device)
        mask = positions < lengths.to(src.device).unsqueeze(1)  # (batch, src_len)
        embedded = self.dropout_embed(self.embed(src))  # (batch, src_len, src_embed)
        packed = pack_padded_sequence(embedded, lengths.cpu(), batch_first=True, enforce_sorted=False)
        outputs, final = self.rnn(packed)
        annotations, _ = pad_packed_sequence(outputs, batch_first=True, total_length=src_len)
        if isinstance(final, tuple):  # LSTM: (h, c); the summary is h
            final = final[0]
        # final: (layers * directions, batch, hidden); the top layer's directions are the last ones:
        # [fwd h_T ; bwd h_1] for a bidirectional encoder, fwd h_T otherwise.
        top = torch.cat(list(final[-self.directions :]), dim=-1)  # (batch, output_size)
        return self.dropout_hidden(annotations), mask, top
