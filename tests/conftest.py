"""Shared fixtures: a tiny, complete run directory (vocabulary + untrained checkpoint) for CLI-level tests."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import yaml

from seq2seq_attn.checkpoint import checkpoint_dir, point_best, save_checkpoint
from seq2seq_attn.config import Config, from_dict, to_dict
from seq2seq_attn.model import build_model
from seq2seq_attn.vocab import build_vocab

TINY_MODEL = {
    "src_embed_dim": 8,
    "tgt_embed_dim": 8,
    "hidden_size": 16,
    "decoder_hidden_size": 16,
    "attention_dim": 16,
    "maxout_dim": 8,
    "init": "pytorch",
}
SRC_WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "to", "house", "big", "red", "naïve"]
TGT_WORDS = ["le", "chat", "assis", "sur", "tapis", "un", "chien", "couru", "à", "maison", "grand", "rouge"]


def tiny_config(root: Path, **sections: dict) -> Config:
    """A config for a tiny experiment under `root` (data in root/data, run in root/run)."""
    raw = {
        "name": "tiny",
        "seed": 1,
        "data": {"dir": str(root / "data")},
        "vocab": {"size": 40, "threads": 1},
        "model": dict(TINY_MODEL),
        "train": {"run_dir": str(root / "run")},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return from_dict(raw)


def write_corpus(data_dir: Path, n: int = 200, seed: int = 0) -> None:
    """Line-aligned {train,valid,test}.{src,tgt} of random word sequences."""
    rng = random.Random(seed)
    data_dir.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        for side, words in (("src", SRC_WORDS), ("tgt", TGT_WORDS)):
            lines = [" ".join(rng.choices(words, k=rng.randint(2, 9))) for _ in range(n)]
            (data_dir / f"{split}.{side}").write_text(
                "".join(line + "\n" for line in lines), encoding="utf-8"
            )


def make_run_dir(config: Config, steps: tuple[int, ...] = (1,)) -> Path:
    """What training leaves: run/config.yaml, run/vocab/, run/checkpoints/step-N.pt and best.pt -> the last.

    Each checkpoint holds a differently seeded random model (so averaging them changes the weights).
    """
    vocab = build_vocab(config)
    run = config.run_dir
    folder = checkpoint_dir(run)
    folder.mkdir(parents=True, exist_ok=True)
    vocab.copy_to(run / "vocab")
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(config)), encoding="utf-8")
    for step in steps:
        torch.manual_seed(step)
        model = build_model(config.model, vocab.src_size, vocab.tgt_size)
        payload = {
            "model": model.state_dict(),
            "config": to_dict(config),
            "vocab_fingerprint": vocab.fingerprint(),
            "step": step,
        }
        save_checkpoint(folder / f"step-{step}.pt", payload)
    point_best(folder, folder / f"step-{steps[-1]}.pt")
    return run


@pytest.fixture(scope="session")
def tiny_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete run directory with a random tiny model (bpe vocabulary of 40, emb 8, hidden 16).

    Shared by the whole session: treat it as read-only (copy it to change it).
    """
    root = tmp_path_factory.mktemp("tiny")
    config = tiny_config(root)
    write_corpus(config.data_dir)
    return make_run_dir(config)
