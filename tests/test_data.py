"""`seq2seq data prepare`: the three sources, every cleaning rule, clear errors, manifest, idempotence."""

from __future__ import annotations

import gzip
import hashlib
import subprocess
import unicodedata
from pathlib import Path

import pytest
import yaml
from helpers import run_main

from seq2seq_attn.config import load_config, to_dict
from seq2seq_attn.data.clean import plain_line, without_breaks
from seq2seq_attn.data.prepare import MANIFEST, OUTPUTS, prepare
from seq2seq_attn.data.sources import source_as_read
from seq2seq_attn.data.synthetic import generate_split
from seq2seq_attn.errors import UserError

SPLITS = ("train", "valid", "test")
CORPUS = {
    "train": [("the cat", "le chat"), ("a dog runs", "un chien court"), ("hello", "bonjour")],
    "valid": [("good day", "bonne journée")],
    "test": [("thank you", "merci"), ("yes", "oui")],
}


def write_lines(path: Path, lines: list[str]) -> Path:
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def local_files(folder: Path, corpus: dict, layout: str = "plain") -> dict:
    """Write `corpus` as text files in `layout` (plain, gz, tsv); return the `data.local` config section."""
    section = {}
    for split, pairs in corpus.items():
        if layout == "tsv":
            section[split] = {
                "tsv": str(write_lines(folder / f"{split}.tsv", [f"{s}\t{t}" for s, t in pairs]))
            }
            continue
        suffix = ".gz" if layout == "gz" else ""
        section[split] = {
            side: str(write_lines(folder / f"{split}.{lang}{suffix}", [pair[i] for pair in pairs]))
            for i, (side, lang) in enumerate((("src", "en"), ("tgt", "fr")))
        }
    return section


def write_config(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "data": {"dir": "out", **data}}), encoding="utf-8")
    return path


def local_config(tmp_path: Path, corpus: dict = CORPUS, layout: str = "plain", **data) -> Path:
    return write_config(tmp_path, {"source": "local", "local": local_files(tmp_path, corpus, layout), **data})


def prepared_pairs(data_dir: Path, split: str) -> list[tuple[str, str]]:
    src, tgt = (
        (data_dir / f"{split}.{side}").read_text(encoding="utf-8").splitlines() for side in ("src", "tgt")
    )
    return list(zip(src, tgt, strict=True))


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`seq2seq ARGS` in `cwd` (the entry point, in this process), stdout and stderr as text."""
    return run_main(*args, cwd=cwd, text=True)


def mtimes(data_dir: Path) -> dict[str, int]:
    return {name: (data_dir / name).stat().st_mtime_ns for name in (*OUTPUTS, MANIFEST)}


# ----------------------------------------------------------------------------------------------------------
# local source


@pytest.mark.parametrize("layout", ["plain", "gz", "tsv"])
def test_local_source_writes_every_split(tmp_path, layout):
    prepared = prepare(load_config(local_config(tmp_path, layout=layout)))
    assert prepared.redone and prepared.data_dir == tmp_path / "out"
    for split in SPLITS:
        assert prepared_pairs(prepared.data_dir, split) == CORPUS[split]
        assert prepared.manifest["splits"][split]["read"] == len(CORPUS[split])


# ----------------------------------------------------------------------------------------------------------
# cleaning

MESSY = [
    ("a  c d e f", "x\tz y w v "),  # 1 normalised, kept: five words is not over max_words 5
    ("", "x"),  # 2 empty side
    ("   ", "y"),  # 3 blank: normalised to empty
    ("w w w w w w", "v v v v v v"),  # 4 six words
    ("a", "x y z w"),  # 5 word ratio 4
    ("a b", "x y"),  # 6 kept
    ("a b", "x y"),  # 7 duplicate of 6
    ("a  b", "x y"),  # 8 duplicate of 6 once normalised
]
STRICT = {"max_words": 5, "max_ratio": 3, "dedup": True}


@pytest.mark.parametrize(
    ("clean", "kept", "normalized", "dropped"),
    [
        (STRICT, [1, 6], 3, {"drop_empty": 2, "max_words": 1, "max_ratio": 1, "dedup": 2}),
        (
            {**STRICT, "normalize_whitespace": False},
            [1, 6, 8],
            0,
            {"drop_empty": 2, "max_words": 1, "max_ratio": 1, "dedup": 1},
        ),
        ({}, [1, 4, 6, 7, 8], 3, {"drop_empty": 2, "max_words": 0, "max_ratio": 1}),  # the defaults
        (
            {"drop_empty": False},
            [1, 4, 6, 7, 8],
            3,
            {"max_words": 0, "max_ratio": 3},
        ),  # empty side: ratio inf
        ({"drop_empty": False, "max_words": 0, "max_ratio": 0}, [1, 2, 3, 4, 5, 6, 7, 8], 3, {}),
    ],
)
def test_cleaning_rules_count_exactly(tmp_path, clean, kept, normalized, dropped):
    corpus = {**CORPUS, "train": MESSY}
    counts = prepare(load_config(local_config(tmp_path, corpus, clean=clean))).manifest["splits"]["train"]
    assert counts == {
        "read": 8,
        "kept": len(kept),
        "cleaned": True,
        "normalized": normalized,
        "dropped": dropped,
        "tokenized": False,
        "crlf_lines": 0,
        "byte_order_marks": 0,
    }
    assert counts["read"] - counts["kept"] == sum(dropped.values())
    squash = clean.get("normalize_whitespace", True)
    expected = [
        tuple(" ".join(s.split()) if squash else without_breaks(s) for s in MESSY[i - 1]) for i in kept
    ]
    assert prepared_pairs(tmp_path / "out", "train") == expected


@pytest.mark.parametrize(("splits", "valid_cleaned"), [(None, False), (["train", "valid"], True)])
def test_cleaning_leaves_valid_and_test_intact_by_default(tmp_path, splits, valid_cleaned):
    odd = [("  spaced   out ", "espacé"), ("one", "un deux trois quatre cinq")]
    corpus = {**CORPUS, "valid": odd, "test": odd}
    clean = {"splits": splits} if splits else {}
    manifest = prepare(load_config(local_config(tmp_path, corpus, clean=clean))).manifest
    assert prepared_pairs(tmp_path / "out", "test") == odd
    assert manifest["splits"]["test"] == {
        "read": 2,
        "kept": 2,
        "cleaned": False,
        "tokenized": False,
        "crlf_lines": 0,
        "byte_order_marks": 0,
    }
    valid = prepared_pairs(tmp_path / "out", "valid")
    assert valid == ([("spaced out", "espacé")] if valid_cleaned else odd)


# ----------------------------------------------------------------------------------------------------------
# a corpus of one file pair: dev and test sets held out of it

# 40 distinct sources, the first 10 of them twice more with other targets: 60 lines
ONE_PAIR = [(f"sentence number {i}", f"phrase {i}") for i in range(40)] + [
    (f"sentence number {i % 10}", f"variante {i}") for i in range(20)
]


def held_out_config(tmp_path: Path, valid: int, test: int, seed: int = 1, pairs=ONE_PAIR) -> Path:
    section = local_files(tmp_path, {"train": pairs})
    return write_config(
        tmp_path,
        {"source": "local", "local": {**section, "hold_out": {"valid": valid, "test": test, "seed": seed}}},
    )


def test_hold_out_is_deterministic_disjoint_and_recorded(tmp_path):
    manifest = prepare(load_config(held_out_config(tmp_path, valid=5, test=7))).manifest
    splits = {split: prepared_pairs(tmp_path / "out", split) for split in SPLITS}
    assert (len(splits["valid"]), len(splits["test"])) == (5, 7)
    held = {src for split in ("valid", "test") for src, _ in splits[split]}
    assert len(held) == 12  # no source held out twice
    assert not held & {src for src, _ in splits["train"]}  # no held-out source is a training source
    same_source = sum(src in held for src, _ in ONE_PAIR) - 12  # lines sharing a drawn line's source
    assert len(splits["train"]) == len(ONE_PAIR) - 12 - same_source
    assert manifest["splits"]["train"]["held_out"] == {
        "valid": 5,
        "test": 7,
        "seed": 1,
        "same_source_removed": same_source,
    }
    assert manifest["splits"]["valid"]["held_out_of"] == "train"
    assert manifest["source"]["hold_out"] == {"valid": 5, "test": 7, "seed": 1}
    for split in ("valid", "test"):  # in file order, each pair as it was
        assert splits[split] == [pair for pair in ONE_PAIR if pair in splits[split]]

    again = tmp_path / "again"
    again.mkdir()
    prepare(load_config(held_out_config(again, valid=5, test=7)))
    assert {split: prepared_pairs(again / "out", split) for split in SPLITS} == splits
    reseeded = tmp_path / "reseeded"
    reseeded.mkdir()
    prepare(load_config(held_out_config(reseeded, valid=5, test=7, seed=2)))
    assert prepared_pairs(reseeded / "out", "test") != splits["test"]


@pytest.mark.parametrize(
    ("tokenize", "spell"),
    [
        ("none", lambda i: unicodedata.normalize("NFD", f"café numéro {i}")),  # NFKC makes it NFC's
        ("moses", lambda i: f"sentence number {i}."),  # Moses splits the full stop off
        ("task", lambda i: f"Sentence Number {i} ."),  # lowercased too
    ],
)
def test_a_source_spelt_otherwise_but_read_alike_by_the_model_is_not_left_in_train(tmp_path, tokenize, spell):
    base = {"none": "café numéro {}", "moses": "sentence number {} .", "task": "sentence number {} ."}[
        tokenize
    ]
    pairs = [(base.format(i), f"phrase {i}") for i in range(30)] + [
        (spell(i), f"autre {i}") for i in range(30)
    ]
    config = load_config(
        held_out_config(tmp_path, valid=4, test=4, pairs=pairs), [f"data.tokenize={tokenize}"]
    )
    prepare(config)
    reading = source_as_read(config.data)
    held = {reading(src) for split in ("valid", "test") for src, _ in prepared_pairs(tmp_path / "out", split)}
    training = [reading(src) for src, _ in prepared_pairs(tmp_path / "out", "train")]
    assert len(held) == 8 and not held & set(training) and len(training) == 60 - 16


def test_given_split_files_win_over_hold_out(tmp_path):
    corpus = {"train": ONE_PAIR, "valid": CORPUS["valid"]}
    section = local_files(tmp_path, corpus)
    config = write_config(
        tmp_path, {"source": "local", "local": {**section, "hold_out": {"valid": 5, "test": 3}}}
    )
    manifest = prepare(load_config(config)).manifest
    assert prepared_pairs(tmp_path / "out", "valid") == CORPUS["valid"]
    assert len(prepared_pairs(tmp_path / "out", "test")) == 3
    assert (
        manifest["splits"]["train"]["held_out"]["test"] == 3 and "valid" not in manifest["source"]["hold_out"]
    )


def test_crlf_line_ends_and_byte_order_marks_are_removed_and_counted(tmp_path):
    config = local_config(tmp_path)
    (tmp_path / "train.en").write_bytes("\ufeffthe cat\r\na dog runs\r\nhello\r\n".encode())
    (tmp_path / "train.fr").write_bytes("\ufeffle chat\nun chien court\nbonjour\n".encode())
    manifest = prepare(load_config(config)).manifest
    assert prepared_pairs(tmp_path / "out", "train") == CORPUS["train"]
    assert manifest["splits"]["train"]["crlf_lines"] == 3
    assert manifest["splits"]["train"]["byte_order_marks"] == 2
    result = run_cli("data", "prepare", str(config), "--force", cwd=tmp_path)
    assert "train: removed 3 Windows line ends (CRLF) and 2 byte-order mark(s)" in result.stderr


# ----------------------------------------------------------------------------------------------------------
# bad input: one line on stderr, exit 2, no traceback, previous data untouched


def mismatched(tmp_path: Path, side: str) -> Path:
    config = local_config(tmp_path)
    path = tmp_path / f"test.{'en' if side == 'src' else 'fr'}"
    write_lines(path, path.read_text(encoding="utf-8").splitlines() + ["extra", "more"])
    return config


def invalid_utf8(tmp_path: Path) -> Path:
    config = local_config(tmp_path)
    (tmp_path / "valid.fr").write_bytes(b"bonne journ\xe9e\n")  # latin-1, not UTF-8
    return config


def all_dropped(tmp_path: Path) -> Path:
    return local_config(tmp_path, {**CORPUS, "train": [("", "x"), ("a", "b c d e")]})


def empty_file(tmp_path: Path) -> Path:
    config = local_config(tmp_path)
    write_lines(tmp_path / "valid.en", [])
    write_lines(tmp_path / "valid.fr", [])
    return config


def missing_file(tmp_path: Path) -> Path:
    config = local_config(tmp_path)
    (tmp_path / "train.fr").unlink()
    return config


def bad_tsv(tmp_path: Path) -> Path:
    config = local_config(tmp_path, layout="tsv")
    write_lines(tmp_path / "test.tsv", ["thank you\tmerci", "no tab here"])
    return config


def hold_out_too_large(tmp_path: Path) -> Path:
    return held_out_config(tmp_path, valid=30, test=20)


def no_valid_split(tmp_path: Path) -> Path:
    return held_out_config(tmp_path, valid=0, test=5)


def hold_out_invalid_utf8(tmp_path: Path) -> Path:
    config = held_out_config(tmp_path, valid=5, test=5)
    (tmp_path / "train.fr").write_bytes("".join(f"phrase {i}\n" for i in range(59)).encode() + b"\xe9t\xe9\n")
    return config


def hold_out_mismatched(tmp_path: Path) -> Path:
    config = held_out_config(tmp_path, valid=5, test=5)
    write_lines(tmp_path / "train.fr", [tgt for _, tgt in ONE_PAIR[:-1]])
    return config


@pytest.mark.parametrize(
    ("make", "fragments"),
    [
        (
            lambda p: mismatched(p, "src"),
            ["test.en has 4 lines", "test.fr has 2 lines", "(test.fr is shorter)"],
        ),
        (
            lambda p: mismatched(p, "tgt"),
            ["test.en has 2 lines", "test.fr has 4 lines", "(test.en is shorter)"],
        ),
        (invalid_utf8, ["valid.fr:1: invalid UTF-8"]),
        (
            all_dropped,
            ["train split: all 2 pairs of", "dropped by cleaning (drop_empty 1, max_words 0, max_ratio 1)"],
        ),
        (empty_file, ["valid split: no sentence pairs in", "valid.en and"]),
        (missing_file, ["`data.local.train.tgt`:", "train.fr: file not found"]),
        (bad_tsv, ["test.tsv:2: expected source<TAB>target, found 1 field(s)"]),
        (
            hold_out_too_large,
            [
                "`data.local.hold_out`: valid 30 + test 20 pairs",
                "train.en has only 40 distinct",
                "(60 lines)",
            ],
        ),
        (no_valid_split, ["`data.local.valid.src` and", "or set `data.local.hold_out.valid`"]),
        (hold_out_invalid_utf8, ["train.fr:60: invalid UTF-8"]),
        (hold_out_mismatched, ["train.en has 60 lines", "train.fr has 59 lines"]),
    ],
    ids=[
        "src-longer",
        "tgt-longer",
        "utf8",
        "empty-after-cleaning",
        "empty-input",
        "missing",
        "tsv-fields",
        "hold-out-too-large",
        "no-valid-split",
        "hold-out-utf8",
        "hold-out-line-counts",
    ],
)
def test_bad_input_is_one_line_error_and_keeps_previous_data(tmp_path, make, fragments):
    good = local_config(tmp_path, layout="tsv" if make is bad_tsv else "plain")
    prepare(load_config(good))
    before = {name: (tmp_path / "out" / name).read_bytes() for name in (*OUTPUTS, MANIFEST)}

    result = run_cli("data", "prepare", str(make(tmp_path)), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("seq2seq: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert {name: (tmp_path / "out" / name).read_bytes() for name in (*OUTPUTS, MANIFEST)} == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        (*OUTPUTS, MANIFEST)
    )  # no temp files


# ----------------------------------------------------------------------------------------------------------
# synthetic source


def test_synthetic_source_end_to_end_is_deterministic(tmp_path):
    synthetic = {"train_size": 40, "valid_size": 5, "test_size": 7, "vocab_size": 200, "max_words": 30}
    config = load_config(write_config(tmp_path, {"source": "synthetic", "synthetic": synthetic}))
    manifest = prepare(config).manifest
    sizes = {split: manifest["splits"][split]["read"] for split in SPLITS}
    assert sizes == {"train": 40, "valid": 5, "test": 7}
    assert prepared_pairs(tmp_path / "out", "test") == list(generate_split(config.data.synthetic, "test"))
    assert manifest["source"] == {"type": "synthetic", **to_dict(config.data.synthetic)}  # seed included

    config.data.dir = str(tmp_path / "again")
    assert prepare(config).manifest["files"] == manifest["files"]  # same seed, same bytes


# ----------------------------------------------------------------------------------------------------------
# manifest and idempotence


def test_manifest_records_counts_hashes_and_source(tmp_path):
    config = local_config(tmp_path, layout="gz")
    manifest = prepare(load_config(config)).manifest
    out = tmp_path / "out"
    assert manifest == yaml.safe_load((out / MANIFEST).read_text(encoding="utf-8"))
    assert {split: (c["read"], c["kept"]) for split, c in manifest["splits"].items()} == {
        split: (len(pairs), len(pairs)) for split, pairs in CORPUS.items()
    }
    for name in OUTPUTS:
        data = (out / name).read_bytes()
        assert manifest["files"][name] == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert manifest["source"] == {
        "type": "local",
        "files": {
            split: [str(tmp_path / f"{split}.en.gz"), str(tmp_path / f"{split}.fr.gz")] for split in SPLITS
        },
    }
    assert manifest["clean"]["splits"] == ["train"] and manifest["clean"]["max_words"] == 250
    assert (manifest["src_lang"], manifest["tgt_lang"]) == ("en", "fr")
    assert len(manifest["fingerprint"]) == 64


def test_second_run_does_no_work(tmp_path):
    config = local_config(tmp_path)
    assert prepare(load_config(config)).redone
    before = mtimes(tmp_path / "out")

    second = run_cli("data", "prepare", str(config), cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "is up to date" in second.stderr
    assert mtimes(tmp_path / "out") == before
    table = second.stderr.splitlines()
    assert table[0].split() == [
        "split",
        "read",
        "kept",
        "normalized",
        "drop_empty",
        "max_words",
        "max_ratio",
        "dedup",
    ]
    assert table[1].split() == ["train", "3", "3", "0", "0", "0", "0", "-"]
    assert table[3].split() == ["test", "2", "2", "-", "-", "-", "-", "-"]


def edit_input(tmp_path: Path) -> tuple[list[str], list[tuple[str, str]]]:
    write_lines(tmp_path / "valid.en", ["good night"])
    return [], [("good night", "bonne journée")]


def change_setting(tmp_path: Path) -> tuple[list[str], list[tuple[str, str]]]:
    return ["--set", "data.tgt_lang=de"], CORPUS["valid"]


def force(tmp_path: Path) -> tuple[list[str], list[tuple[str, str]]]:
    return ["--force"], CORPUS["valid"]


@pytest.mark.parametrize("change", [edit_input, change_setting, force])
def test_changed_input_or_config_or_force_redoes(tmp_path, change):
    config = local_config(tmp_path)
    prepare(load_config(config))
    before = mtimes(tmp_path / "out")
    args, valid = change(tmp_path)
    result = run_cli("data", "prepare", str(config), *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"prepared {tmp_path / 'out'}" in result.stderr and "up to date" not in result.stderr
    after = mtimes(tmp_path / "out")
    assert all(after[name] > before[name] for name in before)
    assert prepared_pairs(tmp_path / "out", "valid") == valid


def test_lost_output_file_redoes(tmp_path):
    config = load_config(local_config(tmp_path))
    prepare(config)
    (tmp_path / "out" / "test.tgt").unlink()
    assert prepare(config).redone
    assert prepared_pairs(tmp_path / "out", "test") == CORPUS["test"]


# ----------------------------------------------------------------------------------------------------------
# Hugging Face source (offline: a DatasetDict saved by the test, and a patched load_dataset)


def hf_rows(pairs: list[tuple[str, str]], layout: str) -> dict[str, list]:
    if layout == "translation":
        return {"translation": [{"en": s, "fr": t} for s, t in pairs], "id": list(range(len(pairs)))}
    return {"english": [s for s, _ in pairs], "french": [t for _, t in pairs]}


HF_FIELDS = {
    "translation": {},
    "columns": {"translation_field": "", "src_field": "english", "tgt_field": "french"},
}


@pytest.mark.parametrize("layout", ["translation", "columns"])
@pytest.mark.parametrize("max_examples", [0, 2])
def test_huggingface_dataset_saved_to_disk(tmp_path, layout, max_examples):
    datasets = pytest.importorskip("datasets")
    corpus = {**CORPUS, "train": [*CORPUS["train"], ("two\nlines", "deux\r\nlignes")]}
    names = {"train": "train", "valid": "validation", "test": "test"}
    saved = datasets.DatasetDict(
        {names[split]: datasets.Dataset.from_dict(hf_rows(pairs, layout)) for split, pairs in corpus.items()}
    )
    saved.save_to_disk(str(tmp_path / "hf"))
    hf = {"name": str(tmp_path / "hf"), "max_examples": max_examples, **HF_FIELDS[layout]}
    manifest = prepare(
        load_config(write_config(tmp_path, {"source": "huggingface", "huggingface": hf}))
    ).manifest

    train = [(" ".join(s.split()), " ".join(t.split())) for s, t in corpus["train"]]
    assert prepared_pairs(tmp_path / "out", "train") == train[: max_examples or None]
    assert prepared_pairs(tmp_path / "out", "test") == CORPUS["test"]
    assert manifest["source"]["saved_to_disk"] and manifest["source"]["splits"]["valid"] == "validation"


def test_huggingface_hub_calls_load_dataset(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(name, config, split, streaming, revision):
        calls.append((name, config, split, streaming, revision))
        split_key = {"train": "train", "validation": "valid", "test": "test"}[split]
        rows = datasets.Dataset.from_dict(hf_rows(CORPUS[split_key], "translation"))
        return rows.to_iterable_dataset() if streaming else rows

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    hf = {"name": "wmt14", "config": "fr-en", "revision": "v1.0", "max_examples": 2}
    prepare(load_config(write_config(tmp_path, {"source": "huggingface", "huggingface": hf})))
    assert calls == [("wmt14", "fr-en", split, True, "v1.0") for split in ("train", "validation", "test")]
    assert prepared_pairs(tmp_path / "out", "train") == CORPUS["train"][:2]

    calls.clear()  # no config name, no streaming, no revision; languages swapped
    hf = {"name": "wmt14", "config": "", "streaming": False}
    config = write_config(
        tmp_path, {"source": "huggingface", "huggingface": hf, "src_lang": "fr", "tgt_lang": "en"}
    )
    prepare(load_config(config))
    assert calls[0] == ("wmt14", None, "train", False, None)
    assert prepared_pairs(tmp_path / "out", "valid") == [(t, s) for s, t in CORPUS["valid"]]


def test_a_huggingface_dataset_in_a_local_folder_is_prepared_again_when_its_files_change(
    tmp_path, monkeypatch
):
    """`data.huggingface.name` a folder of data files (not `save_to_disk`'s): its files decide whether the
    prepared data is current, as a local corpus' do."""
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "train.jsonl").write_text("the cat\n", encoding="utf-8")

    def load_dataset(name, config, split, streaming, revision):
        pairs = {"train": CORPUS["train"], "validation": CORPUS["valid"], "test": CORPUS["test"]}[split]
        extra = (
            []
            if split != "train"
            else [(line, line) for line in (folder / "train.jsonl").read_text().split("\n")]
        )
        return datasets.Dataset.from_dict(hf_rows([*pairs, *[e for e in extra if e[0]]], "translation"))

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    config = load_config(
        write_config(tmp_path, {"source": "huggingface", "huggingface": {"name": str(folder)}})
    )
    assert prepare(config).redone and not prepare(config).redone
    (folder / "train.jsonl").write_text("the cat\na new line\n", encoding="utf-8")
    assert prepare(config).redone
    assert prepared_pairs(tmp_path / "out", "train")[-1] == ("a new line", "a new line")


def test_every_split_is_prepared_as_translate_and_score_read_a_line(tmp_path):
    """Control characters and line separators: spaces, in every split, as `translate` reads its input
    (sentencepiece and Moses would delete some and keep others: "the\\x01cat" trained as one word)."""
    nasty = {
        "train": [("the\x01cat sat", "le\x1bchat"), ("a\x7f dog", "un\x00chien")],
        "valid": [("good\u2028day", "bonne\x85journée")],
        "test": [("thank\x0byou", "mer\x0cci")],
    }
    prepare(load_config(local_config(tmp_path, nasty, clean={"max_ratio": 0})))
    expected = {  # train also cleaned (its white space normalised), valid and test as given
        "train": [("the cat sat", "le chat"), ("a dog", "un chien")],
        "valid": [("good day", "bonne journée")],
        "test": [("thank you", "mer ci")],
    }
    for split, pairs in nasty.items():
        assert prepared_pairs(tmp_path / "out", split) == expected[split]
        if split != "train":  # the same text, spaces at the ends aside
            assert expected[split] == [(plain_line(s), plain_line(t)) for s, t in pairs]


def test_a_local_csv_dataset_whose_column_reads_as_numbers_is_prepared_as_their_text(tmp_path):
    """The real `datasets` code on a local folder of CSV files (streamed, as by default): a split whose
    target column holds only digits reads as numbers, which are its text."""
    pytest.importorskip("datasets")
    folder = tmp_path / "csv"
    folder.mkdir()
    for split, rows in (("train", "the cat,le chat\na dog,un chien\n"), ("validation", "five,5\nsix,6\n")):
        (folder / f"{split}.csv").write_text("src,tgt\n" + rows, encoding="utf-8")
    (folder / "test.csv").write_text("src,tgt\nyes,oui\n", encoding="utf-8")
    hf = {"name": str(folder), "config": "", "translation_field": "", "src_field": "src", "tgt_field": "tgt"}
    prepare(load_config(write_config(tmp_path, {"source": "huggingface", "huggingface": hf})))
    assert prepared_pairs(tmp_path / "out", "valid") == [("five", "5"), ("six", "6")]


@pytest.mark.parametrize(
    ("hf", "message"),
    [
        (
            {"translation_field": "pairs"},
            "`data.huggingface.translation_field`: no field 'pairs' in the dataset rows "
            "(has: id, translation)",
        ),
        ({"valid_split": "dev"}, "`data.huggingface.valid_split`: no split 'dev' in"),
        (
            {"translation_field": ""},
            "`data.huggingface.src_field` and `data.huggingface.tgt_field` must be set",
        ),
    ],
)
def test_huggingface_errors_name_the_key(tmp_path, hf, message):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "hf"
    names = ("train", "validation", "test")
    datasets.DatasetDict(
        {n: datasets.Dataset.from_dict(hf_rows(CORPUS["train"], "translation")) for n in names}
    ).save_to_disk(str(folder))
    config = write_config(tmp_path, {"source": "huggingface", "huggingface": {"name": str(folder), **hf}})
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        prepare(load_config(config))
