"""File helpers shared by every stage: atomic writes, (gzipped) text reading with clear errors, hashing.

Why atomic: a run may be killed at any instant; a reader must then find either the previous complete
file or the new complete file, never a torn one. We write to a temporary file in the same folder,
flush and fsync it, then `os.replace` it over the target (atomic on POSIX), and fsync the folder.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .errors import UserError

TEMP_SUFFIX = ".tmp"  # `.<name>.<random>.tmp`: what a write killed half way leaves behind


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; on success it replaces `path` atomically."""
    path = Path(path)
    folder = check_writable(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=folder)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
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


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a file for reading bytes, transparently un-gzipping `.gz` files."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: file not found")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a file")
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
