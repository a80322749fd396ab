"""The experiment config: strict validation, helpful messages, overrides, round trip, generated docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from seq2seq_attn.cli import app
from seq2seq_attn.config import (
    Config,
    DecodeConfig,
    EvalConfig,
    from_dict,
    load_config,
    override,
    to_dict,
    to_yaml,
)
from seq2seq_attn.config.reference import config_markdown
from seq2seq_attn.errors import UserError, setting

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def error_of(raw: dict) -> str:
    with pytest.raises(UserError) as info:
        from_dict(raw, where="exp.yaml")
    return str(info.value)


def test_defaults_fill_every_section():
    config = from_dict({})
    assert config.train.optimizer == "adam"
    assert config.model.attention == "bahdanau"
    assert config.eval.buckets == [0, 10, 20, 30, 40, 50, 60]
    assert config.data_dir == Path("data/experiment")
    assert config.run_dir == Path("runs/experiment")


@pytest.mark.parametrize(
    ("raw", "key", "suggestion"),
    [
        ({"train": {"lerning_rate": 1e-3}}, "train.lerning_rate", "train.learning_rate"),
        ({"learning_rate": 1e-3}, "learning_rate", "train.learning_rate"),  # right key, wrong section
        ({"model": {"atention": "dot"}}, "model.atention", "model.attention"),
        ({"vocab": {"sise": 100}}, "vocab.sise", "vocab.size"),
        ({"data": {"local": {"train": {"scr": "a.txt"}}}}, "data.local.train.scr", "data.local.train.src"),
    ],
)
def test_unknown_key_names_path_and_suggests(raw, key, suggestion):
    message = error_of(raw)
    assert f"unknown key `{key}`" in message
    assert f"did you mean `{suggestion}`?" in message
    assert message.startswith("exp.yaml:")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"train": {"batch_size": "big"}}, "`train.batch_size` must be an integer, got 'big'"),
        ({"train": {"batch_size": 0}}, "`train.batch_size` must be a number >= 1, got 0"),
        ({"train": {"batch_size": 2.5}}, "`train.batch_size` must be an integer"),
        ({"model": {"bidirectional": "yes"}}, "`model.bidirectional` must be true or false"),
        ({"model": {"attention": "luong"}}, "`model.attention` must be one of 'none', 'bahdanau'"),
        ({"model": {"dropout_hidden": 1.0}}, "`model.dropout_hidden` must be a number >= 0 and < 1, got 1.0"),
        ({"train": {"learning_rate": -1}}, "`train.learning_rate` must be a number > 0"),
        ({"eval": {"buckets": 10}}, "`eval.buckets` must be a list of int"),
        ({"eval": {"buckets": [0, "x"]}}, "`eval.buckets` must be an integer"),
        ({"train": {"adam_betas": [0.9]}}, "`train.adam_betas` must be a list of 2 numbers"),
        ({"data": {"clean": {"splits": ["dev"]}}}, "`data.clean.splits` must be a list drawn from"),
        ({"train": 5}, "train: expected a mapping of keys, got int"),
    ],
)
def test_wrong_type_or_range_names_key_and_expectation(raw, fragment):
    message = error_of(raw)
    assert fragment in message
    assert "\n" not in message


def test_numbers_written_without_dot_are_accepted_for_floats():
    # YAML 1.1 reads `3e-4` as a string; a float key must still accept it.
    assert from_dict({"train": {"learning_rate": "3e-4"}}).train.learning_rate == pytest.approx(3e-4)
    assert from_dict({"train": {"learning_rate": 1}}).train.learning_rate == 1.0


def test_overrides_are_typed_like_yaml(tmp_path):
    path = write(tmp_path, "name: base\ntrain: {learning_rate: 0.001}\n")
    config = load_config(
        path,
        [
            "train.learning_rate=3e-4",
            "train.max_steps=20",
            "model.bidirectional=false",
            "eval.buckets=[0, 5, 10]",
            "name=other",
        ],
    )
    assert config.train.learning_rate == pytest.approx(3e-4)
    assert config.train.max_steps == 20
    assert config.model.bidirectional is False
    assert config.eval.buckets == [0, 5, 10]
    assert config.name == "other"


def test_an_unquoted_on_or_off_is_read_as_the_choice_of_that_name(tmp_path):
    """YAML 1.1 reads an unquoted on / off as true / false; a key whose choices are on and off takes them."""
    path = write(tmp_path, "name: t\ntrain: {cuda_graphs: off}\n")
    assert load_config(path, []).train.cuda_graphs == "off"
    config = load_config(path, ["train.cuda_graphs=on", "decode.cuda_graphs=off"])
    assert (config.train.cuda_graphs, config.decode.cuda_graphs) == ("on", "off")
    with pytest.raises(UserError, match="`model.attention` must be one of 'none', .*, got 'off'"):
        load_config(path, ["model.attention=off"])  # no on / off among its choices: the text as written


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("train.lerning_rate=1", "did you mean `train.learning_rate`?"),
        ("train.batch_size=abc", "`train.batch_size` must be an integer"),
        ("no_equals_sign", "expected KEY=VALUE"),
        ("train.optimizer.x=1", "`train.optimizer` must be a string, got {'x': 1}"),
        ("model=", "model: a section; set its keys (model.KEY=VALUE)"),
        ("train.learning_rate=.inf", "`train.learning_rate` must be a finite number, got inf"),
        ("decode.max_len_a=1e400", "`decode.max_len_a` must be a finite number"),
        ("seed=-1", "`seed` must be a number >= 0 and <= 4294967295, got -1"),
        ("train.adam_betas=[1.5,0.9]", "`train.adam_betas` must be a number >= 0 and < 1, got [1.5, 0.9]"),
        ("decode.beam_size=99999999999999999999", "`decode.beam_size` must be an integer of a 64-bit size"),
        ("name=", "`name` must not be empty"),
        ("eval.buckets=[0,10,5]", "bucket edges [0, 10, 5]: expected strictly increasing word counts"),
    ],
)
def test_bad_override_is_a_clear_error(tmp_path, override, fragment):
    """Named as the override's, not the file's: the file holds no such key or value."""
    path = write(tmp_path, "name: t\n")
    with pytest.raises(UserError, match=re.escape(fragment)) as refused:
        load_config(path, ["train.max_steps=3", override], "--set")
    assert str(path) not in str(refused.value) and "--set" in str(refused.value)


def test_a_key_given_twice_is_an_error_naming_its_line(tmp_path):
    """Plain YAML keeps the last of two `train:` sections and drops the first one's settings."""
    path = write(tmp_path, "name: t\ntrain:\n  max_steps: 7\nmodel:\n  cell: lstm\ntrain:\n  batch_size: 8\n")
    with pytest.raises(UserError, match=r"exp.yaml:6: invalid YAML: duplicate key `train`"):
        load_config(path)


def test_a_list_as_a_key_is_an_error_naming_its_line(tmp_path):
    path = write(tmp_path, "name: t\ntrain:\n  [1]: 2\n")
    with pytest.raises(UserError, match=r"exp.yaml:3: invalid YAML: a list as a key"):
        load_config(path)


def test_text_keys_keep_the_text_as_written(tmp_path):
    """YAML reads 007 as 7 and 1.10 as 1.1: a text key set on the command line takes its text; in a file,
    an unquoted number for a text key is an error asking for quotes."""
    path = write(tmp_path, "name: t\n")
    config = load_config(path, ["name=007", "data.huggingface.revision=1.10", "data.src_lang='0123'"])
    assert (config.name, config.data.huggingface.revision, config.data.src_lang) == ("007", "1.10", "0123")
    with pytest.raises(UserError, match=r"`name` must be a string \(quoted"):
        load_config(write(tmp_path, "name: 007\n"))


def test_a_section_written_empty_takes_its_defaults_and_overrides(tmp_path):
    path = write(tmp_path, "name: t\nmodel:\n")
    assert load_config(path, ["model.cell=lstm"]).model.cell == "lstm"
    for empty in ("0", "false", "[]", "''"):
        with pytest.raises(UserError, match="model: expected a mapping of keys"):
            load_config(write(tmp_path, f"name: t\nmodel: {empty}\n"))


def test_a_value_the_caller_gives_is_named_where_the_caller_sets_it():
    """`override` names each changed key with `errors.setting`: read as the key itself, and by the option
    that set it where the command line renders the message."""
    with pytest.raises(UserError) as info:
        override(DecodeConfig(), {"beam_size": 2, "nbest": 3, "alpha": None}, "decode.")
    assert str(info.value).startswith("decode.beam_size, decode.nbest: `decode.nbest` = 3 exceeds")
    options = {"decode.beam_size": "--beam", "decode.nbest": "--nbest"}
    assert info.value.naming(options.__getitem__).startswith("--beam, --nbest: `decode.nbest` = 3 exceeds")
    with pytest.raises(UserError) as info:
        override(EvalConfig(), {"bootstrap": -1}, "eval.")
    assert str(info.value) == "eval.bootstrap: `eval.bootstrap` must be a number >= 0, got -1"
    assert info.value.naming(lambda key: "--set " + key).startswith("--set eval.bootstrap: `eval.bootstrap`")
    assert str(UserError(f"no {setting('eval.seed')} here")) == "no eval.seed here"


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = write(tmp_path, "train:\n  learning_rate: 1\n  batch_size: [1, 2\n")
    with pytest.raises(UserError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}:")
    assert "invalid YAML" in str(info.value)


def test_missing_and_non_mapping_configs(tmp_path):
    with pytest.raises(UserError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(UserError, match="must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_paths_resolve_relative_to_config_file(tmp_path):
    sub = tmp_path / "configs"
    sub.mkdir()
    path = sub / "exp.yaml"
    path.write_text(
        "data:\n  dir: ../data/x\n  local:\n    train: {src: /abs/train.en, tgt: corpus/train.fr}\n"
    )
    config = load_config(path)
    assert config.data.dir == str((tmp_path / "data" / "x").resolve())
    assert config.data.local.train.src == "/abs/train.en"
    assert config.data.local.train.tgt == str((sub / "corpus" / "train.fr").resolve())
    assert config.data.local.valid.src == ""  # empty stays empty


def test_the_default_data_and_run_folders_are_named_where_the_config_was_loaded(tmp_path, monkeypatch):
    """'' means data/<name> and runs/<name> under the working directory: once loaded, the path itself, so
    that a run's config.yaml and checkpoints name its data wherever a later command runs."""
    monkeypatch.chdir(tmp_path)
    config = load_config(write(tmp_path, "name: here\n"))
    assert config.data.dir == str(tmp_path.resolve() / "data" / "here")
    assert config.train.run_dir == str(tmp_path.resolve() / "runs" / "here")


def test_resolved_config_round_trips(tmp_path):
    original = load_config(write(tmp_path, "name: rt\nmodel: {attention: dot, decoder: luong}\n"))
    dumped = to_yaml(original)
    again = from_dict(yaml.safe_load(dumped))
    assert to_dict(again) == to_dict(original)
    assert isinstance(again, Config)


def test_train_dry_run_prints_what_config_prints(tmp_path):
    """`train --dry-run` prints the resolved config exactly as `seq2seq config` does, and trains nothing."""
    path = write(tmp_path, "name: dry\ntrain: {run_dir: run}\n")
    outputs = [
        CliRunner().invoke(app, [*verb, str(path), "--set", "train.max_steps=7"])
        for verb in (["config"], ["train", "--dry-run"])
    ]
    assert [result.exit_code for result in outputs] == [0, 0]
    assert outputs[0].stdout == outputs[1].stdout
    assert yaml.safe_load(outputs[1].stdout)["train"]["max_steps"] == 7
    assert not (tmp_path / "run").exists()


def test_docs_config_md_is_generated_from_schema():
    committed = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    assert committed == config_markdown(), (
        "regenerate: seq2seq config --keys --format markdown > docs/config.md"
    )


def test_every_key_is_documented():
    text = config_markdown()
    for row in text.splitlines():
        if row.startswith("| `"):
            assert not row.rstrip().endswith("|  |"), row


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_validate(path):
    load_config(path)


@pytest.mark.parametrize("attention", ["none", "bahdanau", "concat", "general", "dot"])
def test_attends_is_every_attention_but_none(attention):
    config = from_dict({"model": {"attention": attention}})
    assert config.model.attends is (attention != "none")
