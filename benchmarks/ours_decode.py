"""Decode a test set with one of our checkpoints and time it the way the peers time themselves.

The model is loaded first; the clock then runs over what `seq2seq translate` does with a file (chunks of
lines -> sentencepiece -> sorted, batched beam search -> detokenised text), like OpenNMT-py's "Total
translation time" and JoeyNMT's "Generation took". The search settings are the benchmark's, shared with the
peers: fixed maximum output length, GNMT length penalty, batches of about `batch` sentences, and the
peers' stopping rule (a sentence ends once the best candidate of a step is EOS: `decode.stopping: top`).
The speed levers are the product's own: `--precision int8`, `--lexical-shortlist` (the run's table).

Prints: Decoding took X s for N sentences and T target tokens   (T: generated pieces, EOS excluded)

With `--count-macs` it then translates the whole input again, in the same chunks and length-sorted
batches, in fp32, under torch's `FlopCounterMode` (untimed, not written out), and prints the matrix
products' multiply-adds per generated piece (encoder included; an int8 search does the same multiply-adds
in int8), as OpenNMT-py's decoding does (launcher/opennmt_translate.py). Counting the batches the clock
timed, rather than a batch of its own, charges each search the padding it really computed:

        Multiply-adds: M per output piece over N sentences
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from torch.utils.flop_counter import FlopCounterMode

from seq2seq_attn.config import DecodeConfig, choices_enum
from seq2seq_attn.decoding.loader import load_runs
from seq2seq_attn.decoding.translate import CHUNK_LINES, Translation, Translator
from seq2seq_attn.io import read_lines, write_text

NO_LIMIT = 2**31 - 1  # a token count no batch or test source reaches
T = TypeVar("T")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--input", type=Path, required=True, help="raw source text, one sentence per line")
    parser.add_argument("--output", type=Path, required=True, help="detokenised translations")
    parser.add_argument("--beam", type=int, required=True, help="beam width (1: greedy)")
    parser.add_argument("--batch-sentences", type=int, required=True, help="sentences per batch")
    parser.add_argument("--max-len-a", type=float, required=True, help="generated tokens at most: a x source")
    parser.add_argument("--max-len-b", type=int, required=True, help="... + b")
    parser.add_argument("--min-len", type=int, default=0, help="no EOS before this many pieces")
    parser.add_argument("--alpha", type=float, required=True, help="GNMT length-penalty exponent")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--precision",
        choices=[c.value for c in choices_enum(DecodeConfig, "precision")],
        default="auto",
        help="decode.precision",
    )
    parser.add_argument(
        "--lexical-shortlist",
        action="store_true",
        help="score only each sentence's lexical candidates (the run's lexical_shortlist.npz)",
    )
    parser.add_argument(
        "--count-macs",
        action="store_true",
        help="afterwards, count the multiply-adds of translating the input again, as timed (fp32, untimed)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)

    device = torch.device(args.device)
    settings = {
        "beam_size": args.beam,
        "nbest": 1,
        "length_penalty": "gnmt",
        "alpha": args.alpha,
        "max_len_a": args.max_len_a,
        "max_len_b": args.max_len_b,
        "min_len": args.min_len,
        "min_len_a": 0.0,
        "no_repeat_ngram": 0,
        "stopping": "top",  # the peers' rule: OpenNMT-py and JoeyNMT have no other
        "batch_tokens": NO_LIMIT,  # batches of `batch_sentences` sentences, as the peers' -batch_type sents
        "batch_sentences": args.batch_sentences,
        "replace_unk": False,
        "max_src_tokens": NO_LIMIT,  # the peers never cut a test source: neither do we (default: 256 pieces)
        "precision": args.precision,
        "lexical_shortlist": args.lexical_shortlist,
    }
    runs = load_runs([args.checkpoint], device)
    translator = runs.translator(settings)  # as `seq2seq translate` builds it
    lines = list(read_lines(args.input))

    start = time.perf_counter()
    translations = translate_chunks(translator, lines)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start

    texts = [t.texts[0] if t.texts else "" for t in translations]
    tokens = generated_pieces(translations)
    write_text(args.output, "".join(text + "\n" for text in texts))
    print(f"Decoding took {seconds:.4f} s for {len(lines)} sentences and {tokens} target tokens", flush=True)
    if args.count_macs:
        fp32 = runs.translator({**settings, "precision": "fp32"})
        counted, macs = multiply_adds(lambda: translate_chunks(fp32, lines))
        pieces = generated_pieces(counted)
        print(f"Multiply-adds: {macs / max(pieces, 1):.0f} per output piece over {len(counted)} sentences")


def translate_chunks(translator: Translator, lines: list[str]) -> list[Translation]:
    """What `seq2seq translate` does with a file: chunks of lines, each sorted by length into batches."""
    translations: list[Translation] = []
    for first in range(0, len(lines), CHUNK_LINES):
        translations += translator.translate(lines[first : first + CHUNK_LINES])
    return translations


def generated_pieces(translations: list[Translation]) -> int:
    """The pieces of every best hypothesis, EOS excluded: what both the clock and the count divide by."""
    return sum(len(t.hypotheses[0].tokens) for t in translations if t.hypotheses)


def multiply_adds(work: Callable[[], T]) -> tuple[T, float]:
    """`work()`'s result and the multiply-adds of its matrix products (torch's FlopCounterMode counts
    each product's floating-point operations, two per multiply-add)."""
    with FlopCounterMode(display=False) as counter:
        result = work()
    return result, counter.get_total_flops() / 2


if __name__ == "__main__":
    main()
