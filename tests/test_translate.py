"""`seq2seq translate` / `seq2seq average`: line alignment whatever the bytes, formats, attention files, UNK
replacement, checkpoint averaging, one-line errors."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from helpers import (
    ScriptedModel,
    assert_one_line_error,
    make_run_dir,
    record_compiles,
    run_main,
    snapshot,
    tiny_config,
    write_corpus,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import seq2seq_attn.decoding.search
from seq2seq_attn.cli.translate import register
from seq2seq_attn.config import DecodeConfig
from seq2seq_attn.decoding.translate import Translator, piece_words, translate_stream
from seq2seq_attn.errors import UserError
from seq2seq_attn.evaluation.models.heatmap import MAX_INCHES, MIN_FONT, attention_files, axis_layout
from seq2seq_attn.runs.average import average_checkpoints
from seq2seq_attn.runs.checkpoint import load_checkpoint, save_checkpoint
from seq2seq_attn.runs.run_folder import latest_checkpoints, load_trained
from seq2seq_attn.vocab.pieces import EOS_ID, UNK_ID

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "big", "red", "naïve"]


@pytest.fixture(scope="module")
def trained(tiny_run_dir: Path):
    return load_trained(tiny_run_dir)


def make_translator(trained, with_attention: bool = False, **decode: object) -> Translator:
    model, vocab, config = trained
    return Translator(
        model, vocab, dataclasses.replace(config.decode, **decode), "cpu", with_attention=with_attention
    )


def run_stream(translator: Translator, data: bytes, **options: object) -> list[str]:
    sink = io.BytesIO()
    translate_stream(translator, io.BytesIO(data), sink, **options)
    return sink.getvalue().decode("utf-8").split("\n")[:-1]


def input_lines(data: bytes) -> list[bytes]:
    """Lines as a byte stream has them: split on \\n only; a last line without \\n counts."""
    return data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n") if data else []


LINE = st.one_of(
    st.text(max_size=30).map(str.encode),  # any unicode: RTL marks, emoji, separators, NUL, ...
    st.binary(max_size=30),  # invalid UTF-8
    st.sampled_from(
        [b"", b"   ", b"\t \r", b"\x00", "\u2028\u2029\x85".encode(), "\u202eabc \U0001f600".encode()]
    ),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=10).map(" ".join).map(str.encode),
)


@settings(max_examples=30, deadline=None)
@given(lines=st.lists(LINE, max_size=8), final_newline=st.booleans(), chunk=st.integers(1, 5))
def test_n_lines_in_n_lines_out_whatever_the_bytes(trained, lines, final_newline, chunk):
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    expected = input_lines(data)
    translator = make_translator(trained, beam_size=2, max_len_a=0.0, max_len_b=4)  # short: not under test
    out = run_stream(translator, data, chunk_lines=chunk)
    assert len(out) == len(expected)
    assert len("".join(line + "\n" for line in out).splitlines()) == len(expected)  # no hidden line breaks
    for source, target in zip(expected, out, strict=True):
        if not source.strip(b" \t\r"):
            assert target == ""


def test_very_long_line_is_cut_to_max_src_tokens(trained):
    long_line = " ".join(WORDS[i % len(WORDS)] for i in range(1000))
    translator = make_translator(trained, with_attention=True, beam_size=1, max_len_a=0.0, max_len_b=4)
    short, long, empty = translator.translate(["the cat", long_line, ""])
    assert len(long.src_pieces) == translator.cfg.max_src_tokens == 256  # the default
    assert long.hypotheses[0].attention.shape[1] == 256 + 1  # + the source EOS
    assert len(short.hypotheses) == 1 and empty.hypotheses == [] and empty.texts == []


def test_heat_maps_and_matrices_for_each_non_empty_line(trained, tmp_path):
    _, vocab, _ = trained
    lines = ["the cat sat", "", "a big red dog ran to the house on the mat"]
    translator = make_translator(trained, beam_size=3)
    (tmp_path / "att").mkdir()  # an earlier run's, of other input: its line 1 had attention
    for name in ("000001.json", "000001.png", "000007.json", "notes.txt"):
        (tmp_path / "att" / name).write_text("earlier")
    run_stream(translator, "\n".join(lines).encode(), each=attention_files(translator, tmp_path / "att"))
    assert sorted(p.name for p in (tmp_path / "att").iterdir()) == [
        "000000.json",
        "000000.png",
        "000002.json",
        "000002.png",
        "notes.txt",  # not a heat map: kept
    ]
    for index in (0, 2):
        record = json.loads((tmp_path / "att" / f"{index:06d}.json").read_text(encoding="utf-8"))
        weights = np.array(record["attention"])
        assert record["source"] == [*vocab.src_pieces(lines[index]), "</s>"]
        assert record["target"][-1] == "</s>"
        assert weights.shape == (len(record["target"]), len(record["source"]))
        assert np.allclose(weights.sum(axis=1), 1.0, atol=1e-4)
        assert (tmp_path / "att" / f"{index:06d}.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize(
    ("count", "thinned"), [(1, False), (12, False), (100, False), (400, False), (2000, True)]
)
def test_long_sentences_keep_readable_labels(count, thinned):
    inches, font, step = axis_layout(count)
    assert inches <= MAX_INCHES and font >= MIN_FONT
    assert font <= 0.8 * inches * 72 * step / count + 1e-9  # every label shown has room for its font
    assert (step > 1) == thinned


def test_piece_words_maps_each_piece_to_its_whitespace_word():
    assert piece_words(["\u2581new", "ton", "\u2581a", "\u2581", "b", "c"]) == [
        "newton",
        "newton",
        "a",
        "bc",
        "bc",
        "bc",
    ]


@pytest.fixture(scope="module")
def word_vocab(tmp_path_factory):
    """A word-level shortlist (the paper's setting): every word outside it is one <unk>."""
    config = tiny_config(tmp_path_factory.mktemp("word"), vocab={"type": "word", "size": 12})
    write_corpus(config.data_dir)
    return load_trained(make_run_dir(config))[1]


@pytest.mark.parametrize("dictionary", [None, {"zebra": "zèbre", "mat": "tapis"}])
@pytest.mark.parametrize("attended", [0, 1, 4])
def test_unk_is_replaced_by_the_most_attended_source_word(word_vocab, tmp_path, attended, dictionary):
    line = "the zebra sat on mat"
    source_words = line.split()
    assert len(word_vocab.src_pieces(line)) == len(source_words)
    # the scripted model writes "4 <unk> 5" and, while writing <unk>, attends only to source word `attended`
    script = [{4: 0.9}, {UNK_ID: 0.9}, {5: 0.9}, {EOS_ID: 0.9}]
    model = ScriptedModel(script, attend=[0, attended, 0, 0], vocab=word_vocab.tgt_size)
    decode = {"beam_size": 2, "replace_unk": True, "unk_dictionary": ""}
    if dictionary:
        path = tmp_path / "dict.tsv"
        path.write_text("".join(f"{s}\t{t}\n" for s, t in dictionary.items()), encoding="utf-8")
        decode["unk_dictionary"] = str(path)
    translator = Translator(model, word_vocab, dataclasses.replace(DecodeConfig(), **decode), "cpu")
    (result,) = translator.translate([line])
    assert result.hypotheses[0].tokens == [4, UNK_ID, 5]
    word = source_words[attended]
    replacement = (dictionary or {}).get(word, word)
    assert result.texts[0] == f"{word_vocab.decode_tgt([4])} {replacement} {word_vocab.decode_tgt([5])}"


def test_other_search_settings_reuse_the_unknown_word_dictionary_read(word_vocab, tmp_path):
    """A server builds a translator per batch and the API one per n-best call (`with_settings`): the
    dictionary is read once, not per search (a large one took seconds; a moved one failed every request)."""
    script = [{4: 0.9}, {UNK_ID: 0.9}, {5: 0.9}, {EOS_ID: 0.9}]
    model = ScriptedModel(script, attend=[0, 1, 0, 0], vocab=word_vocab.tgt_size)
    path = tmp_path / "dict.tsv"
    path.write_text("zebra\tzèbre\n", encoding="utf-8")
    decode = dataclasses.replace(DecodeConfig(), beam_size=2, replace_unk=True, unk_dictionary=str(path))
    translator = Translator(model, word_vocab, decode, "cpu")
    path.unlink()
    wider = translator.with_settings(dataclasses.replace(decode, beam_size=3))
    assert "zèbre" in wider.translate(["the zebra sat on mat"])[0].texts[0]
    other = dataclasses.replace(decode, unk_dictionary=str(tmp_path / "other.tsv"))
    with pytest.raises(UserError, match="other.tsv"):
        translator.with_settings(other)


@pytest.fixture
def run_with_three_checkpoints(tmp_path) -> Path:
    config = tiny_config(tmp_path)
    write_corpus(config.data_dir)
    return make_run_dir(config, steps=(1, 2, 3))


def cli_app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_average_is_the_mean_of_the_last_k_and_translate_can_use_it(run_with_three_checkpoints):
    run = run_with_three_checkpoints
    out = run / "checkpoints" / "avg.pt"
    result = CliRunner().invoke(cli_app(), ["average", str(run), "--last", "2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    averaged = load_checkpoint(out)["model"]
    two, three = (load_checkpoint(run / "checkpoints" / f"step-{n}.pt")["model"] for n in (2, 3))
    for name, tensor in averaged.items():
        assert torch.allclose(tensor, (two[name] + three[name]) / 2)
    assert [p.name for p in latest_checkpoints(run, 2)] == ["step-2.pt", "step-3.pt"]

    text = "the cat sat\n\na dog\n"
    by_file = CliRunner().invoke(cli_app(), ["translate", "--model", str(out), "--beam", "2"], input=text)
    by_option = CliRunner().invoke(
        cli_app(), ["translate", "--model", str(run), "--average", "2", "--beam", "2"], input=text
    )
    assert by_file.exit_code == by_option.exit_code == 0, by_option.output
    assert by_file.stdout == by_option.stdout
    assert len(by_file.stdout.splitlines()) == 3


@pytest.mark.parametrize("name", ["best.pt", "latest.pt", "step-2.pt"])
def test_average_refuses_to_write_over_a_file_training_manages(run_with_three_checkpoints, name):
    """best.pt is a link to a step-N.pt (an atomic write follows it), latest.pt is the resume point and
    step-N.pt files are training's to replace and prune: writing an average there lost checkpoints."""
    folder = run_with_three_checkpoints / "checkpoints"
    before = snapshot(folder)
    result = run_main("average", str(run_with_three_checkpoints), "--last", "2", "-o", str(folder / name))
    assert_one_line_error(result, f"--output {folder / name}", "average.pt")
    assert snapshot(folder) == before


def test_a_run_whose_checkpoints_folder_links_to_another_disk_loads(run_with_three_checkpoints, tmp_path):
    """checkpoints/ moved to a scratch disk and linked back: the run is the folder above the link."""
    run = run_with_three_checkpoints
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    shutil.move(run / "checkpoints", scratch / "checkpoints")
    (run / "checkpoints").symlink_to(scratch / "checkpoints")
    result = run_main("translate", "--model", str(run), stdin=b"the cat sat\n")
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 1, result.stderr


def test_a_best_pt_whose_checkpoint_is_gone_is_named_not_passed_over(run_with_three_checkpoints):
    """best.pt linking to a removed step-N.pt fell back to latest.pt (other weights) without a word."""
    folder = run_with_three_checkpoints / "checkpoints"
    (folder / "step-3.pt").unlink()
    save_checkpoint(folder / "latest.pt", load_checkpoint(folder / "step-2.pt"))
    result = run_main("translate", "--model", str(run_with_three_checkpoints), stdin=b"the cat sat\n")
    assert_one_line_error(result, f"{folder / 'best.pt'}: links to step-3.pt, which is missing")


def test_checkpoints_of_different_models_are_not_averaged(run_with_three_checkpoints, tmp_path):
    folder = run_with_three_checkpoints / "checkpoints"
    other = load_checkpoint(folder / "step-1.pt")
    other["config"]["model"]["hidden_size"] = 99
    torch.save(other, tmp_path / "other.pt")
    with pytest.raises(UserError, match="different model configuration"):
        average_checkpoints([folder / "step-1.pt", tmp_path / "other.pt"])


def test_nbest_scores_and_file_output(tiny_run_dir, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("the cat sat\n   \non the mat\n", encoding="utf-8")
    out = tmp_path / "out.tsv"
    args = [
        "translate",
        "--model",
        str(tiny_run_dir),
        "-i",
        str(source),
        "-o",
        str(out),
        "--beam",
        "3",
        "--nbest",
        "2",
    ]
    assert CliRunner().invoke(cli_app(), args).exit_code == 0
    rows = [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r[0], r[1]) for r in rows] == [("0", "1"), ("0", "2"), ("1", "1"), ("2", "1"), ("2", "2")]
    assert all(len(r) == 4 for r in rows) and rows[2][2:] == ["0.0000", ""]
    assert float(rows[0][2]) >= float(rows[1][2]) and float(rows[3][2]) >= float(rows[4][2])

    scored = CliRunner().invoke(
        cli_app(), ["translate", "--model", str(tiny_run_dir), "--scores"], input="the cat\n"
    )
    score, text = scored.stdout.rstrip("\n").split("\t")
    assert float(score) < 0 and text


@pytest.mark.slow
def test_stdin_to_stdout_round_trip(tiny_run_dir):
    """A real process, its stdin and stdout pipes: bytes in, one UTF-8 line out per line in."""
    data = b"the cat sat\n\n  \t \nna\xc3\xafve \xff\xfe dog\x00\nthe \xe2\x80\xa8 mat"
    command = [sys.executable, "-m", "seq2seq_attn", "translate", "--model", str(tiny_run_dir), "--beam", "2"]
    done = subprocess.run(command, input=data, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines[:-1]) == 5
    assert lines[1] == lines[2] == "" and all(lines[i] for i in (0, 3, 4))


@pytest.mark.slow
def test_a_named_pipe_as_input_is_read_once_by_the_translation(tiny_run_dir, tmp_path):
    """`-i FIFO` (a shell's `<(...)`): checking the input must not open it, which would take the writer's
    lines or end it by SIGPIPE and leave the translation waiting for a writer for ever."""
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"printf 'the cat sat\\n\\nthe dog\\n' > {fifo}"])
    command = [
        sys.executable,
        "-m",
        "seq2seq_attn",
        "translate",
        "--model",
        str(tiny_run_dir),
        "-i",
        str(fifo),
    ]
    try:
        done = subprocess.run(command, capture_output=True, timeout=120)
    finally:
        writer.kill()
    assert done.returncode == 0, done.stderr.decode()
    assert writer.wait() == 0  # not ended by SIGPIPE
    lines = done.stdout.decode("utf-8").split("\n")
    assert len(lines) == 4 and lines[0] and lines[1] == "" and lines[2]


def test_bf16_precision_keeps_the_line_contract(tiny_run_dir):
    data = b"the cat sat\n\nthe dog ran to the house\n"
    done = run_main("translate", "--model", str(tiny_run_dir), "--precision", "bf16", stdin=data)
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode("utf-8").split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[0] and lines[2]


def test_compile_is_for_beam_search_only(trained, monkeypatch):
    """decode.compile: greedy search gains nothing from it (docs/performance.md), so it never compiles."""
    compiled = record_compiles(monkeypatch)
    assert trained[0].decoder.attention.kind == "bahdanau"
    for beam_size, compile_, compiles in ((2, True, True), (1, True, False), (2, False, False)):
        compiled.clear()
        make_translator(trained, beam_size=beam_size, compile=compile_).translate(["the cat sat"])
        assert bool(compiled) is compiles, (beam_size, compile_)


@pytest.mark.slow
def test_compile_translates_as_the_eager_search_does(tiny_run_dir):
    lines = "the cat sat\non the big red mat\ndog\n"
    runs = [
        ["translate", "--model", str(tiny_run_dir), "--scores", "--beam", "3", flag]
        for flag in ("--compile", "--no-compile")
    ]
    got, want = (CliRunner().invoke(cli_app(), args, input=lines) for args in runs)
    assert got.exit_code == want.exit_code == 0
    got_rows, want_rows = ([row.split("\t") for row in r.stdout.splitlines()] for r in (got, want))
    assert [row[1] for row in got_rows] == [row[1] for row in want_rows] and len(got_rows) == 3
    assert [float(row[0]) for row in got_rows] == pytest.approx(
        [float(row[0]) for row in want_rows], abs=2e-4
    )


@pytest.mark.parametrize("stopping", ["bound", "top"])
def test_stopping_option_reaches_the_search(tiny_run_dir, monkeypatch, stopping):
    seen = []
    search = seq2seq_attn.decoding.search.beam_search

    def recording(model, src, lengths, cfg, with_attention=False):
        seen.append(cfg.stopping)
        return search(model, src, lengths, cfg, with_attention)

    monkeypatch.setattr(seq2seq_attn.decoding.search, "beam_search", recording)
    args = ["translate", "--model", str(tiny_run_dir), "--beam", "3", "--stopping", stopping]
    done = CliRunner().invoke(cli_app(), args, input="the cat sat\non the mat\n")
    assert done.exit_code == 0 and len(done.stdout.splitlines()) == 2
    assert seen and set(seen) == {stopping}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--precision", "fp16"], "'fp16' is not one of 'auto', 'fp32', 'tf32', 'bf16'"),
        (["--stopping", "early"], "'early' is not one of 'bound', 'top'"),
        (["--beam", "0"], "--beam: `decode.beam_size` must be a number >= 1, got 0"),
        (
            ["--beam", "2", "--nbest", "3"],
            "--beam, --nbest: `decode.nbest` = 3 exceeds `decode.beam_size` = 2",
        ),
        (["-o", "/nonexistent-dir/out.txt"], "does not exist"),
    ],
)
def test_impossible_options_are_one_line_errors(tiny_run_dir, args, message):
    done = run_main("translate", "--model", str(tiny_run_dir), *args, stdin=b"the cat\n")
    stderr = done.stderr.decode()
    assert done.returncode == 2
    assert stderr.count("\n") == 1 and stderr.startswith("seq2seq: error:") and message in stderr
    assert done.stdout == b""
