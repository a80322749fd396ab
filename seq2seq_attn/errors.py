"""The one exception type a user can cause.

Anything raised as `UserError` is printed by the CLI as a single line on stderr (no traceback unless
`--debug`), followed by a non-zero exit. Messages must name the file, line or config key at fault.

A config key that the caller sets (an argument of the Python API, an option of the command line) is
named with `setting(key)`: the message reads the key (`decode.beam_size`), and the command line, which
knows which of its options sets each key, writes that option instead (`--beam`; cli/options.py).
"""

from __future__ import annotations

from collections.abc import Callable

MARK = "\x1f"  # brackets a key named by `setting` inside a message (the ASCII unit separator: no text has it)


def setting(key: str) -> str:
    """Config key `key` (e.g. "decode.beam_size") as a message names it where the caller sets it."""
    return f"{MARK}{key}{MARK}"


class UserError(Exception):
    """A problem with the user's input (config, files, options), not a bug in seq2seq-attn."""

    # how the caller names each key of `setting`: the key itself, or (the command line) the option setting it
    names: Callable[[str], str] = str

    def __str__(self) -> str:
        return self.naming(self.names)

    def naming(self, name: Callable[[str], str]) -> str:
        """The message with each key of `setting` written as `name(key)`."""
        parts = super().__str__().split(MARK)
        return "".join(name(part) if i % 2 else part for i, part in enumerate(parts))
