"""The training loss: the chunked vocabulary projection + cross-entropy equals the one-block computation;
normalised by tokens, by sentences or not at all (the authors' sum), also across DDP ranks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import tiny_config
from torch import nn
from torch.nn import functional as F

from seq2seq_attn.model import build_model
from seq2seq_attn.model.cross_entropy import summed_cross_entropy
from seq2seq_attn.training.loss import batch_loss, loss_divisor
from seq2seq_attn.vocab.batching import Batch, collate
from seq2seq_attn.vocab.pieces import PAD_ID

VOCAB, FEATURES = 11, 6


def problem(seed: int = 0) -> tuple[nn.Linear, torch.Tensor, torch.Tensor]:
    """A projection, features (3, 5, FEATURES) and targets with PAD tails of different lengths."""
    torch.manual_seed(seed)
    projection = nn.Linear(FEATURES, VOCAB)
    features = torch.randn(3, 5, FEATURES, requires_grad=True)
    targets = torch.randint(4, VOCAB, (3, 5))
    targets[0, 3:] = PAD_ID
    targets[2, 1:] = PAD_ID
    return projection, features, targets


def reference(projection: nn.Linear, features: torch.Tensor, targets: torch.Tensor, smoothing: float):
    logits = projection(features).flatten(0, 1)
    return F.cross_entropy(
        logits, targets.flatten(), ignore_index=PAD_ID, reduction="sum", label_smoothing=smoothing
    )


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("chunk_logits", [1, VOCAB * 4, VOCAB * 7, 10**6])  # 1 row, 4 rows, 7 rows, one
def test_chunks_give_the_loss_and_gradients_of_one_block(chunk_logits: int, smoothing: float) -> None:
    projection, features, targets = problem()
    expected = reference(projection, features, targets, smoothing)
    expected_grads = torch.autograd.grad(expected, [features, projection.weight])

    chunked = summed_cross_entropy(projection, features, targets, VOCAB, smoothing, chunk_logits)
    grads = torch.autograd.grad(chunked, [features, projection.weight])

    assert chunked.dtype == torch.float32
    torch.testing.assert_close(chunked, expected)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want)
    assert (grads[0][2, 1:] == 0).all()  # PAD positions get no gradient


def test_only_real_targets_are_projected() -> None:
    """Given their count, padding rows never reach the vocabulary projection (its largest product): 9 real
    targets of 15."""
    projection, features, targets = problem()
    rows = []

    def logits_of(part: torch.Tensor) -> torch.Tensor:
        rows.append(part.size(0))
        return projection(part)

    loss = summed_cross_entropy(logits_of, features, targets, VOCAB, chunk_logits=VOCAB * 4, n_real=9)
    assert rows == [4, 4, 1]  # the 3 + 5 + 1 real targets, in chunks of 4 rows
    assert sum(rows) == int((targets != PAD_ID).sum())
    torch.testing.assert_close(loss, reference(projection, features, targets, 0.0))


def test_without_a_count_every_row_is_projected_and_padding_weighs_nothing() -> None:
    """Training passes the count it already has on the host (`n_real`) and only those rows are projected,
    in order; without it (a CUDA graph's fixed shapes) every row is, and the loss and gradients are the
    same."""
    projection, features, targets = problem()
    seen = {}
    for n_real in (9, None):
        rows = []

        def logits_of(part: torch.Tensor, rows=rows) -> torch.Tensor:
            rows.append(part.detach().clone())
            return projection(part)

        loss = summed_cross_entropy(
            logits_of, features, targets, VOCAB, label_smoothing=0.1, chunk_logits=VOCAB * 4, n_real=n_real
        )
        grads = torch.autograd.grad(loss, [features, projection.weight])
        seen[n_real] = torch.cat(rows), loss, grads
    torch.testing.assert_close(
        seen[9][0], features.flatten(0, 1)[targets.flatten() != PAD_ID], rtol=0, atol=0
    )
    torch.testing.assert_close(seen[None][0], features.flatten(0, 1), rtol=0, atol=0)
    torch.testing.assert_close(seen[9][1], reference(projection, features, targets, 0.1))
    torch.testing.assert_close(seen[None][1], seen[9][1])
    for got, want in zip(seen[None][2], seen[9][2], strict=True):
        torch.testing.assert_close(got, want)
    assert (seen[None][2][0][2, 1:] == 0).all()  # PAD positions get no gradient


def test_all_padding_costs_nothing() -> None:
    projection, features, _ = problem()
    targets = torch.full((3, 5), PAD_ID)
    assert summed_cross_entropy(projection, features, targets, VOCAB, chunk_logits=VOCAB * 2).item() == 0.0


def test_bf16_logits_are_summed_in_fp32() -> None:
    projection, features, targets = problem()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = summed_cross_entropy(projection, features, targets, VOCAB, chunk_logits=VOCAB * 3)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(reference(projection, features, targets, 0.0).item(), rel=0.02)


def tiny_problem() -> tuple[nn.Module, list[np.ndarray], list[np.ndarray]]:
    """A tiny RNNsearch and four sentence pairs of different lengths."""
    cfg = tiny_config(
        model={
            "hidden_size": 8,
            "decoder_hidden_size": 8,
            "attention_dim": 8,
            "maxout_dim": 4,
            "dropout_hidden": 0.0,
        }
    ).model
    torch.manual_seed(0)
    model = build_model(cfg, VOCAB, VOCAB).train()
    rng = np.random.default_rng(0)
    src = [rng.integers(4, VOCAB, n) for n in (5, 2, 7, 4)]
    tgt = [rng.integers(4, VOCAB, n) for n in (6, 3, 1, 5)]
    return model, src, tgt


def gradients(
    model: nn.Module, batch: Batch, loss_norm: str, world_size: int = 1, static: bool = False
) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    (
        batch_loss(model, batch, bf16=False, static=static) / loss_divisor(batch, loss_norm, world_size)
    ).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_the_three_normalisations_scale_one_gradient() -> None:
    """`train.loss_norm` on one batch: `batch` is the plain sum's gradient, `sentences` that divided by
    the sentences, `tokens` that divided by the target tokens (EOS included), for every parameter."""
    model, src, tgt = tiny_problem()
    batch = collate(src, tgt)
    grads = {norm: gradients(model, batch, norm) for norm in ("tokens", "sentences", "batch")}
    assert batch.n_tokens == 6 + 3 + 1 + 5 + 4  # the targets and their EOS
    for summed, by_sentence, by_token in zip(
        grads["batch"], grads["sentences"], grads["tokens"], strict=True
    ):
        torch.testing.assert_close(by_sentence, summed / 4)
        torch.testing.assert_close(by_token, summed / 19)


@pytest.mark.parametrize("loss_norm", ["tokens", "sentences", "batch"])
def test_a_batch_padded_to_a_fixed_shape_gives_the_loss_and_gradients_of_the_batch(loss_norm) -> None:
    """A CUDA graph's batch (training/graphs.py): three empty sentences added and both sides padded
    further, every row projected (`static`) or the real ones only, against the batch as it comes: the
    same summed loss and every gradient, to float rounding."""
    model, src, tgt = tiny_problem()
    batch = collate(src, tgt)
    padded = collate(src, tgt, pad_to=lambda rows, src_len, tgt_len: (rows + 3, src_len + 5, tgt_len + 4))
    assert padded.src.shape == (7, 13) and padded.tgt_out.shape == (7, 11)
    assert (padded.n_tokens, padded.n_sentences) == (batch.n_tokens, 4)
    assert padded.src_lengths[4:].tolist() == [1, 1, 1] and (padded.tgt_out[4:] == PAD_ID).all()
    assert loss_divisor(padded, loss_norm) == loss_divisor(batch, loss_norm)
    want = gradients(model, batch, loss_norm)
    for static in (True, False):
        loss = batch_loss(model, padded, bf16=False, static=static)
        torch.testing.assert_close(loss, batch_loss(model, batch, bf16=False))
        for got, expected in zip(gradients(model, padded, loss_norm, static=static), want, strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-7)


def _ddp_rank(rank: int, world_size: int, port: int, loss_norm: str, out: str) -> None:
    """One rank of a gloo group: the model under DDP, this rank's half of the batch, one backward."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        model, src, tgt = tiny_problem()
        half = [slice(0, 2), slice(2, 4)][rank]
        part = collate(src[half], tgt[half])
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        grads = gradients(ddp, part, loss_norm, world_size)
        if rank == 0:
            torch.save(grads, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.e2e
@pytest.mark.slow(seconds=8)
@pytest.mark.parametrize("loss_norm", ["batch", "sentences"])
def test_two_ranks_with_half_batches_make_the_update_of_one_rank_with_the_whole(tmp_path, loss_norm) -> None:
    """DDP averages the ranks' gradients: with the world-size scaling, `batch` is still the sum over the
    whole global batch, and `sentences` its mean over the global batch's sentences (equal halves)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "grads.pt"
    torch.multiprocessing.spawn(_ddp_rank, args=(2, port, loss_norm, str(out)), nprocs=2)
    model, src, tgt = tiny_problem()
    for two_ranks, one_rank in zip(
        torch.load(out), gradients(model, collate(src, tgt), loss_norm), strict=True
    ):
        torch.testing.assert_close(two_ranks, one_rank)
