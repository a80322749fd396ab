"""OpenNMT-py 3.5.1's own `onmt_translate`, with two additions for the benchmark; run with its python.

    python launch.py opennmt_translate.py [--int8] [--count-macs] ONMT_TRANSLATE_OPTIONS...

Everything else is `onmt.bin.translate.main` as shipped: the same options, the same search. Its own
report ("Total translation time (s): 2.5", "Average translation time (ms): 2.5") rounds to 0.1 s and to
0.1 ms a sentence, up to 2% of a short run, so the span it times (`Inference._translate`: batching,
search, writing) is timed again with `time.perf_counter` and printed in full, as ours_decode.py prints
ours: "Decoding took 2.5123 s for 1000 sentences" (benchmarks/logs.py reads it).

--int8        its model as `torch.ao.quantization.quantize_dynamic` leaves it: every `nn.Linear` (attention,
              bridge, generator) with int8 weights and one scale per output row (as ours), and every
              recurrent cell (`nn.GRUCell`, `nn.LSTMCell`: its decoder's steps) with one scale per matrix
              (the only scheme it has for cells); each input is quantised as the product runs (fbgemm, as
              ours). Its encoder's library RNN stays fp32, as ours does.
--count-macs  after the timed run, translate the whole test set again, fp32, in the batches the timed
              run made (the same iterator), under torch's `FlopCounterMode` (out of the timed run and
              out of the output file) and print "Multiply-adds: M per output piece over N sentences":
              the matrix products' multiply-adds, encoder included, per generated piece (EOS excluded),
              as ours_decode.py counts ours. An int8 search does the same multiply-adds, in int8.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torch import nn
from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig
from torch.utils.flop_counter import FlopCounterMode

QUANTISED = {
    nn.Linear: per_channel_dynamic_qconfig,
    nn.GRUCell: default_dynamic_qconfig,
    nn.LSTMCell: default_dynamic_qconfig,
}


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--int8", action="store_true")
    parser.add_argument("--count-macs", action="store_true")
    added, rest = parser.parse_known_args()

    import onmt.bin.translate
    import onmt.model_builder
    from onmt.inference_engine import InferenceEnginePY
    from onmt.translate.translator import Inference

    translate = Inference._translate

    def timed(self, *args, **kwargs):
        start = time.perf_counter()
        scores, predictions = translate(self, *args, **kwargs)
        if self.report_time:  # the timed run; the multiply-add count below turns it off
            seconds = time.perf_counter() - start
            print(f"Decoding took {seconds:.4f} s for {len(predictions)} sentences", flush=True)
        return scores, predictions

    Inference._translate = timed  # InferenceEnginePY calls it on its translator

    fp32: dict[str, nn.Module] = {}
    load = onmt.model_builder.load_test_model

    def loaded(opt, *args, **kwargs):
        vocabs, model, model_opt = load(opt, *args, **kwargs)
        fp32["model"] = model
        if added.int8:
            model = torch.ao.quantization.quantize_dynamic(model, QUANTISED, dtype=torch.qint8)
        return vocabs, model, model_opt

    onmt.model_builder.load_test_model = loaded  # build_translator looks it up at call time
    if added.count_macs:
        infer_file = InferenceEnginePY.infer_file

        def counted(engine: InferenceEnginePY):
            result = infer_file(engine)
            print_macs(engine, fp32["model"], engine.opt.src)
            return result

        InferenceEnginePY.infer_file = counted
    sys.argv = [sys.argv[0], *rest]
    onmt.bin.translate.main()


def print_macs(engine, model: nn.Module, src: str) -> None:
    """The fp32 model's multiply-adds per generated piece over every line of `src`, batched as timed."""
    with open(src, encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle]
    translator = engine.translator
    translator.model, translator.report_time = model, False
    with open(os.devnull, "w", encoding="utf-8") as devnull:
        translator.out_file = devnull
        with FlopCounterMode(display=False) as counter:
            _, predictions = engine.infer_list(lines)
    pieces = sum(len(best[0].split()) for best in predictions)
    macs = counter.get_total_flops() / 2 / max(pieces, 1)
    print(f"Multiply-adds: {macs:.0f} per output piece over {len(lines)} sentences", flush=True)


if __name__ == "__main__":
    main()
