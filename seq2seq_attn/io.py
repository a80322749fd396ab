"""Files as every stage writes and reads them: atomic writes, (gzipped) text reading with clear errors,
hashing, and one writer per folder.

Why atomic: a run may be killed at any instant; a reader must then find either the previous complete
file or the new complete file, never a torn one. We write to a temporary file in the same folder,
flush and fsync it, then `os.replace` it over the target (atomic on POSIX), and fsync the folder.

One writer per folder: an exclusive OS lock held by every command while it writes a run or data folder.

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
import gzip
import hashlib
import json
import os
import shlex
import shutil
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .errors import UserError

TEMP_SUFFIX = ".tmp"  # `.<name>.<random>.tmp`: what a write killed half way leaves behind


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; on success it replaces `path` atomically.

    A file already at `path` keeps its permissions (an output kept private stays private), and a symbolic
    link keeps pointing where it did: the file it names is the one replaced, as `>` in a shell writes it.
    """
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    folder = check_writable(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=folder)
    # mkstemp makes 0600 files: the existing file's permissions, else the usual ones
    os.chmod(tmp, stat.S_IMODE(path.stat().st_mode) if path.is_file() else 0o666 & ~_umask())
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_dir(folder)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.filename in (None, tmp):  # name the file the user knows
            reason = err.strerror or str(err)
            raise OSError(
                err.errno, f"not written ({reason}); any previous version is unchanged", str(path)
            ) from err
        raise


@contextlib.contextmanager
def atomic_folder(path: str | Path, replace: bool = False) -> Iterator[Path]:
    """A temporary sibling folder of `path` to fill; on success it is renamed to `path`, so that `path` is
    the previous folder or the complete new one, never half of it. An empty folder at `path` is replaced;
    a non-empty one only with `replace`: moved aside, the new one renamed in, the old one removed (between
    the two renames `path` is absent for an instant), else the rename fails with OSError. On failure the
    temporary folder is removed."""
    path = Path(os.path.abspath(path))  # `.` or `..` named: the folder's own name, which a rename can take
    parent = path.parent
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=parent))
    os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes a 0700 folder; give the usual permissions
    try:
        yield staging
        if not (replace and path.is_dir() and any(path.iterdir())):
            os.rename(staging, path)  # (onto an empty folder: allowed)
            fsync_dir(parent)
            return
        aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=parent))
        try:
            os.replace(path, aside)
        except BaseException:
            aside.rmdir()
            raise
        try:
            os.rename(staging, path)
        except BaseException:
            os.replace(aside, path)  # the previous folder back
            raise
        fsync_dir(parent)
        shutil.rmtree(aside)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def check_writable(path: str | Path) -> Path:
    """The folder of output file `path`, after checking it exists and is writable (fail before any work)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.exists():
        raise UserError(f"{path}: folder {folder} does not exist")
    if not folder.is_dir():
        raise UserError(f"{path}: {folder} is not a folder")
    if path.is_dir():
        raise UserError(f"{path}: is a folder, expected a file name")
    if not os.access(folder, os.W_OK):
        raise UserError(f"{path}: folder {folder} is not writable")
    return folder


def _umask() -> int:
    """The process's umask, read from /proc where Linux shows it: setting it to read it back (the only
    portable way) leaves it 0 for an instant, in which another thread's new file would be writable by all."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fsync_dir(folder: str | Path) -> None:
    """Make a rename inside `folder` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: str | Path, text: str) -> None:
    with atomic_write(path) as handle:
        handle.write(text)


def write_json(path: str | Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not valid JSON ({err})") from None


def check_readable(path: str | Path) -> Path:
    """`path`, after checking it names a file this process may read, without opening it (opening a named
    pipe to check it would take its writer's data, or end the writer)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: file not found")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a file")
    if not os.access(path, os.R_OK):
        raise UserError(f"{path}: not readable (permission denied)")
    return path


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a file for reading bytes, transparently un-gzipping `.gz` files."""
    path = check_readable(path)
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # noqa: SIM115


BOM = "\ufeff"  # a UTF-8 byte-order mark, as Windows editors write at the start of a file


@dataclass
class LineEnds:
    """What `read_lines` cleaned off the text it read, for the manifest."""

    crlf: int = 0  # lines that ended in \r\n (Windows line ends)
    bom: int = 0  # files that began with a byte-order mark


def read_lines(path: str | Path, cleaned: LineEnds | None = None) -> Iterator[str]:
    """Yield the lines of a UTF-8 text file (or .gz) without line endings or a leading byte-order mark.

    Lines are decoded one by one so that invalid UTF-8 is reported with its exact line number. Pass
    `cleaned` to count the Windows line ends and byte-order marks that were removed.
    """
    with open_binary(path) as handle:
        number = 0
        try:
            for number, raw in enumerate(handle, start=1):  # noqa: B007
                line = raw.decode("utf-8")
                if number == 1 and line.startswith(BOM):
                    line = line[1:]
                    if cleaned is not None:
                        cleaned.bom += 1
                if cleaned is not None and line.endswith("\r\n"):
                    cleaned.crlf += 1
                yield line.rstrip("\r\n")
        except UnicodeDecodeError as err:
            raise UserError(f"{path}:{number}: invalid UTF-8 ({err.reason} at byte {err.start})") from None
        except (OSError, EOFError) as err:  # truncated or corrupt .gz
            raise UserError(f"{path}: cannot read ({err})") from None


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- one writer per folder ---------------------------------------------------------------------------

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
