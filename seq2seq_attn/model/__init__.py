"""The model stage: bidirectional RNN encoder, attention scorers, RNNsearch / RNNencdec and Luong decoders,
and the device and precision they run in.
"""

from .seq2seq import Seq2Seq, build_model
from .states import DecoderState, EncoderOutput

__all__ = ["DecoderState", "EncoderOutput", "Seq2Seq", "build_model"]
