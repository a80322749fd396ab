"""The reproduction targets: `make -n` expands them to the right commands, and the paper's WMT'14 configs
read their data through the real Hugging Face path (a local stand-in dataset, since the hub is offline)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import run_main

ROOT = Path(__file__).resolve().parent.parent
PAPER = ["rnnencdec30", "rnnencdec50", "rnnsearch30", "rnnsearch50"]


def make_n(*args: str) -> str:
    result = subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def reproduce_lines(output: str) -> list[str]:
    """Every reproduce.py command, its backslash-continued lines joined."""
    joined = output.replace("\\\n", " ")
    return [" ".join(line.split()) for line in joined.splitlines() if "scripts/reproduce.py" in line]


def reproduce_line(output: str) -> str:
    """The one reproduce.py command."""
    (line,) = reproduce_lines(output)
    return line


def test_make_reproduce_wmt14_runs_the_four_paper_models():
    line = reproduce_line(make_n("reproduce-wmt14"))
    assert " --out runs/wmt14 " in line
    for name in PAPER:
        assert f"configs/{name}.yaml" in line
    assert "--label RNNencdec-30 --label RNNencdec-50 --label RNNsearch-30 --label RNNsearch-50" in line


LAYOUTS = {  # corpus files -> the split files reproduce-local names
    "gz-train": ["train.en.gz", "train.fr.gz", "valid.en", "valid.fr", "test.en", "test.fr"],
    "gz-every-split": [
        "train.en.gz",
        "train.fr.gz",
        "valid.en.gz",
        "valid.fr.gz",
        "test.en.gz",
        "test.fr.gz",
    ],
    "one-file-pair": ["train.en", "train.fr"],
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_make_reproduce_local_points_every_split_at_the_corpus(tmp_path, layout):
    for name in LAYOUTS[layout]:
        (tmp_path / name).write_text("")
    line = reproduce_line(
        make_n("reproduce-local", f"CORPUS={tmp_path}", "REPRO_ARGS=--set train.max_minutes=1")
    )
    keys = [f"{split}.{side}" for split in ("train", "valid", "test") for side in ("src", "tgt")]
    named = dict(zip(keys, LAYOUTS[layout], strict=False))
    for key in keys:  # a split without files is held out of train (data.local.hold_out in the configs)
        if key in named:
            assert f"--set data.local.{key}={tmp_path}/{named[key]}" in line
    assert line.count("--set data.local.") == len(named)
    assert "--set train.max_minutes=1" in line
    assert " --out runs/local " in line
    assert "configs/local_rnnsearch.yaml configs/local_rnnencdec.yaml" in line


def test_make_reproduce_local_names_the_languages_it_reads(tmp_path):
    """SRC=de TGT=en picks train.de and train.en, and the runs record de -> en (not the configs' en -> fr)."""
    for name in ("train.de", "train.en"):
        (tmp_path / name).write_text("")
    line = reproduce_line(make_n("reproduce-local", f"CORPUS={tmp_path}", "SRC=de", "TGT=en"))
    assert "--set data.src_lang=de --set data.tgt_lang=en" in line
    assert f"--set data.local.train.src={tmp_path}/train.de" in line


def test_make_reproduce_local_without_training_files_is_a_one_line_error(tmp_path):
    (tmp_path / "valid.en").write_text("")
    result = subprocess.run(
        ["make", "-n", "reproduce-local", f"CORPUS={tmp_path}"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert f"CORPUS={tmp_path}: no train.en or train.en.gz there" in result.stderr


def test_make_reproduce_multi30k_trains_one_direction_after_the_other_on_the_official_files(tmp_path):
    (tmp_path / "train.en.gz").write_bytes(b"")
    output = make_n(
        "reproduce-multi30k", f"MULTI30K={tmp_path}", "MULTI30K_OUT=out", "REPRO_ARGS=--set a.b=1"
    )
    enfr, ende = reproduce_lines(output)
    for line, pair in ((enfr, "en-fr"), (ende, "en-de")):
        assert f" --out out/{pair} --runs out/{pair} --set data.multi30k.dir={tmp_path} " in line
        assert "data.multi30k.download" not in line and "--set a.b=1" in line
    assert enfr.endswith("configs/multi30k_enfr.yaml") and ende.endswith("configs/multi30k_ende.yaml")
    downloading = reproduce_lines(make_n("reproduce-multi30k", "MULTI30K_DOWNLOAD=1"))
    assert all(
        f"--set data.multi30k.dir={ROOT / 'data' / 'multi30k-task1'} --set data.multi30k.download=true"
        in line
        for line in downloading
    )


def test_make_reproduce_multi30k_without_the_files_says_how_to_download_them(tmp_path):
    result = subprocess.run(
        ["make", "-n", "reproduce-multi30k", f"MULTI30K={tmp_path}"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert f"MULTI30K={tmp_path}: no train.en.gz there; MULTI30K_DOWNLOAD=1 downloads" in result.stderr


def test_make_demo_runs_the_two_demo_configs_with_the_criteria():
    line = reproduce_line(make_n("demo"))
    assert "--criteria" in line and "--parallel" in line
    assert "configs/demo_rnnsearch.yaml configs/demo_rnnencdec.yaml" in line


@pytest.mark.parametrize("name", PAPER)
def test_paper_configs_prepare_moses_tokenised_wmt14_through_the_huggingface_path(name, tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {
        "train": [("the cat's mat.", "le chat d'or."), ("a red house.", "une maison rouge.")] * 5,
        "validation": [("the dog .", "le chien .")] * 3,
        "test": [("a cat .", "un chat ."), ("the house is red .", "la maison est rouge .")],
    }
    stand_in = datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict({"translation": [{"en": en, "fr": fr} for en, fr in pairs]})
            for split, pairs in rows.items()
        }
    )
    stand_in.save_to_disk(str(tmp_path / "wmt14"))
    config = ROOT / "configs" / f"{name}.yaml"
    result = run_main(
        *("--quiet", "data", "prepare", str(config)),
        *("--set", f"data.huggingface.name={tmp_path / 'wmt14'}", "--set", f"data.dir={tmp_path / 'data'}"),
        text=True,
    )
    assert result.returncode == 0, result.stderr
    data = tmp_path / "data"  # training text Moses-tokenised (the paper's words), dev and test as they are
    assert (data / "train.src").read_text().splitlines() == ["the cat 's mat .", "a red house ."] * 5
    assert (data / "train.tgt").read_text().splitlines() == ["le chat d' or .", "une maison rouge ."] * 5
    assert (data / "test.tgt").read_text().splitlines() == [fr for _, fr in rows["test"]]
    assert (data / "valid.src").read_text().splitlines() == ["the dog ."] * 3
