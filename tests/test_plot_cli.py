"""`seq2seq plot curve` redraws the length curve from saved reports."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from seq2seq_attn.cli import app
from seq2seq_attn.evaluation.metrics.by_length import evaluate
from seq2seq_attn.evaluation.metrics.inputs import System
from seq2seq_attn.io import write_json

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def saved_report(folder: Path) -> Path:
    """A by-length report of two systems on a few sentences, as `seq2seq eval --output X.json` saves it."""
    sources = [" ".join(["w"] * n) for n in (3, 5, 12, 15, 25, 30)]
    references = [f"the sentence number {i} is here" for i in range(len(sources))]
    systems = [System("same", references), System("other", [f"a sentence {i}" for i in range(len(sources))])]
    report = evaluate(systems, references, sources, by_length=True)
    path = folder / "report.json"
    write_json(path, report)
    return path


def test_plot_curve_writes_curve_png_beside_the_first_report_without_output(tmp_path):
    (tmp_path / "sub").mkdir()
    report = saved_report(tmp_path / "sub")
    result = CliRunner().invoke(app, ["plot", "curve", str(report)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sub" / "curve.png").read_bytes().startswith(PNG_MAGIC)


def test_plot_curve_writes_where_output_says(tmp_path):
    report = saved_report(tmp_path)
    result = CliRunner().invoke(app, ["plot", "curve", str(report), "-o", str(tmp_path / "mine.svg")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "mine.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")
    assert not (tmp_path / "curve.png").exists()
