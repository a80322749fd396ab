"""Shared fixtures and helpers: a tiny, complete run directory (vocabulary + untrained checkpoint) for
CLI-level tests; random tiny models and sources for search tests (on the CPU and, in test_cuda.py, a GPU)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from seq2seq_attn.checkpoint import load_checkpoint, save_checkpoint
from seq2seq_attn.config import Config, DecodeConfig, ModelConfig, from_dict, to_dict
from seq2seq_attn.model import build_model
from seq2seq_attn.run_dir import checkpoint_dir, point_best
from seq2seq_attn.search import translate_ids
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
SEARCH_VOCAB = 30  # source and target vocabulary of `random_model`
SEARCH_FAMILIES = [  # a GRU RNNsearch, an LSTM Luong decoder, the RNNencdec
    {"decoder": "rnnsearch", "attention": "bahdanau", "cell": "gru"},
    {"decoder": "luong", "attention": "general", "cell": "lstm"},
    {"decoder": "rnnsearch", "attention": "none", "cell": "gru"},
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `cuda` are skipped where torch sees no CUDA device."""
    if torch.cuda.is_available():
        return
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


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


def random_model(seed: int = 0, **overrides: str) -> nn.Module:
    """An untrained TINY_MODEL (with `overrides`) over SEARCH_VOCAB ids, in eval mode, on the CPU."""
    torch.manual_seed(seed)
    return build_model(ModelConfig(**{**TINY_MODEL, **overrides}), SEARCH_VOCAB, SEARCH_VOCAB).eval()


def random_sources(n: int, seed: int = 0, longest: int = 12) -> list[list[int]]:
    """`n` sentences of 1 to `longest` random non-special ids."""
    rng = random.Random(seed)
    return [[rng.randrange(4, SEARCH_VOCAB) for _ in range(rng.randint(1, longest))] for _ in range(n)]


def assert_search_is_batch_invariant(model: nn.Module, device: str) -> None:
    """Beam search in fp32 on `device` gives each sentence the same n-best list searched alone as in batches
    of several sizes, among other sentences in shuffled order."""
    srcs = random_sources(16, seed=5, longest=15)
    cfg = DecodeConfig(beam_size=4, nbest=2, precision="fp32")
    alone = [translate_ids(model, [s], cfg, device)[0] for s in srcs]
    order = list(range(len(srcs)))
    random.Random(0).shuffle(order)
    for budget in (16 * 4, 10_000):  # several batches, and everything in one batch
        together = translate_ids(model, [srcs[i] for i in order], cfg, device, batch_tokens=budget)
        for i, nbest in zip(order, together, strict=True):
            assert [h.tokens for h in nbest] == [h.tokens for h in alone[i]]
            # matrix kernels pick their blocking by row count, so the last float bits may differ
            assert [h.score for h in nbest] == pytest.approx([h.score for h in alone[i]], rel=1e-5, abs=1e-6)


def with_eval_section(run: Path, folder: Path, **keys: object) -> Path:
    """A copy of `run` whose checkpoints carry a config with these `eval` keys."""
    copy = folder / run.name
    shutil.copytree(run, copy, symlinks=True)
    for path in (copy / "checkpoints").glob("*.pt"):
        if not path.is_symlink():
            payload = load_checkpoint(path)
            payload["config"]["eval"].update(keys)
            save_checkpoint(path, payload)
    return copy
