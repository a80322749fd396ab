"""What the user sees while work runs: progress bars and status lines, both silenced by `--quiet`.

Progress bars are tqdm, drawn only when stderr is a terminal, so logs and CI output stay clean.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from tqdm import tqdm

QUIET = False


def set_quiet(quiet: bool) -> None:
    global QUIET
    QUIET = quiet


def progress(iterable: Iterable | None = None, **kwargs: Any) -> tqdm:
    """A tqdm bar on stderr, disabled when quiet or when stderr is not a terminal."""
    kwargs.setdefault("disable", QUIET or not sys.stderr.isatty())
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("leave", False)
    return tqdm(iterable, file=sys.stderr, **kwargs)


def info(message: str) -> None:
    """A status line on stderr (stdout is kept for results that may be piped)."""
    if not QUIET:
        print(message, file=sys.stderr, flush=True)


def warn(message: str) -> None:
    """A line the user must see even with --quiet (an interruption, a skipped update)."""
    print(message, file=sys.stderr, flush=True)
