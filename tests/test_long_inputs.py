"""The long-input test set: consecutive pairs joined, references aligned, bounded, seeded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import assert_one_line_error, run_main

from seq2seq_attn.data.long_inputs import join_pairs
from seq2seq_attn.errors import UserError

SOURCES = [" ".join(f"s{i}w{j}" for j in range(3 + i % 7)) for i in range(41)]
REFERENCES = [f"r{i} " * (1 + i % 3) for i in range(41)]


def test_every_pair_joins_once_in_order_with_its_reference():
    built = join_pairs(SOURCES, [r.strip() for r in REFERENCES], most=5, max_words=30, seed=3)
    used = [i for group in built.groups for i in group]
    assert used == list(range(len(used)))  # consecutive, from the first line, none twice
    assert all(2 <= len(group) <= 5 for group in built.groups)
    for group, source, reference in zip(built.groups, built.sources, built.references, strict=True):
        assert source == " ".join(SOURCES[i] for i in group)
        assert reference == " ".join(REFERENCES[i].strip() for i in group)
        assert len(source.split()) <= 30 or len(group) == 2  # bounded, two pairs at least
    assert len(SOURCES) - 1 <= built.groups[-1][-1] + 1 <= len(SOURCES)  # at most one pair left over


def test_the_seed_decides_the_grouping_and_the_same_seed_gives_the_same_set():
    first = join_pairs(SOURCES, REFERENCES, most=6, max_words=1000, seed=1)
    assert join_pairs(SOURCES, REFERENCES, most=6, max_words=1000, seed=1) == first
    assert join_pairs(SOURCES, REFERENCES, most=6, max_words=1000, seed=2).groups != first.groups


def test_bad_settings_are_user_errors():
    with pytest.raises(UserError, match="N must be >= 2"):
        join_pairs(SOURCES, REFERENCES, most=1, max_words=100, seed=1)
    with pytest.raises(UserError, match="^the sources has 41 lines but the references has 40: they must"):
        join_pairs(SOURCES, REFERENCES[:40], most=3, max_words=100, seed=1)


def test_files_of_different_lengths_are_one_line_naming_both(tmp_path: Path):
    src, ref = tmp_path / "test.en", tmp_path / "test.fr"
    src.write_text("a\nb\nc\n", encoding="utf-8")
    ref.write_text("a\nb\n", encoding="utf-8")
    args = ["data", "long-inputs", "--src", str(src), "--ref", str(ref), "-o", str(tmp_path / "long")]
    assert_one_line_error(run_main(*args), f"{src} has 3 lines but {ref} has 2: they must be line-aligned")


def test_a_folder_with_another_commands_manifest_is_refused(tmp_path: Path):
    src, ref = tmp_path / "test.en", tmp_path / "test.fr"
    src.write_text("a\nb\nc\n", encoding="utf-8")
    ref.write_text("x\ny\nz\n", encoding="utf-8")
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text('{"format": 2, "splits": {}}', encoding="utf-8")  # prepare's
    args = ["data", "long-inputs", "--src", str(src), "--ref", str(ref), "-o", str(data)]
    assert_one_line_error(run_main(*args), f"{data}: its manifest.json is another command's")
    assert (data / "manifest.json").read_text(encoding="utf-8") == '{"format": 2, "splits": {}}'


def test_the_command_writes_the_set_and_its_manifest(tmp_path: Path):
    src, ref = tmp_path / "test.en", tmp_path / "test.fr"
    src.write_text("".join(line + "\n" for line in SOURCES), encoding="utf-8")
    ref.write_text("".join(line.strip() + "\n" for line in REFERENCES), encoding="utf-8")
    out = tmp_path / "long"
    args = ["data", "long-inputs", "--src", str(src), "--ref", str(ref), "-o", str(out), "--sentences", "4"]
    result = run_main(*args, text=True)
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    joined = (out / "long.src").read_text().splitlines()
    assert len(joined) == manifest["inputs"] == len((out / "long.tgt").read_text().splitlines())
    assert joined[0] == " ".join(SOURCES[i] for i in manifest["groups"][0])
    assert (
        manifest["sentences_per_input"] == [2, 4]
        and manifest["seed"] == 1
        and len(manifest["source"]["sha256"]) == 64
    )
    before = (out / "long.src").read_bytes()
    assert run_main(*args).returncode == 0 and (out / "long.src").read_bytes() == before  # deterministic
    one = tmp_path / "one.en"
    one.write_text("just one\n", encoding="utf-8")
    assert_one_line_error(
        run_main("data", "long-inputs", "--src", str(one), "--ref", str(one), "-o", str(out)),
        "nothing to join",
    )
