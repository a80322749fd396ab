"""The encoder-decoder as training and search see it, and `build_model` from the `model` config section.

Training calls `forward` (teacher forcing). Search calls `encode` once per batch, `init_state`, then `step`
once per output token; `EncoderOutput.index_select` / `DecoderState.index_select` expand, reorder and
shrink the batch. `step` is `forward`'s decoder run on a single token, so both give the same numbers.
Special ids: pad 0, unk 1, bos 2, eos 3; `tgt_in` starts with bos.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..errors import UserError
from .attention import ADDITIVE, Attention
from .coverage import Coverage
from .cross_entropy import summed_cross_entropy
from .decoder import DECODERS
from .device import attention_dtype
from .encoder import Encoder
from .states import DecoderState, EncoderOutput


class Seq2Seq(nn.Module):
    def __init__(self, encoder: Encoder, decoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def compile_attention(self, enabled: bool) -> None:
        """Run the additive attention's per-step work torch.compile'd (`train.compile`, `decode.compile`;
        see attention.kernel)."""
        self.decoder.attention.compiled = enabled

    def encode(self, src: Tensor, src_lengths: Tensor) -> EncoderOutput:
        """src (batch, src_len) ids, src_lengths (batch,) >= 1 -> annotations, mask and attention keys."""
        annotations, mask, final = self.encoder(src, src_lengths)
        if torch.is_autocast_enabled(src.device.type):
            # Cast once here, into the dtype attention runs in, not at every decoder step: autocast re-casts
            # a non-weight operand on every use, and every step reads all annotations and keys (in bf16
            # search, re-casting the annotations was once a third of the time).
            annotations = annotations.to(attention_dtype(src.device.type))
        keys, context = self.decoder.attention.prepare(annotations, final)
        keys = keys.to(annotations.dtype) if keys is not None else None
        coverage = self.decoder.coverage  # a coverage model's per-word terms, once per batch as the keys
        source = coverage.prepare(annotations).to(annotations.dtype) if coverage is not None else None
        return EncoderOutput(annotations, mask, final, keys, context, coverage_source=source)

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        return self.decoder.init(enc)

    def forward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        tgt_out: Tensor | None = None,
        label_smoothing: float = 0.0,
        return_attention: bool = False,
        n_targets: int | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Teacher forcing on inputs tgt_in (batch, tgt_len) = <bos> y_1 ...

        With the targets tgt_out (batch, tgt_len) = y_1 ... <eos>, PAD-padded: the summed token cross-entropy
        in fp32 (see `summed_cross_entropy`; it is computed here so that DDP sees it inside `forward`);
        n_targets, the count of non-PAD targets when the caller knows it: only those rows are projected
        (without it, every row, padding weighted 0).
        Without: the logits (batch, tgt_len, vocab), with return_attention also the weights
        (batch, tgt_len, src_len).
        """
        enc = self.encode(src, src_lengths)
        features, _, weights = self.decoder(enc, self.init_state(enc), tgt_in)
        if tgt_out is not None:
            vocab_size = self.decoder.output.out_features
            return summed_cross_entropy(
                self.logits, features, tgt_out, vocab_size, label_smoothing, n_real=n_targets
            )
        logits = self.logits(features)
        return (logits, weights) if return_attention else logits

    def logits(self, features: Tensor) -> Tensor:
        """The vocabulary projection of the decoder's features: (..., pre_output) -> (..., vocab)."""
        return self.decoder.output(self.decoder.dropout_output(features))

    def step(
        self, enc: EncoderOutput, state: DecoderState, y_prev: Tensor
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """One output token: log-probabilities (batch, vocab), next state, attention weights (batch, src_len).

        For attention `none` the weights are uniform over the real source positions (see attention.py).
        """
        features, state, weights = self.step_features(enc, state, y_prev)
        logits = self.logits(features)  # (batch, vocab)
        return torch.log_softmax(logits.float(), dim=-1), state, weights

    def step_features(
        self, enc: EncoderOutput, state: DecoderState, y_prev: Tensor
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """One decoder step up to the output layer: features (batch, pre_output), next state, attention
        weights (batch, src_len); `step` and the lexical shortlist (decoding/shortlist.py) add their output
        layer."""
        features, state, weights = self.decoder(enc, state, y_prev.unsqueeze(1))
        return features.squeeze(1), state, weights.squeeze(1)


def build_model(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> Seq2Seq:
    """The model the config describes, initialised as `model.init` says, on torch's default device."""
    check_model_config(cfg)
    encoder = Encoder(cfg, src_vocab_size)
    decoder = DECODERS[cfg.decoder](cfg, tgt_vocab_size, encoder.output_size)
    model = Seq2Seq(encoder, decoder)
    if cfg.init == "paper":
        init_paper_(model)
    if cfg.tie_embeddings:
        decoder.output.weight = decoder.embed.weight
    return model


def pre_output_size(cfg: ModelConfig) -> int:
    """Size of the vector the output projection reads: t_i (maxout) for RNNsearch, h~_t for Luong."""
    return cfg.maxout_dim if cfg.decoder == "rnnsearch" else cfg.decoder_hidden_size


def check_model_config(cfg: ModelConfig) -> None:
    """Size combinations that the schema's per-key checks cannot see."""
    annotation = cfg.hidden_size * (2 if cfg.bidirectional else 1)
    if cfg.attention == "dot" and cfg.decoder_hidden_size != annotation:
        raise UserError(
            f"model.attention: dot needs model.decoder_hidden_size ({cfg.decoder_hidden_size}) equal to the "
            f"annotation size ({annotation} = model.hidden_size x {annotation // cfg.hidden_size} "
            "directions); use `general` or change the sizes"
        )
    rnnsearch = cfg.decoder == "rnnsearch"
    if cfg.coverage != "none" and not (rnnsearch and cfg.attention in ADDITIVE):
        raise UserError(
            f"model.coverage: {cfg.coverage} needs decoder rnnsearch with additive attention (bahdanau or "
            f"concat), not {cfg.decoder} with {cfg.attention}; set coverage: none"
        )
    if cfg.decoder_step == "conditional" and rnnsearch:
        conditional_gru = cfg.attends and cfg.cell == "gru" and cfg.decoder_layers == 1
        if not conditional_gru:
            raise UserError(
                "model.decoder_step: conditional (the conditional GRU) needs attention, cell gru and one "
                f"decoder layer, not attention {cfg.attention}, cell {cfg.cell}, {cfg.decoder_layers} layers"
            )
    if cfg.tie_embeddings and cfg.tgt_embed_dim != pre_output_size(cfg):
        what = "model.maxout_dim" if cfg.decoder == "rnnsearch" else "model.decoder_hidden_size"
        raise UserError(
            f"model.tie_embeddings: needs model.tgt_embed_dim ({cfg.tgt_embed_dim}) equal to {what} "
            f"({pre_output_size(cfg)}), the size the output projection reads; set tie_embeddings: false"
        )


@torch.no_grad()
def init_paper_(model: Seq2Seq) -> None:
    """Bahdanau et al. 2014, Appendix A.2 (B.1 in later versions): recurrent matrices random orthogonal (one
    per gate); the alignment model's W_a and U_a ~ N(0, 0.001^2) and v_a = 0; biases 0; every other weight
    matrix (embeddings included) ~ N(0, 0.01^2). Applied the same way to the Luong family and to the
    neural coverage's GRU (Tu et al. 2016: its recurrent matrix orthogonal per gate, its alpha weights
    as every other input weight)."""
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.01)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
            if getattr(module, "padding_idx", None) is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.RNNBase):
            for name, param in module.named_parameters():
                if name.startswith("weight_hh"):  # (gates * hidden, hidden): one orthogonal block per gate
                    for block in param.split(module.hidden_size):
                        nn.init.orthogonal_(block)
                elif name.startswith("weight_ih"):
                    nn.init.normal_(param, std=0.01)
                else:
                    nn.init.zeros_(param)
    for module in model.modules():  # after the generic pass above, which also visited these Linears
        if isinstance(module, Attention) and module.kind in (*ADDITIVE, "general"):
            nn.init.normal_(module.key_proj.weight, std=0.001)  # U_a (general: W_a)
            if module.kind in ADDITIVE:
                nn.init.normal_(module.query_proj.weight, std=0.001)  # W_a
                nn.init.zeros_(module.v)  # v_a
        if isinstance(module, Coverage) and module.kind == "neural":
            nn.init.normal_(module.weight_gates, std=0.01)  # a plain parameter: the pass above skips it
            for block in module.coverage_gates.weight.split(module.size):  # (size, size) per gate
                nn.init.orthogonal_(block)
