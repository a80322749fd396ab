"""int8 search (`decode.precision: int8`): the packed products, the model's search copy, the commands."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from helpers import (
    SEARCH_FAMILIES,
    SEARCH_VOCAB,
    assert_one_line_error,
    random_model,
    random_sources,
    run_main,
)
from torch import nn

import seq2seq_attn as s2s
from seq2seq_attn.decoding import int8
from seq2seq_attn.decoding import translate as translate_module
from seq2seq_attn.decoding.int8 import Int8Linear, Int8Weight, quantized
from seq2seq_attn.decoding.search import pad_sources
from seq2seq_attn.errors import UserError
from seq2seq_attn.model.recurrent import RecurrentStack
from seq2seq_attn.provenance import Cpu


def test_int8_products_keep_each_rows_precision() -> None:
    """One scale per row: rows a thousand times smaller than the others keep their relative precision."""
    torch.manual_seed(0)
    weight = torch.randn(48, 64)
    weight[:16] *= 1e-3
    x = torch.randn(5, 7, 64)
    exact = torch.nn.functional.linear(x, weight)
    packed = Int8Weight(weight)(x)
    assert packed.shape == (5, 7, 48) and packed.dtype == torch.float32
    error = (packed - exact).abs().amax(dim=(0, 1)) / exact.abs().amax(dim=(0, 1))  # per output row
    assert error.max() < 0.05 and error[:16].max() < 0.05
    bias = torch.randn(48)
    with_bias = Int8Weight(weight, bias)(x)
    assert torch.allclose(with_bias - packed, bias.expand_as(packed), atol=1e-4)
    zero = Int8Weight(torch.zeros(3, 64))(x)  # an all-zero row has no scale to take: zeros out
    assert torch.equal(zero, torch.zeros(5, 7, 3))


@pytest.mark.parametrize("family", SEARCH_FAMILIES, ids=lambda f: f"{f['decoder']}-{f['attention']}")
def test_the_search_copy_is_int8_close_to_fp32_and_leaves_the_model_alone(family) -> None:
    model = random_model(**family)
    before = {name: value.clone() for name, value in model.state_dict().items()}
    copy = quantized(model)

    linears = [m for m in copy.decoder.modules() if isinstance(m, nn.Linear | Int8Linear)]
    assert linears and all(isinstance(m, Int8Linear) for m in linears)
    stacks = [m for m in copy.decoder.modules() if isinstance(m, RecurrentStack)]
    assert all(isinstance(w.w_hh, Int8Weight) for stack in stacks for w in stack.int8_weights)
    assert not any(isinstance(m, Int8Linear) for m in model.modules())
    assert all(torch.equal(value, before[name]) for name, value in model.state_dict().items())

    src, lengths = pad_sources([random_sources(4, seed=2)], "cpu")
    with torch.no_grad():
        outputs = []
        for searched in (model, copy):
            enc = searched.encode(src, lengths)
            state = searched.init_state(enc)
            y = torch.full((4,), 2)
            for _ in range(3):  # three steps, each fed its own argmax
                log_probs, state, _ = searched.step(enc, state, y)
                y = log_probs.argmax(-1)
            outputs.append(log_probs)
    assert outputs[0].shape == outputs[1].shape == (4, SEARCH_VOCAB)
    assert (outputs[0] - outputs[1]).abs().max() < 0.05
    assert not torch.equal(outputs[0], outputs[1])  # int8 products, not the fp32 ones


def test_int8_is_cpu_only_and_warns_where_the_cpu_lacks_its_kernels(monkeypatch, capsys) -> None:
    with pytest.raises(UserError, match="decode.precision int8 runs on the CPU only"):
        int8.search_copy(random_model(), "cuda", "decode.precision")
    int8._warn_slow_int8.cache_clear()
    monkeypatch.setattr(int8, "cpu", lambda: Cpu("Old CPU", "6", "1", frozenset({"sse2", "avx"})))
    int8.search_copy(random_model(), "cpu", "--precision")
    int8.search_copy(random_model(), "cpu", "--precision")
    assert capsys.readouterr().err.count("precision int8 on a CPU without AVX2") == 1
    int8._warn_slow_int8.cache_clear()
    monkeypatch.setattr(int8, "cpu", lambda: Cpu("New CPU", "6", "2", frozenset({"avx", "avx2"})))
    int8.search_copy(random_model(), "cpu", "--precision")
    assert capsys.readouterr().err == ""


def test_translate_the_api_and_the_lexical_shortlist_in_int8(tiny_run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    (tmp_path / "data").symlink_to(tiny_run_dir.parent / "data")
    source = tmp_path / "src"
    lines = ["the cat sat", "", "a dog ran to the house"]
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    command = ["translate", "--model", str(run), "--input", str(source), "--precision", "int8"]
    result = run_main(*command, text=True)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3 and result.stdout.splitlines()[1] == ""
    assert s2s.load(run, precision="int8").translate(lines) == result.stdout.splitlines()

    built = run_main("lexical-shortlist", str(run), "--top-k", "3", "--frequent", "4", "--sentences", "50")
    assert built.returncode == 0, built.stderr
    both = run_main(*command, "--lexical-shortlist", text=True)
    assert both.returncode == 0, both.stderr
    assert len(both.stdout.splitlines()) == 3
    assert_one_line_error(run_main(*command, "--precision", "int4"), "--precision")

    many = [f"the cat {'and the dog ' * (n % 5)}sat" for n in range(12)]
    (tmp_path / "many").write_text("".join(f"{line}\n" for line in many), encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:  # more lines than a chunk: the API searches the same groups
        patch.setattr(translate_module, "CHUNK_LINES", 5)
        rows = run_main(
            *command, "--scores", "--input", str(tmp_path / "many"), text=True
        ).stdout.splitlines()
        found = s2s.load(run, precision="int8").search(many)
    assert [f"{f.candidates[0].score:.4f}\t{f.candidates[0].text}" for f in found] == rows

    config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    config.setdefault("decode", {})["precision"] = "int8"  # eval --model searches with the run's decode
    (run / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    reference = tmp_path / "ref"
    reference.write_text("".join(f"{line}\n" for line in result.stdout.splitlines()), encoding="utf-8")
    scored = run_main("eval", "--model", str(run), "--src", str(source), "--ref", str(reference), text=True)
    assert scored.returncode == 0, scored.stderr
    assert re.search(r"\ball\b.*\b100\.0", scored.stdout)  # int8 search again: its own output back
