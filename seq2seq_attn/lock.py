"""One writer per folder: an exclusive OS lock held by every command while it writes a run or data folder.

`seq2seq train` holds its run directory's lock for its whole life; `data prepare` and `vocab` (and the
data preparation `train` does itself) hold the data folder's lock while they write there. A second writer
fails at once with one line naming the folder and the process that holds it, before writing anything.
Readers (`translate`, `eval`, `model-info`) take no lock: every file is replaced atomically, so they see
a complete old or a complete new version.

The lock is `flock` on `<folder>/.lock`. The kernel releases it when its holder ends in any way (exit,
exception, SIGKILL), so there is never a stale lock to clean up by hand. The holder writes its PID, host,
command and start time into the file, only for the message a refused writer prints. On release the
holder removes the file; a file left by a killed holder is harmless and is reused by the next one.
On NFS, Linux emulates `flock` with POSIX locks, which hold across machines.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import UserError

LOCK_FILE = ".lock"
HOLDER_WAIT = 0.5  # seconds a refused writer waits for a holder that has locked but not yet said who it is

_held: set[Path] = set()  # folders this process holds: taking one again (nested calls) is a no-op


@contextlib.contextmanager
def exclusive(folder: str | Path) -> Iterator[None]:
    """Hold `folder`'s lock (creating the folder) for the `with` block, or raise UserError if it is taken."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    if key in _held:
        yield
        return
    fd = _acquire(folder / LOCK_FILE)
    _held.add(key)
    try:
        yield
    finally:
        _held.discard(key)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / LOCK_FILE)  # still ours: nobody else can lock it before we close
        os.close(fd)


def _acquire(path: Path) -> int:
    """Open and lock `path`; return the descriptor, which the caller closes to release the lock."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            locked = _lock(fd, path)
        except BaseException:
            os.close(fd)
            raise
        if locked:
            return fd
        os.close(fd)


def _lock(fd: int, path: Path) -> bool:
    """Lock `fd` and record this process as the holder; False if `fd`'s file is no longer at `path`.

    A holder removes the file on release, so the file we opened may have been unlinked by the time we
    lock it, and another writer may already hold a new file at `path`: then the caller tries again.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UserError(
            f"{path.parent}: in use by another writer, {_holder(fd)}; wait for it to end or stop it"
        ) from None
    with contextlib.suppress(FileNotFoundError):
        if os.stat(path).st_ino == os.fstat(fd).st_ino:
            _write_holder(fd)
            return True
    return False


def _write_holder(fd: int) -> None:
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": shlex.join([Path(sys.orig_argv[0]).name, *sys.orig_argv[1:]]),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)


def _holder(fd: int) -> str:
    """Who holds the lock, from its record; it may take the holder a moment to write it after locking."""
    deadline = time.monotonic() + HOLDER_WAIT
    while True:
        try:
            record = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
            return "PID {pid} on host {host} since {since} ({command})".format(**record)
        except (ValueError, KeyError, TypeError):
            if time.monotonic() > deadline:
                return "another process"
            time.sleep(0.01)
