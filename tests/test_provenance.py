"""What made a result (seq2seq_attn/provenance.py): the CPU read as lscpu shows it, the code's commit or
the package's version, a run folder's record of every sitting that trained it, and the eval report that
carries its own and its runs'."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from helpers import ROOT, load_config, run_main

from seq2seq_attn import __version__, provenance
from seq2seq_attn.runs.run_folder import PROVENANCE, run_provenance
from seq2seq_attn.training import train as train_module

CPUINFO = (
    "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
    "model name\t: AMD EPYC\nflags\t\t: fpu sse4_2 avx2 fma avx512f avx512_bf16 f16c\n\n"
    "processor\t: 1\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: 1\n"
    "model name\t: another\nflags\t\t: fpu\n"
)


def test_the_cpu_is_read_as_lscpu_shows_it_family_and_model_included(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO, encoding="utf-8")
    found = provenance.cpu(cpuinfo)
    assert (found.name, found.family, found.model) == ("AMD EPYC", "25", "17")
    assert found.speed_flags == ["avx2", "avx512_bf16", "avx512f", "f16c", "fma"]
    assert provenance.cpu(tmp_path / "missing").flags is None


def test_the_code_is_a_commit_in_a_checkout_and_the_version_elsewhere(tmp_path):
    checkout = provenance.code(ROOT)
    assert len(checkout["commit"]) == 40 and isinstance(checkout["changed"], bool)
    installed = provenance.code(tmp_path)
    assert installed["commit"] is None and installed["version"] == __version__
    assert installed["note"] == provenance.UNKNOWN_COMMIT
    line = provenance.summary({**provenance.describe("cpu"), "code": installed})
    assert f"version {__version__}" in line and "commit unknown" in line


def test_a_record_names_the_cpu_family_model_threads_and_torch():
    record = provenance.describe("cpu")
    assert record["torch"] == torch.__version__ and record["threads"] == torch.get_num_threads()
    line = provenance.summary(record)
    assert record["cpu"] in line and f"{record['threads']} threads" in line
    if record["cpu_family"] is not None:  # (Linux)
        assert f"family {record['cpu_family']}, model {record['cpu_model']}" in line


def test_training_records_every_sitting_and_eval_reports_it(prepared: Path, tmp_path: Path):
    run = tmp_path / "run"
    settings = [f"train.run_dir={run}", "train.valid_bleu=false", "train.validate_every=2"]
    for steps in (2, 4):  # a run, then its resumption
        train_module.train(load_config(prepared / "tiny.yaml", [*settings, f"train.max_steps={steps}"]))
    sittings = run_provenance(run)
    assert [sitting["from_step"] for sitting in sittings] == [0, 2]
    assert all(sitting["code"]["version"] == __version__ and sitting["cpu"] for sitting in sittings)

    report = tmp_path / "report.json"
    data = prepared / "data"
    args = ["--model", str(run), "--label", "tiny", "--src", str(data / "test.src"), "--ref"]
    result = run_main("--quiet", "eval", *args, str(data / "test.tgt"), "--output", str(report), text=True)
    assert result.returncode == 0, result.stderr
    carried = json.loads(report.read_text())["provenance"]
    assert carried["evaluated"]["code"]["version"] == __version__
    assert carried["runs"]["tiny"] == {str(run): sittings}
    markdown = run_main("eval", *args, str(data / "test.tgt"), "--format", "markdown", text=True).stdout
    assert "Evaluated with seq2seq-attn" in markdown and "tiny (" in markdown and "from step 2" in markdown

    (run / PROVENANCE).unlink()  # a run trained before runs recorded it
    text = run_main("eval", *args, str(data / "test.tgt"), text=True).stdout
    assert "trained before run folders recorded what trained them" in text
