"""seq2seq-attn: RNN encoder-decoder NMT with attention, and BLEU by sentence length."""

__version__ = "0.1.0"
