"""`seq2seq translate` through the real command line, fed what strangers send: any bytes, any unicode,
10,000-character lines. test_translate.py checks the same one-line-in / one-line-out contract with
hypothesis on `translate_stream`; here one process reads the whole hostile stream from its stdin.
"""

from __future__ import annotations

import random

import pytest
from helpers import seq2seq

HOSTILE = [
    "the cat sat on the mat",
    "",
    " \t ",
    "\x00\x01\x07\x1b[31m red \x1b[0m\x7f",  # NUL, bell, ANSI escapes, DEL
    "שלום עולם \u202ethe cat\u202c مرحبا",  # right-to-left scripts and a bidi override
    "\U0001f600\U0001f468\u200d\U0001f469\u200d\U0001f467 \ufe0f\u20e3",  # emoji, ZWJ sequence, keycap
    "a\u2028b\u2029c\x85d\x0be\x0cf",  # unicode line / paragraph separators, VT, FF
    "\ufeffthe dog\r",  # BOM, CRLF ending
    "x" * 10_000,  # one 10,000-character word
    " ".join(["naïve", "dog", "ran"] * 1700)[:10_000],  # 10,000 characters of words
]
INVALID_UTF8 = [b"\xff\xfe cat \xc3", b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong", b"\xe2\x82 cut short"]


def hostile_stdin(seed: int = 9) -> tuple[bytes, int]:
    """The lines above, then random bytes and random code points; returns (data, number of lines)."""
    rng = random.Random(seed)
    lines = [line.encode("utf-8") for line in HOSTILE] + INVALID_UTF8
    lines += [
        bytes(rng.randrange(256) for _ in range(rng.randrange(60))).replace(b"\n", b"") for _ in range(30)
    ]
    lines += ["".join(chr(rng.randrange(0x20, 0x10FFFF)) for _ in range(30)).encode("utf-8", "surrogatepass")]
    lines.append(b"the cat without a final newline")
    return b"\n".join(lines), len(lines)


@pytest.mark.slow
def test_any_input_gives_one_output_line_per_input_line(tiny_run_dir, tmp_path):
    data, count = hostile_stdin()
    done = seq2seq("translate", "--model", str(tiny_run_dir), "--beam", "2", cwd=tmp_path, stdin=data)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""
    out = done.stdout.decode("utf-8")  # valid UTF-8 whatever came in
    assert out.endswith("\n") and len(out.split("\n")[:-1]) == count
    assert len(out.splitlines()) == count  # no unicode line separator leaked into an output line
    lines = out.split("\n")
    assert lines[1] == lines[2] == ""  # empty and blank input lines give empty output lines
    assert lines[0] and lines[-2]
