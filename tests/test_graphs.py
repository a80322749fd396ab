"""The training update in CUDA graphs (training/graphs.py), as far as a CPU can check it: batches padded to
a small fixed set of shapes, the update on fixed buffers with nothing read back from the device, the
same losses, gradient norms and parameters as the eager update, and when graphs are used at all. The
captures themselves run in tests/test_cuda.py, on a GPU."""

from __future__ import annotations

import pytest
import torch
from helpers import SEARCH_FAMILIES, assert_graphs_update_as_eager, random_model, tiny_config

from seq2seq_attn.errors import UserError
from seq2seq_attn.training import train as train_module
from seq2seq_attn.training.graphs import PaddedShapes, uses_cuda_graphs
from seq2seq_attn.training.optim import Schedule, build_optimizer, load_optimizer_state, step_optimizer
from seq2seq_attn.vocab.batching import graph_rows
from seq2seq_attn.vocab.pieces import BOS_ID, EOS_ID

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize("per_doubling", [4, 8])
def test_rows_round_up_to_one_of_a_few_sizes_per_doubling(per_doubling: int) -> None:
    if per_doubling == 8:  # training's
        assert [graph_rows(n, 8) for n in (1, 8, 15, 16, 17, 31, 33, 80, 81, 1000)] == [
            1, 8, 15, 16, 18, 32, 36, 80, 88, 1024,
        ]  # fmt: skip
    else:  # the search's
        assert [graph_rows(n, 4) for n in (1, 4, 5, 7, 9, 17, 33, 80, 81)] == [1, 4, 5, 7, 10, 20, 40, 80, 96]
    for rows in range(1, 3000):
        assert rows <= graph_rows(rows, per_doubling) <= rows * (1 + 1 / per_doubling)
    sizes = {graph_rows(n, per_doubling) for n in range(257, 513)}
    assert len(sizes) == per_doubling


def test_shapes_are_a_fixed_sentence_count_and_lengths_in_steps_of_eight() -> None:
    sentences = PaddedShapes.of(
        tiny_config(train={"batch_type": "sentences", "batch_size": 80, "max_len": 50}).train
    )
    assert sentences(80, 30, 31) == (80, 32, 32)
    assert sentences(7, 1, 9) == (80, 8, 16)  # a pool's last, small batch
    assert sentences(80, 49, 51) == (80, 51, 51)  # never past the longest a batch can be
    shapes = {sentences(80, s, t) for s in range(1, 52) for t in range(1, 52)}
    assert len(shapes) == 7 * 7
    tokens = PaddedShapes.of(tiny_config(train={"batch_type": "tokens", "max_len": 50}).train)
    assert tokens(81, 30, 31) == (88, 32, 32)


@pytest.mark.parametrize("optimizer", ["adam", "adadelta"])
@pytest.mark.parametrize("loss_norm", ["tokens", "sentences"])
def test_the_captured_update_on_padded_buffers_updates_as_training_does(optimizer, loss_norm) -> None:
    """Ten updates over batches of 3 and 4 sentences, the learning rate warming up: padded to their
    shapes and run on the shapes' buffers (what a graph replays; a CPU runs it eagerly) they give the
    eager update's losses, gradient norms (clipped at 0.5) and parameters."""
    rate = 1.0 if optimizer == "adadelta" else 0.01
    settings = {"optimizer": optimizer, "loss_norm": loss_norm, "learning_rate": rate}
    assert assert_graphs_update_as_eager("cpu", rtol=1e-4, params_atol=1e-5, **settings) == 0  # no graphs


@pytest.fixture
def no_host_reads(monkeypatch):
    """Any read of a tensor's value on the host fails: what a captured update may not do."""

    def refuse(*args, **kwargs):
        raise AssertionError("a tensor's value was read on the host")

    for name in ("item", "tolist", "__bool__", "__int__", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)


def _adadelta() -> tuple[torch.optim.Optimizer, list[torch.Tensor]]:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(5)), torch.nn.Parameter(torch.randn(2, 3))]
    optimizer = build_optimizer(
        params, tiny_config(train={"optimizer": "adadelta", "learning_rate": 1.0}).train
    )
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer.step()  # its state exists: the skip can be decided on the device
    return optimizer, params


def test_adadelta_skips_a_non_finite_update_on_the_device(no_host_reads) -> None:
    """Without reading the flag back: a bad step leaves parameters and state as they were, a good one
    is Adadelta's step."""
    optimizer, params = _adadelta()
    state = lambda: [t.clone() for p in params for t in (p, *optimizer.state[p].values())]  # noqa: E731
    before = state()
    for p in params:
        p.grad = torch.full_like(p, float("inf"))
    step_optimizer(optimizer, torch.tensor(1.0), fused=False, on_device=True)
    for got, want in zip(state(), before, strict=True):
        assert torch.equal(got, want)
    reference, reference_params = _adadelta()
    for ours, theirs in zip(params, reference_params, strict=True):
        ours.grad = theirs.grad = torch.full_like(ours, 0.5)
    step_optimizer(optimizer, torch.tensor(0.0), fused=False, on_device=True)
    torch.optim.Adadelta.step(reference)
    for got, want in zip(params, reference_params, strict=True):
        assert torch.equal(got, want)


def test_the_schedule_writes_a_tensor_rate_in_place() -> None:
    """A captured step reads its rate from the optimiser's tensor: the schedule writes into that tensor."""
    cfg = tiny_config(train={"warmup_steps": 10, "learning_rate": 0.01}).train
    optimizer = build_optimizer([torch.nn.Parameter(torch.zeros(2))], cfg, capturable=True)
    rate = optimizer.param_groups[0]["lr"]
    assert isinstance(rate, torch.Tensor)
    assert Schedule(optimizer, cfg).set_step(4) == pytest.approx(0.005)
    assert optimizer.param_groups[0]["lr"] is rate and rate.item() == pytest.approx(0.005)


@pytest.mark.parametrize("optimizer", ["adam", "adadelta"])
def test_a_checkpoint_resumes_with_or_without_graphs(optimizer) -> None:
    """An optimiser's state saved with graphs off loads into one built for graphs, and the other way:
    the state is the checkpoint's, the rate's form (tensor or number) the loading run's."""
    cfg = tiny_config(train={"optimizer": optimizer}).train
    for saved_capturable in (False, True):
        source = build_optimizer([torch.nn.Parameter(torch.ones(3))], cfg, capturable=saved_capturable)
        source.param_groups[0]["params"][0].grad = torch.ones(3)
        source.step()
        param = torch.nn.Parameter(torch.ones(3))
        target = build_optimizer([param], cfg, capturable=not saved_capturable)
        rate = target.param_groups[0]["lr"]
        load_optimizer_state(target, source.state_dict())
        assert target.param_groups[0]["lr"] is rate  # a captured update reads this very tensor
        assert isinstance(rate, torch.Tensor) == (not saved_capturable)
        for key, value in source.state[source.param_groups[0]["params"][0]].items():
            torch.testing.assert_close(target.state[param][key], value)


def test_graphs_are_used_where_they_can_be_and_on_elsewhere_is_an_error() -> None:
    def config(**train):
        return tiny_config(train=train).train

    assert not uses_cuda_graphs(config(), CPU, distributed=False)  # auto
    assert uses_cuda_graphs(config(), CUDA, distributed=False)
    assert uses_cuda_graphs(config(optimizer="adadelta", cuda_graphs="on"), CUDA, distributed=False)
    assert not uses_cuda_graphs(config(cuda_graphs="off"), CUDA, distributed=False)
    assert not uses_cuda_graphs(config(optimizer="sgd"), CUDA, distributed=False)
    assert not uses_cuda_graphs(config(), CUDA, distributed=True)
    for train, device, distributed, why in [
        ({}, CPU, False, "not on a CUDA device"),
        ({"optimizer": "sgd"}, CUDA, False, "train.optimizer sgd"),
        ({}, CUDA, True, "DDP"),
    ]:
        with pytest.raises(UserError, match=f"train.cuda_graphs is 'on' but .*{why}"):
            uses_cuda_graphs(config(cuda_graphs="on", **train), device, distributed)


def test_training_with_graphs_on_a_cpu_stops_before_it_starts(tmp_path) -> None:
    config = tiny_config(tmp_path, train={"cuda_graphs": "on", "device": "cpu"})
    with pytest.raises(UserError, match="train.cuda_graphs is 'on' but training runs on the cpu"):
        train_module.train(config)
    assert not (tmp_path / "data").exists()  # before any data was prepared


def test_evaluation_sees_weights_that_changed_without_a_new_version() -> None:
    """An update replayed from a CUDA graph changes the weights without raising their version counters;
    the next evaluation's search steps must still read them, not the gate table (model/recurrent.py
    `static_gates`) derived from the weights before: leaving training mode rebuilds it."""

    def second_step(model) -> torch.Tensor:  # the first step of update_then_attend reads no word
        enc = model.encode(torch.tensor([[5, 6, 7, EOS_ID]]), torch.tensor([4]))
        _, state, _ = model.step(enc, model.init_state(enc), torch.tensor([BOS_ID]))
        return model.step(enc, state, torch.tensor([9]))[0]

    model = random_model(0, **SEARCH_FAMILIES[0])  # in eval mode
    with torch.no_grad():
        before = second_step(model)
        model.train()
        versions = [p._version for p in model.parameters()]
        for parameter in model.parameters():
            parameter.data.mul_(1.5)  # as a replayed update: in place, the version unchanged
        assert [p._version for p in model.parameters()] == versions
        model.eval()
        after = second_step(model)
        fresh = random_model(0, **SEARCH_FAMILIES[0])
        fresh.load_state_dict(model.state_dict())
        expected = second_step(fresh)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, expected)
