"""Golden outputs: committed checkpoints of one small model per decoder kind, briefly trained to reverse
random sentences (so that its translations are more than one repeated token), with the loss, the gradient
norm and the greedy and beam translations they gave when they were written.

Why: a change to the decoder (a new option such as `model.coverage` or a new `model.decoder_step`) must
leave every existing model as it was. These files pin that down across versions: each checkpoint must still
load through the config and weight names it was saved with, and give the same numbers (within float
tolerance, so the test holds on any CPU's rounding) and the same translations.

`python tests/test_golden.py` writes the files of a kind added to KINDS; `--again` writes every kind again:
do that only for a change meant to alter them, and
check that the translations agree under `ATEN_CPU_CAPABILITY=default` too (a near tie that another kernel
path would break makes a poor golden sentence).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # helpers, when run as a script

from helpers import VOCAB, batch, random_sources, tiny_model_config  # noqa: E402

from seq2seq_attn.config import DecodeConfig, from_dict, to_dict  # noqa: E402
from seq2seq_attn.decoding.search import translate_ids  # noqa: E402
from seq2seq_attn.model import build_model  # noqa: E402
from seq2seq_attn.runs.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402

GOLDEN = Path(__file__).parent / "data" / "golden"
EXPECTED = GOLDEN / "expected.json"
KINDS = {  # name: the `tiny_model_config` variant (encoder, attention, decoder)
    "rnnsearch-attend-then-update": ("gru-bi-1", "bahdanau", "rnnsearch"),
    "rnnsearch-update-then-attend": ("gru-bi-1", "bahdanau", "rnnsearch-uta"),
    "rnnencdec": ("gru-bi-1", "none", "rnnsearch-uta"),
    "rnnsearch-lstm-2-layers-concat": ("lstm-bi-2", "concat", "rnnsearch"),
    "luong-feeding-general": ("gru-bi-1", "general", "luong-feed"),
    "luong-no-feeding-dot-lstm": ("lstm-uni-2", "dot", "luong-nofeed"),
    "rnnsearch-coverage-linguistic": ("gru-bi-1", "bahdanau", "rnnsearch-uta-coverage-linguistic"),
    "rnnsearch-coverage-neural": ("gru-bi-1", "bahdanau", "rnnsearch-uta-coverage-neural"),
    "rnnsearch-conditional-gru": ("gru-bi-1", "bahdanau", "rnnsearch-cgru"),
}
SOURCES = random_sources(6, seed=11, longest=9, vocab=VOCAB)
SEARCHES = {"greedy": 1, "beam5": 5}
LOSS_RTOL = 1e-5  # a summed loss of ~50 nats: float32 reorderings move it by far less
NORM_RTOL = 1e-4
SCORE_ATOL = 1e-4


def outputs(model: torch.nn.Module) -> dict:
    """The teacher-forced summed loss and gradient norm on `helpers.batch`, and each search's translations
    (tokens and score) of SOURCES."""
    src, lengths, tgt_in = batch()
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full_like(tgt_in[:, :1], 3)], dim=1)  # y_1 .. <eos>
    model.train()
    model.zero_grad()
    loss = model(src, lengths, tgt_in, tgt_out)
    loss.backward()
    grads = [p.grad.double() for p in model.parameters() if p.grad is not None]
    norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
    model.eval()
    found = {"loss": loss.item(), "grad_norm": norm}
    for name, beam in SEARCHES.items():
        hyps = translate_ids(model, SOURCES, DecodeConfig(beam_size=beam, max_len_b=12), "cpu")
        found[name] = [{"tokens": " ".join(map(str, h[0].tokens)), "score": h[0].score} for h in hyps]
    return found


def train_to_reverse(model: torch.nn.Module, updates: int = 150) -> None:
    """A few Adam updates on random sentences whose translation is the sentence reversed."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    for update in range(updates):
        sources = random_sources(16, seed=100 + update, longest=9, vocab=VOCAB)
        width = max(map(len, sources)) + 1
        src = torch.zeros(len(sources), width, dtype=torch.long)
        tgt_in = torch.zeros(len(sources), width, dtype=torch.long)
        tgt_out = torch.zeros(len(sources), width, dtype=torch.long)
        for row, ids in enumerate(sources):
            src[row, : len(ids) + 1] = torch.tensor([*ids, 3])  # <eos>
            tgt_in[row, : len(ids) + 1] = torch.tensor([2, *ids[::-1]])  # <bos> reversed
            tgt_out[row, : len(ids) + 1] = torch.tensor([*ids[::-1], 3])
        lengths = torch.tensor([len(ids) + 1 for ids in sources])
        optimizer.zero_grad()
        (model(src, lengths, tgt_in, tgt_out) / len(sources)).backward()
        optimizer.step()


def load(kind: str) -> torch.nn.Module:
    """The committed checkpoint of `kind`, rebuilt from its own config as the product rebuilds one."""
    payload = load_checkpoint(GOLDEN / f"{kind}.pt")
    model = build_model(from_dict(payload["config"]).model, VOCAB, VOCAB)
    model.load_state_dict(payload["model"])  # strict: every saved weight has its place, and no new one
    return model


@pytest.mark.parametrize("kind", KINDS)
def test_golden_checkpoint_gives_its_recorded_outputs(kind):
    expected = json.loads(EXPECTED.read_text())[kind]
    found = outputs(load(kind))
    assert found["loss"] == pytest.approx(expected["loss"], rel=LOSS_RTOL)
    assert found["grad_norm"] == pytest.approx(expected["grad_norm"], rel=NORM_RTOL)
    for name in SEARCHES:
        assert [h["tokens"] for h in found[name]] == [h["tokens"] for h in expected[name]], name
        scores = [h["score"] for h in found[name]]
        assert scores == pytest.approx([h["score"] for h in expected[name]], abs=SCORE_ATOL), name


def write(again: bool = False) -> None:
    """Build, save and record every kind that has no checkpoint yet, or with `again` every kind (see the
    module docstring for when)."""
    GOLDEN.mkdir(parents=True, exist_ok=True)
    recorded = json.loads(EXPECTED.read_text()) if EXPECTED.is_file() else {}
    for kind, variant in KINDS.items():
        if (GOLDEN / f"{kind}.pt").is_file() and kind in recorded and not again:
            continue
        torch.manual_seed(0)
        model_config = tiny_model_config(*variant)
        model = build_model(model_config, VOCAB, VOCAB)
        train_to_reverse(model)
        config = to_dict(from_dict({"name": kind, "model": to_dict(model_config)}))
        save_checkpoint(GOLDEN / f"{kind}.pt", {"model": model.state_dict(), "config": config})
        recorded[kind] = outputs(load(kind))
    EXPECTED.write_text(json.dumps(recorded, indent=1) + "\n")


if __name__ == "__main__":
    write(again="--again" in sys.argv)
