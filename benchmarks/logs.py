"""Figures read out of each toolkit's own logs, so every toolkit is measured by its own clock.

Training throughput is logged per interval of `log every` updates, as target tokens per second (padding
excluded, EOS included) by all three toolkits:
    ours        metrics.jsonl: {"step": 50, ..., "tokens_per_s": 5123.4, ...}
    OpenNMT-py  "Step  50/  300; acc: ...; 1234/5678 tok/s; 12 sec;"  (source/target tokens per second)
    JoeyNMT     "Epoch   1, Step:       50, Batch Loss: ..., Tokens per Sec:     5678, Lr: 0.001000"
The steady state is the mean over the intervals that end in one range of updates, the same for every
toolkit: after the warm-up, up to where the shortest run's log ends (`common_window`).

Decoding time, excluding start-up and model loading:
    ours        "Decoding took 1.2345 s for 1000 sentences and 23456 target tokens" (ours_decode.py)
    OpenNMT-py  "Decoding took 1.2345 s for 1000 sentences", printed by launcher/opennmt_translate.py
                around the span its own report times (its report rounds to 0.1 s and 0.1 ms a sentence)
    JoeyNMT     "Generation took 12.3456[sec]."

The arithmetic of a search, counted after it by ours_decode.py and launcher/opennmt_translate.py alike:
    "Multiply-adds: 123456 per output piece over 64 sentences"
"""

from __future__ import annotations

import datetime
import json
import re
from statistics import fmean

OURS, JOEYNMT, OPENNMT = "ours", "joeynmt", "opennmt"

_TRAIN = {
    OPENNMT: re.compile(r"Step\s+(\d+)(?:/\s*\d+)?;.*?[\d.]+/\s*([\d.]+) tok/s"),
    JOEYNMT: re.compile(r"Step:\s*(\d+),.*?Tokens per Sec:\s*([\d.]+)"),
}
_OPENNMT_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d+) ")  # local time, as it logs
_PARAMS = {
    OURS: re.compile(r"\(([\d,]+) parameters"),
    OPENNMT: re.compile(r"\* number of parameters: (\d+)"),
    JOEYNMT: re.compile(r"Total params: (\d+)"),
}
_DECODE = re.compile(r"Decoding took ([\d.]+) s for (\d+) sentences(?: and (\d+) target tokens)?")
_JOEYNMT_DECODE = re.compile(r"Generation took ([\d.]+)\[sec\]")
_MULTIPLY_ADDS = re.compile(r"^Multiply-adds: ([\d.]+) per output piece", re.M)


def train_points(toolkit: str, text: str, until: float | None = None) -> list[tuple[int, float]]:
    """(update step, target tokens/s of the interval ending there), in log order.

    For ours `text` is metrics.jsonl; for the peers, their training log. `until` (epoch seconds) leaves
    out OpenNMT-py's lines logged later, the updates it made after the budget ran out.
    """
    if toolkit == OURS:
        records = (json.loads(line) for line in text.splitlines() if line.strip())
        return [(r["step"], float(r["tokens_per_s"])) for r in records if "tokens_per_s" in r]
    if toolkit == OPENNMT and until is not None:
        text = "\n".join(line for line in text.splitlines() if not _logged_after(line, until))
    return [(int(m.group(1)), float(m.group(2))) for m in _TRAIN[toolkit].finditer(text)]


def _logged_after(line: str, until: float) -> bool:
    match = _OPENNMT_TIME.match(line)
    if not match:
        return False
    logged = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
    return logged + int(match.group(2)) / 1000 > until


def common_window(runs: list[list[tuple[int, float]]], warmup: int, steps: int) -> tuple[int, int]:
    """The range of updates (warmup, last] every run's throughput is averaged over: the same for all.

    `last` is warmup + steps, or less when a run's log ends earlier (the wall-clock budget ran out first):
    then the last interval that run logged. A run that never got past the warm-up has no figure and does
    not shorten the others' window.
    """
    ends = [max(step for step, _ in points) for points in runs if points]
    return warmup, min([warmup + steps, *(end for end in ends if end > warmup)])


def steady_rate(points: list[tuple[int, float]], window: tuple[int, int]) -> float | None:
    """Mean rate of the intervals ending in (first, last] of `window`; None when the run has none there.

    All intervals are `log every` updates long, so the mean of their rates weighs them equally.
    """
    first, last = window
    inside = [rate for step, rate in points if first < step <= last]
    return fmean(inside) if inside else None


def parameters(toolkit: str, text: str) -> int | None:
    """The parameter count the toolkit logs when it builds its model."""
    match = _PARAMS[toolkit].search(text)
    return int(match.group(1).replace(",", "")) if match else None


def decode_seconds(toolkit: str, text: str) -> float | None:
    """Seconds spent decoding the test set, as the decoding log reports it."""
    match = (_JOEYNMT_DECODE if toolkit == JOEYNMT else _DECODE).search(text)
    return float(match.group(1)) if match else None


def multiply_adds(text: str) -> float | None:
    """The matrix products' multiply-adds per generated piece that a decoding log reports (None: none)."""
    match = _MULTIPLY_ADDS.search(text)
    return float(match.group(1)) if match else None


def ours_decoded_tokens(text: str) -> int | None:
    """Target tokens our decoder generated (EOS excluded), from its report line."""
    match = _DECODE.search(text)
    return int(match.group(3)) if match and match.group(3) else None


_VOCAB_TRAINED = re.compile(r"^vocabulary .*\(([\d.]+) s\)$", re.M)
_VOCAB_ENCODED = re.compile(r"^cache .*\(([\d.]+) s\)$", re.M)


def vocab_seconds(text: str) -> tuple[float | None, float | None]:
    """(sentencepiece training, encoding into the token cache) seconds from `seq2seq vocab`'s output."""
    trained, encoded = _VOCAB_TRAINED.search(text), _VOCAB_ENCODED.search(text)
    return (float(trained.group(1)) if trained else None, float(encoded.group(1)) if encoded else None)


_LEXICAL_COVERAGE = re.compile(r"dev reference pieces covered: ([\d.]+)%")


def lexical_coverage(text: str) -> float | None:
    """The share (%) of the dev set's reference pieces that `seq2seq lexical-shortlist` says its lists
    cover."""
    found = _LEXICAL_COVERAGE.search(text)
    return float(found.group(1)) if found else None
