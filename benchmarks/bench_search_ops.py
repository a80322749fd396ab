"""Micro-benchmark of the search's per-step operations beside the output layer, with the alternatives.

A beam-search step spends its time in the model's matrix products and in what the search does with the
(rows, V) scores. This times, on random tensors of a step's shapes (`--sentences` x `--beam` rows, each
vocabulary size of `--vocab`), each operation the search uses against the alternative it replaced or
rejected, alternating the two in one process:

- selecting each sentence's k best continuations: `topk` over every sum log_p + log p(token), or
  `search.top_candidates` (block maxima first);
- normalising: `log_softmax` over every score, or only the per-row log-sum-exp (which a search that
  normalises only its top candidates, or takes a greedy argmax of raw logits, would still need for its
  scores);
- the decoder's input gates W E y + b: the matrix product, or a row lookup in the table of every piece
  (`RecurrentStack.project_static` against `RecurrentStack.static_gates`, as a search step calls them),
  at `--embed` x `--gates`.

    python -m benchmarks.bench_search_ops --vocab 4000,8000,30000 --out benchmarks/results/search_ops

writes OUT.json and OUT.md: milliseconds per call (median of `--reps`), under the CPU, its flags and
torch's threads.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seq2seq_attn.decoding.search import top_candidates
from seq2seq_attn.io import write_json, write_text
from seq2seq_attn.model.recurrent import RecurrentStack

from .machine import describe, provenance_warnings, summary

PROG = f"python -m {__spec__.name}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--vocab", default="4000,8000,30000", help="comma-separated target vocabulary sizes")
    add("--sentences", type=int, default=64, help="sentences per batch")
    add("--beam", default="5,1", help="comma-separated beam widths (1: greedy)")
    add("--embed", type=int, default=128, help="target embedding size (the gates' input)")
    add("--gates", type=int, default=768, help="gate pre-activations per row (3 x hidden for a GRU)")
    add("--reps", type=int, default=200, help="timed calls per variant")
    add("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    add("--out", type=Path, help="write OUT.json and OUT.md")
    return parser.parse_args(argv)


def timed_pair(first: Callable[[], Any], second: Callable[[], Any], reps: int) -> tuple[float, float]:
    """Median milliseconds per call of two operations, called alternately after a warm-up."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(10):
        first(), second()
    for _ in range(reps):
        for work, spent in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            work()
            spent.append(time.perf_counter() - start)
    return tuple(round(statistics.median(t) * 1000, 3) for t in times)  # type: ignore[return-value]


@torch.no_grad()  # as in search, where the input gates come from their table
def measure(vocab: int, sentences: int, beam: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The three comparisons at one vocabulary size and beam width."""
    generator = torch.Generator().manual_seed(0)
    rows = sentences * beam
    logits = 3 * torch.randn(rows, vocab, generator=generator)
    log_probs = torch.log_softmax(logits, dim=-1)
    log_p = -10 * torch.rand(sentences, beam, generator=generator)
    embed = nn.Embedding(vocab, args.embed)
    stack = RecurrentStack("gru", args.embed, 0, args.gates // 3, 1, 0.0).eval()  # a GRU: 3 gates
    ids = torch.randint(0, vocab, (rows, 1), generator=generator)  # one step's previous tokens
    embedded = embed(ids)

    def full_topk() -> Any:
        return (log_p.view(-1, 1) + log_probs).view(sentences, -1).topk(beam, dim=1)

    def best_by_blocks() -> Any:
        return top_candidates(log_probs, log_p, beam)

    def normalised() -> Any:
        return torch.log_softmax(logits, dim=-1)

    def normaliser() -> Any:
        return torch.logsumexp(logits, dim=-1)

    def by_product() -> Any:
        return stack.project_static(embed(ids))

    def by_table() -> Any:
        return stack.static_gates(embed, ids, embedded)  # the table is made on the first call

    pairs = [
        ("k best continuations", "topk of every sum", full_topk, "top_candidates", best_by_blocks),
        ("normaliser", "log_softmax", normalised, "logsumexp", normaliser),
        ("input gates W E y + b", "matrix product", by_product, "table lookup", by_table),
    ]
    found = []
    for operation, name_a, work_a, name_b, work_b in pairs:
        ms_a, ms_b = timed_pair(work_a, work_b, args.reps)
        found.append(
            {"vocab": vocab, "beam": beam, "rows": rows, "operation": operation}
            | {"a": name_a, "a_ms": ms_a, "b": name_b, "b_ms": ms_b}
        )
    return found


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Search operations micro-benchmark (`benchmarks/bench_search_ops.py`)",
        "",
        f"    {result['command']}",
        "",
        f"- machine: {summary(result['machine'])}",
        *(f"- **warning**: {warning}" for warning in result.get("warnings", [])),
        f"- input gates: embeddings {result['embed']}, {result['gates']} gate pre-activations per row",
        "",
        "| vocabulary | beam | rows | operation | A | A (ms) | B | B (ms) | A / B |",
        "|---:|---:|---:|---|---|---:|---|---:|---:|",
    ]
    for r in result["rows"]:
        ratio = r["a_ms"] / r["b_ms"] if r["b_ms"] else float("inf")
        lines.append(
            f"| {r['vocab']:,} | {r['beam']} | {r['rows']} | {r['operation']} | {r['a']} | {r['a_ms']} "
            f"| {r['b']} | {r['b_ms']} | {ratio:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    machine = describe("cpu", args.threads)  # first: the load and the checkout before any of our work
    rows = []
    for vocab in (int(v) for v in args.vocab.split(",")):
        for beam in (int(b) for b in args.beam.split(",")):
            print(f"bench_search_ops: vocabulary {vocab}, beam {beam}", file=sys.stderr, flush=True)
            rows += measure(vocab, args.sentences, beam, args)
    result = {
        "command": f"{PROG} " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine,
        "warnings": provenance_warnings(machine),
        "embed": args.embed,
        "gates": args.gates,
        "rows": rows,
    }
    text = markdown(result)
    print(text)
    if args.out:
        write_json(args.out.with_suffix(".json"), result)
        write_text(args.out.with_suffix(".md"), text)


if __name__ == "__main__":
    main()
