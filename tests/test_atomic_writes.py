"""io.atomic_write, behind every file the product writes: an output replaced keeps what the user set on
it, its permissions and a symbolic link to it."""

from __future__ import annotations

import os
import stat

import pytest
from helpers import run_main

from seq2seq_attn import io
from seq2seq_attn.io import atomic_write


def test_a_replaced_file_keeps_its_permissions(tmp_path):
    private = tmp_path / "private.txt"
    private.write_text("old", encoding="utf-8")
    private.chmod(0o600)
    with atomic_write(private) as out:
        out.write("new")
    assert private.read_text(encoding="utf-8") == "new"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_a_symbolic_link_keeps_pointing_at_the_file_it_names(tmp_path, tiny_run_dir):
    """`translate -o link` writes the file the link names, as a shell's `>` would."""
    (tmp_path / "other").mkdir()
    real = tmp_path / "other" / "real.txt"
    real.write_text("old\n", encoding="utf-8")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    source = tmp_path / "in.txt"
    source.write_text("the cat sat\n", encoding="utf-8")
    result = run_main("translate", "--model", str(tiny_run_dir), "-i", str(source), "-o", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert (
        real.read_text(encoding="utf-8") != "old\n"
        and len(real.read_text(encoding="utf-8").splitlines()) == 1
    )


def test_the_umask_is_read_without_being_set(monkeypatch):
    """Reading it by setting it would leave it 0 for an instant, in which another thread's new file would
    be writable by all (Linux shows it in /proc)."""
    previous = os.umask(0o027)
    try:
        monkeypatch.setattr(os, "umask", lambda mask: pytest.fail(f"umask set to {mask:o}"))
        assert io._umask() == 0o027
    finally:
        monkeypatch.undo()
        os.umask(previous)
