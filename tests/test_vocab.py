"""Vocabulary (sentencepiece bpe / unigram / word, joint or separate) and the memory-mapped token cache."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import run_main, tiny_config, write_tiny_config

from seq2seq_attn.config import Config
from seq2seq_attn.config.constants import SPLITS
from seq2seq_attn.errors import UserError
from seq2seq_attn.vocab import cache as cache_module
from seq2seq_attn.vocab.cache import build_cache, cache_stats, load_cache
from seq2seq_attn.vocab.pieces import UNK_ID, Vocab, build_vocab, vocab_dir

SRC_SYLLABLES = ["ka", "lo", "mi", "nu", "pe", "ri", "so", "tu"]
TGT_SYLLABLES = ["ba", "dé", "fi", "go", "hü", "ja", "ke", "lu"]  # non-ASCII on purpose: UTF-8 end to end
SIZE = 60  # pieces per model: small enough for 300 lines, and below the 64 words of each side


def sentences(syllables: list[str], n: int, seed: int) -> list[str]:
    """Zipf-distributed two-syllable words (64 of them), 3 to 12 words per line."""
    rng = random.Random(seed)
    words = [a + b for a in syllables for b in syllables]
    weights = [1 / rank for rank in range(1, len(words) + 1)]
    return [" ".join(rng.choices(words, weights, k=rng.randint(3, 12))) for _ in range(n)]


def write_split(data_dir: Path, split: str, src: list[str], tgt: list[str]) -> None:
    (data_dir / f"{split}.src").write_text("".join(line + "\n" for line in src), encoding="utf-8")
    (data_dir / f"{split}.tgt").write_text("".join(line + "\n" for line in tgt), encoding="utf-8")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """What `seq2seq data prepare` leaves: line-aligned {train,valid,test}.{src,tgt}."""
    folder = tmp_path / "data"
    folder.mkdir()
    for seed, (split, n) in enumerate([("train", 300), ("valid", 40), ("test", 40)]):
        src, tgt = sentences(SRC_SYLLABLES, n, seed), sentences(TGT_SYLLABLES, n, seed + 100)
        if split == "test":  # an empty segment must survive as a zero-length entry
            src[5], tgt[5] = "", ""
        write_split(folder, split, src, tgt)
    return folder


def make_config(data_dir: Path, **vocab: object) -> Config:
    return tiny_config(data={"dir": str(data_dir)}, vocab={"size": SIZE, **vocab})


def lines(data_dir: Path, name: str) -> list[str]:
    return (data_dir / name).read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("model_type", ["bpe", "unigram", "word"])
def test_each_model_type_round_trips_with_fixed_special_ids(data_dir: Path, model_type: str) -> None:
    vocab = build_vocab(make_config(data_dir, type=model_type))
    assert (vocab.src_size, vocab.tgt_size) == (SIZE, SIZE)
    assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    assert vocab.tgt_pieces([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert Vocab.load(vocab_dir(make_config(data_dir))).fingerprint() == vocab.fingerprint()

    targets = lines(data_dir, "train.tgt")
    encoded = vocab.encode_tgt(targets)
    assert all(0 not in ids and 2 not in ids and 3 not in ids for ids in encoded)
    assert len(vocab.src_pieces(lines(data_dir, "train.src")[0])) == len(
        vocab.encode_src(lines(data_dir, "train.src")[:1])[0]
    )
    if model_type == "word":  # the shortlist: 56 most frequent words known, every other word is one <unk>
        known = [line for line, ids in zip(targets, encoded, strict=True) if UNK_ID not in ids]
        assert 0 < len(known) < len(targets)
        assert [vocab.decode_tgt(vocab.encode_tgt([line])[0]) for line in known] == known
        assert all(len(ids) == len(line.split()) for line, ids in zip(targets, encoded, strict=True))
        word = known[0].split()[0]
        assert (
            vocab.decode_tgt(vocab.encode_tgt([f"{word} zzz yyy {word}"])[0]) == f"{word} <unk> <unk> {word}"
        )
    else:  # subwords: every training line comes back exactly, bos/eos/pad are dropped on decoding
        assert [vocab.decode_tgt([2, *ids, 3, 0, 0]) for ids in encoded] == targets
        assert UNK_ID not in [i for ids in encoded for i in ids]
        assert vocab.decode_tgt(vocab.encode_tgt(["baba \u20ac"])[0]) == "baba <unk>"  # an unseen character


def test_joint_model_is_shared_and_switching_layout_removes_the_old_models(data_dir: Path) -> None:
    separate = build_vocab(make_config(data_dir))
    folder = vocab_dir(make_config(data_dir))
    assert sorted(p.name for p in folder.glob("*.model")) == ["src.model", "tgt.model"]
    target_line = lines(data_dir, "train.tgt")[0]
    assert separate.encode_src([target_line]) != separate.encode_tgt([target_line])

    joint = build_vocab(make_config(data_dir, joint=True))
    assert sorted(p.name for p in folder.glob("*.model")) == ["joint.model"]
    assert joint.joint and joint.src_size == joint.tgt_size == SIZE
    assert joint.encode_src([target_line]) == joint.encode_tgt([target_line])
    assert joint.fingerprint() != separate.fingerprint()


def test_vocab_is_retrained_only_when_settings_or_training_data_change(data_dir: Path) -> None:
    config = make_config(data_dir)
    first = build_vocab(config)
    model = vocab_dir(config) / "src.model"
    stamp = model.stat().st_mtime_ns
    assert build_vocab(make_config(data_dir, threads=2)).fingerprint() == first.fingerprint()  # speed only
    assert model.stat().st_mtime_ns == stamp

    assert build_vocab(make_config(data_dir, size=SIZE + 10)).fingerprint() != first.fingerprint()
    back = build_vocab(config)
    assert back.fingerprint() == first.fingerprint()  # training is deterministic
    model.write_bytes(model.read_bytes()[:100])  # damaged (or another model copied over it)
    assert build_vocab(config).fingerprint() == first.fingerprint()  # trained again, not "up to date"
    write_split(data_dir, "train", lines(data_dir, "train.src")[:200], lines(data_dir, "train.tgt")[:200])
    assert build_vocab(config).fingerprint() != first.fingerprint()


def test_the_vocab_command_first_brings_the_prepared_data_up_to_the_config(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path / "c.yaml", "r", data={"synthetic": {"train_size": 200}})
    assert run_main("data", "prepare", str(config)).returncode == 0
    train_src = tmp_path / "r" / "data" / "train.src"
    assert len(train_src.read_text(encoding="utf-8").splitlines()) == 200
    done = run_main("vocab", str(config), "--set", "data.synthetic.train_size=300", text=True)
    assert done.returncode == 0, done.stderr
    assert len(train_src.read_text(encoding="utf-8").splitlines()) == 300  # not the stale 200
    assert "train.src" in done.stdout and " 300 " in done.stdout


def test_cache_holds_exactly_the_direct_encoding_and_is_memory_mapped(data_dir: Path, monkeypatch) -> None:
    monkeypatch.setattr(cache_module, "ENCODE_CHUNK", 7)  # many chunks: offsets must continue across them
    config = make_config(data_dir)
    vocab = build_vocab(config)
    assert build_cache(config, vocab) == [f"{split}.{side}" for split in SPLITS for side in ("src", "tgt")]
    for split in SPLITS:
        cache = load_cache(vocab_dir(config), split)
        for side, encode in (("src", vocab.encode_src), ("tgt", vocab.encode_tgt)):
            expected = encode(lines(data_dir, f"{split}.{side}"))
            array = getattr(cache, side)
            assert isinstance(array.tokens, np.memmap) and isinstance(array.offsets, np.memmap)
            assert (array.tokens.dtype, array.offsets.dtype, array.lengths.dtype) == (
                np.int32,
                np.int64,
                np.int32,
            )
            assert len(array) == len(expected) and array.offsets[0] == 0
            assert array.lengths.tolist() == [len(ids) for ids in expected]
            assert [array[i].tolist() for i in range(len(array))] == expected
            stats = cache_stats(vocab_dir(config))[f"{split}.{side}"]
            assert stats["tokens"] == sum(map(len, expected))
            assert stats["unk"] == sum(ids.count(UNK_ID) for ids in expected)
    assert len(load_cache(vocab_dir(config), "test").src[5]) == 0
    with pytest.raises(IndexError):
        load_cache(vocab_dir(config), "valid").tgt[40]


def test_cache_is_rebuilt_only_for_changed_data_or_vocabulary(data_dir: Path) -> None:
    config = make_config(data_dir)
    vocab = build_vocab(config)
    build_cache(config, vocab)
    cache = vocab_dir(config) / "cache"
    stamps = {p.name: p.stat().st_mtime_ns for p in cache.glob("*.npy")}
    assert build_cache(config, vocab) == []
    assert {p.name: p.stat().st_mtime_ns for p in cache.glob("*.npy")} == stamps

    write_split(data_dir, "valid", lines(data_dir, "valid.src")[:30], lines(data_dir, "valid.tgt")[:30])
    assert build_cache(config, vocab) == ["valid.src", "valid.tgt"]
    assert len(load_cache(vocab_dir(config), "valid").src) == 30

    bigger = make_config(data_dir, size=SIZE + 10)
    retrained = build_vocab(bigger)
    with pytest.raises(UserError, match="another vocabulary"):
        load_cache(vocab_dir(config), "train")
    assert len(build_cache(bigger, retrained)) == 6
    train = load_cache(vocab_dir(config), "train")
    assert [train.tgt[i].tolist() for i in range(len(train.tgt))] == retrained.encode_tgt(
        lines(data_dir, "train.tgt")
    )
    assert len(build_cache(bigger, retrained, force=True)) == 6


@pytest.mark.parametrize("damaged", ["train.src.tokens.npy", "valid.tgt.offsets.npy"])
def test_a_truncated_cache_file_is_encoded_again_not_taken_as_current(data_dir: Path, damaged: str) -> None:
    """A cut file (a full disk, a copy stopped half way) counted as current because it existed, and then
    failed to memory-map with an internal error."""
    config = make_config(data_dir)
    vocab = build_vocab(config)
    build_cache(config, vocab)
    path = vocab_dir(config) / "cache" / damaged
    with open(path, "r+b") as file:
        file.truncate(path.stat().st_size // 2)
    split = damaged.split(".")[0]
    with pytest.raises(UserError, match=f"{split}.{damaged.split('.')[1]}: cache files missing, damaged"):
        load_cache(vocab_dir(config), split)
    assert build_cache(config, vocab) == [damaged.rsplit(".", 2)[0]]
    assert len(load_cache(vocab_dir(config), split).src) == len(lines(data_dir, f"{split}.src"))


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("test.tgt", b"one line too few\n" * 39, r"test\.src has 40 lines but test\.tgt has 39"),
        ("valid.src", b"fine\nfine\nbad \xff byte\n" + b"fine\n" * 37, r"valid\.src:3: invalid UTF-8"),
    ],
)
def test_bad_split_files_are_user_errors(data_dir: Path, name: str, content: bytes, message: str) -> None:
    config = make_config(data_dir)
    (data_dir / name).write_bytes(content)
    with pytest.raises(UserError, match=message):
        build_cache(config, build_vocab(config))


def test_copy_to_makes_a_self_contained_vocabulary(data_dir: Path, tmp_path: Path) -> None:
    config = make_config(data_dir, joint=True)
    vocab = build_vocab(config)
    build_cache(config, vocab)
    vocab.copy_to(tmp_path / "run" / "vocab")
    assert sorted(p.name for p in (tmp_path / "run" / "vocab").iterdir()) == ["joint.model", "manifest.json"]
    copy = Vocab.load(tmp_path / "run" / "vocab")
    assert copy.fingerprint() == vocab.fingerprint()
    text = lines(data_dir, "valid.tgt")
    assert copy.encode_src(text) == vocab.encode_src(text) and copy.encode_tgt(text) == vocab.encode_tgt(text)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`seq2seq ARGS` (the entry point, in this process), stdout and stderr as text."""
    return run_main(*args, text=True)


def test_cli_trains_encodes_and_reports_then_does_no_work(data_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "exp.yaml"
    config.write_text(
        f"data:\n  dir: {data_dir}\nvocab:\n  type: unigram\n  size: {SIZE}\n", encoding="utf-8"
    )
    first = run_cli("vocab", str(config))
    assert first.returncode == 0, first.stderr
    assert f"unigram, separate: src {SIZE} / tgt {SIZE} pieces" in first.stdout
    assert "6 of 6 files encoded" in first.stdout
    row = next(line.split() for line in first.stdout.splitlines() if line.startswith("train.src"))
    assert row[1] == "300"
    again = run_cli("--quiet", "vocab", str(config), "--set", "vocab.threads=2")
    assert again.returncode == 0 and "0 of 6 files encoded" in again.stdout and again.stderr == ""


@pytest.mark.parametrize(
    ("setup", "size", "message"),
    [
        ("too_large", 5000, "vocab.size=5000 is too large"),
        ("too_small", 10, "vocab.size=10 is too small"),
        ("unprepared", SIZE, "run `seq2seq data prepare CONFIG` first"),
        ("blank", SIZE, "train.src: no sentence to train the vocabulary on (blank lines"),
        ("coverage", SIZE, "vocab.character_coverage"),
    ],
)
def test_cli_errors_are_one_line(data_dir: Path, tmp_path: Path, setup: str, size: int, message: str) -> None:
    if setup == "unprepared":
        (data_dir / "train.src").unlink()
    if setup == "blank":  # sentencepiece's own check failed with nothing said after the colon
        (data_dir / "train.src").write_text("  \n" * 300, encoding="utf-8")
    config = tmp_path / "exp.yaml"
    config.write_text(f"data:\n  dir: {data_dir}\n", encoding="utf-8")
    coverage = ["--set", "vocab.character_coverage=0.97"] if setup == "coverage" else []
    result = run_cli("--quiet", "vocab", str(config), "--set", f"vocab.size={size}", *coverage)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
