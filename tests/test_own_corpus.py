"""Your own corpus, end to end: the README's walkthrough run as written, and `make reproduce-local` on a
corpus that is one file pair. Both on a tiny corpus with tiny model sizes (the only overrides), so the
commands, the config and the Makefile cannot drift from what the README promises."""

from __future__ import annotations

import gzip
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, SRC_WORDS, TGT_WORDS, TINY_MODEL, run_main

pytestmark = pytest.mark.slow

HELD_OUT = {"valid": 20, "test": 40}
TINY = [  # the scale of a test; everything else is the committed config
    *(f"model.{key}={value}" for key, value in TINY_MODEL.items()),
    *(f"data.local.hold_out.{split}={size}" for split, size in HELD_OUT.items()),
    "vocab.size=40",
    "train.max_minutes=0",
    "train.max_steps=30",
    "train.batch_size=300",
    "train.validate_every=15",
    "train.valid_max_sentences=10",
    "train.log_every=10",
    # a model this small and short-trained seldom ends a sentence, and GroundHog's retry would search each
    # again with beams up to 640: what the configs' retry does is tested in test_search.py
    "decode.at_max_len=force_eos",
]


def write_one_file_pair(folder: Path, lines: int = 300, suffix: str = "") -> None:
    """train.en / train.fr: a word-for-word 'translation', with Windows line ends and a byte-order mark
    in the source file, as a corpus exported on Windows has."""
    rng = random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    words = [rng.choices(range(len(TGT_WORDS)), k=rng.randint(2, 12)) for _ in range(lines)]
    src = "\ufeff" + "".join(" ".join(SRC_WORDS[i] for i in line) + "\r\n" for line in words)
    tgt = "".join(" ".join(TGT_WORDS[i] for i in line) + "\n" for line in words)
    for name, text in ((f"train.en{suffix}", src), (f"train.fr{suffix}", tgt)):
        data = text.encode("utf-8")
        if suffix == ".gz":
            data = gzip.compress(data)
        (folder / name).write_bytes(data)


def walkthrough() -> list[list[str]]:
    """The README section's commands, in order, each as its words (comments dropped)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Train on your own corpus\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].split() for line in block.splitlines() if line.strip()]


@pytest.mark.e2e
@pytest.mark.slow(seconds=14)
def test_readme_walkthrough_runs_as_written(tmp_path):
    commands = walkthrough()
    assert commands[0] == ["make", "install"]  # the fresh clone's install; this suite runs installed
    assert all(command[0] == ".venv/bin/seq2seq" for command in commands[1:])
    (tmp_path / "configs").mkdir()
    shutil.copy(ROOT / "configs" / "own_corpus.yaml", tmp_path / "configs")
    write_one_file_pair(tmp_path / "my-corpus")

    for command in commands[1:]:
        args = command[1:]
        if "configs/own_corpus.yaml" in args:
            args += [part for item in TINY for part in ("--set", item)]
        result = run_main(*args, cwd=tmp_path, text=True)
        assert result.returncode == 0, f"{' '.join(command)}\n{result.stderr}"

    manifest = json.loads((tmp_path / "data" / "own_corpus" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["held_out"]["test"] == HELD_OUT["test"]
    assert manifest["splits"]["train"]["crlf_lines"] == 300
    assert manifest["splits"]["train"]["byte_order_marks"] == 1
    run = tmp_path / "runs" / "own_corpus"
    report = json.loads((run / "by_length.json").read_text())
    (system,) = report["systems"]
    rows = {row["bucket"]: row for row in system["rows"]}
    assert rows["all"]["count"] == HELD_OUT["test"]
    assert (run / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<html" in (run / "report.html").read_text(encoding="utf-8")
    card = (tmp_path / "runs" / "own_corpus-model" / "README.md").read_text(encoding="utf-8")
    assert "language:\n- en\n- fr\n" in card and "![BLEU by source length](curve.png)" in card
    assert f"test {HELD_OUT['test']:,}" in card  # the pair counts of the data folder's manifest


@pytest.mark.parametrize("layout", ["one-file-pair", "gz-every-split"])
@pytest.mark.e2e
@pytest.mark.slow(seconds=25)
def test_make_reproduce_local_on_your_corpus(tmp_path, layout):
    corpus = tmp_path / "corpus"
    if layout == "one-file-pair":
        write_one_file_pair(corpus)
    else:  # every split gzipped: the hold-out's output, compressed
        write_one_file_pair(tmp_path / "whole")
        prepared = tmp_path / "prepared"
        config = ROOT / "configs" / "own_corpus.yaml"
        files = [
            f"data.local.train.{side}={tmp_path / 'whole' / f'train.{lang}'}"
            for side, lang in (("src", "en"), ("tgt", "fr"))
        ]
        sets = [*TINY, f"data.dir={prepared}", *files]
        assert (
            run_main("data", "prepare", str(config), *(p for s in sets for p in ("--set", s))).returncode == 0
        )
        corpus.mkdir()
        for split in ("train", "valid", "test"):
            for side, lang in (("src", "en"), ("tgt", "fr")):
                text = (prepared / f"{split}.{side}").read_bytes()
                (corpus / f"{split}.{lang}.gz").write_bytes(gzip.compress(text))
    out = tmp_path / "report"
    repro_args = [*TINY, f"data.dir={tmp_path / 'data'}"]
    command = [
        "make",
        "-o",
        "install",  # installed already: the suite runs in the project's environment
        "reproduce-local",
        f"BIN={Path(sys.executable).parent}",
        f"CORPUS={corpus}",
        f"LOCAL_OUT={out}",
        "REPRO_ARGS=" + " ".join(f"--set {item}" for item in repro_args) + f" --runs {tmp_path / 'runs'}",
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "by_length.json").read_text())
    labels = [system["label"] for system in report["systems"]]
    assert labels == ["RNNsearch", "RNNencdec"]
    for system in report["systems"]:  # the test set: held out here, or the hold-out gzipped before
        (count,) = [row["count"] for row in system["rows"] if row["bucket"] == "all"]
        assert count == HELD_OUT["test"]
    assert (out / "curve.png").is_file() and (out / "report.html").is_file()
