"""The product's surfaces: every command's options and the Python API's names stay as documented, every
command's `--help` reads whole at 80 columns, and a decode key added to the schema alone becomes a
`translate` option."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
import textwrap

import pytest
import typer
from helpers import ROOT
from typer.testing import CliRunner

import seq2seq_attn
from seq2seq_attn.cli import app, evaluate, translate
from seq2seq_attn.cli.options import EVAL_FLAGS, config_options
from seq2seq_attn.config import DecodeConfig, EvalConfig
from seq2seq_attn.errors import UserError, setting

EXPECTED_OPTIONS = {
    "align": [
        "--buckets",
        "--by-length",
        "--device",
        "--gold",
        "--gold-format",
        "--heatmaps",
        "--json",
        "--method",
        "--model -m",
        "--one-indexed",
        "--ref",
        "--sentences",
        "--src",
        "--threshold",
    ],
    "average": ["--last", "--output -o", "<paths>"],
    "config": ["--format", "--keys", "--set", "<config>"],
    "data long-inputs": ["--max-words", "--output -o", "--ref", "--seed", "--sentences", "--src"],
    "data prepare": ["--force", "--set", "<config>"],
    "eval": [
        "--alignment",
        "--baseline",
        "--bootstrap",
        "--bucket-by",
        "--buckets",
        "--by-length",
        "--ensemble",
        "--format",
        "--html",
        "--hyp",
        "--label",
        "--lowercase",
        "--min-bucket-size",
        "--model",
        "--moses-bleu",
        "--output -o",
        "--plot",
        "--ref",
        "--seed",
        "--set",
        "--significance",
        "--src",
        "--task-lang",
        "--task-ref",
        "--words",
        "--words-lang",
    ],
    "export": ["--average", "--force", "--output -o", "--plot", "--push", "--report", "<run>"],
    "lexical-shortlist": ["--device", "--frequent", "--sentences", "--top-k", "<run>"],
    "model-info": ["--set", "--src-vocab", "--tgt-vocab", "<config>"],
    "plot curve": ["--output -o", "<reports>"],
    "plot training": ["--output -o", "<run_dir>"],
    "score": [
        "--alpha",
        "--best",
        "--device",
        "--format",
        "--length-penalty",
        "--model -m",
        "--nbest",
        "--output -o",
        "--pieces",
        "--report",
        "--src",
        "--tgt",
        "--weights",
    ],
    "serve": [
        "--allow-unk --no-unk",
        "--allowed-host",
        "--alpha",
        "--answer-timeout",
        "--at-max-len",
        "--batch-sentences",
        "--batch-tokens",
        "--beam",
        "--body-timeout",
        "--compile --no-compile",
        "--conf",
        "--coverage-penalty",
        "--cuda-graphs",
        "--device",
        "--dictionary",
        "--full-vocabulary --lexical-shortlist",
        "--grace",
        "--header-timeout",
        "--host",
        "--id",
        "--keep-alive",
        "--length-penalty",
        "--max-attention-chars",
        "--max-batch",
        "--max-batch-chars",
        "--max-body-bytes",
        "--max-chars",
        "--max-connections",
        "--max-len-a",
        "--max-len-b",
        "--max-nbest",
        "--max-request-chars",
        "--max-sentences",
        "--max-src-tokens",
        "--max-wait-ms",
        "--min-len",
        "--min-len-a",
        "--mix-int8",
        "--model -m",
        "--nbest",
        "--no-repeat-ngram",
        "--no-replace-unk --replace-unk",
        "--port",
        "--precision",
        "--stopping",
        "--threads",
        "--url-root",
    ],
    "train": ["--dry-run", "--resume", "--set", "<config>"],
    "translate": [
        "--allow-unk --no-unk",
        "--alpha",
        "--at-max-len",
        "--attention",
        "--average",
        "--batch-sentences",
        "--batch-tokens",
        "--beam",
        "--compile --no-compile",
        "--coverage-penalty",
        "--cuda-graphs",
        "--device",
        "--dictionary",
        "--full-vocabulary --lexical-shortlist",
        "--input -i",
        "--length-penalty",
        "--max-len-a",
        "--max-len-b",
        "--max-src-tokens",
        "--min-len",
        "--min-len-a",
        "--model -m",
        "--nbest",
        "--no-repeat-ngram",
        "--no-replace-unk --replace-unk",
        "--output -o",
        "--precision",
        "--scores",
        "--stopping",
    ],
    "vocab": ["--force", "--set", "<config>"],
}
API = ["Attention", "Candidate", "Found", "Model", "Score", "UserError", "__version__", "load"]


def options_of(command) -> dict[str, list[str]]:
    """verb (subcommands joined by a space) -> its sorted options (aliases joined) and <arguments>."""
    if hasattr(command, "commands"):
        found = {}
        for name, sub in command.commands.items():
            found |= {f"{name} {verb}".strip(): options for verb, options in options_of(sub).items()}
        return found
    return {
        "": sorted(
            " ".join(sorted(p.opts + p.secondary_opts)) if p.param_type_name == "option" else f"<{p.name}>"
            for p in command.params
            if "--help" not in p.opts
        )
    }


def test_every_command_keeps_its_options():
    assert options_of(typer.main.get_command(app)) == EXPECTED_OPTIONS


def test_the_python_api_keeps_its_names_and_signatures():
    assert sorted(seq2seq_attn.__all__) == API
    assert all(getattr(seq2seq_attn, name) is not None for name in API)
    load = inspect.signature(seq2seq_attn.load)
    assert list(load.parameters) == ["model", "device", "threads", "decode"]
    model_methods = {
        "attention",
        "decode",
        "nbest",
        "perplexity",
        "score",
        "search",
        "translate",
        "translate_one",
    }
    assert model_methods <= set(dir(seq2seq_attn.Model))


def test_a_decode_key_added_to_the_schema_alone_is_a_translate_option():
    # a new key on the schema's DecodeConfig, before the command line is built: nothing else changes
    code = textwrap.dedent(
        """
        import dataclasses
        import seq2seq_attn.config as config
        from seq2seq_attn.config import schema

        key = ("throwaway_weight", float, schema.option(0.5, "A long text.", short="A throwaway key.", ge=0))
        extended = dataclasses.make_dataclass("DecodeConfig", [key], bases=(schema.DecodeConfig,))
        schema.DecodeConfig = config.DecodeConfig = extended

        from seq2seq_attn.cli import main, options, translate
        print(options.option_names(extended, "decode", translate.DECODE_FLAGS)["decode.throwaway_weight"])
        main()
        """
    )
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-c", code, "translate", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("--throwaway-weight\n")
    line = next(line for line in result.stdout.splitlines()[1:] if "--throwaway-weight" in line)
    assert "<float>" in line and "A throwaway key (throwaway_weight)." in line


def test_an_error_names_each_key_it_is_about_by_the_option_of_the_command_that_sets_it():
    """A key the caller sets (`errors.setting`) reads as the option of the running command that sets it:
    `--threshold` in `align`, `--buckets` in both `eval` and `align`, and in `eval` `--set decode.KEY` for
    a key of its runs' search; a key no option sets stays itself."""
    message = " ".join(setting(key) for key in ("eval.align_threshold", "eval.buckets", "decode.beam_size"))

    def failing(overrides: dict) -> None:
        raise UserError(message)

    def raised(decorator) -> str:
        command = decorator(failing)
        with pytest.raises(UserError) as info:
            command(**{name: None for name in inspect.signature(command).parameters})
        return str(info.value)

    def eval_keys(**kwargs):
        return config_options(EvalConfig, "eval", EVAL_FLAGS, panel="", from_runs=True, **kwargs)

    assert raised(eval_keys(keys=evaluate.EVAL_KEYS, set_section="decode")) == (
        "eval.align_threshold --buckets --set decode.beam_size"
    )
    assert raised(eval_keys(keys=("buckets", "align_threshold"))) == "--threshold --buckets decode.beam_size"
    assert raised(config_options(DecodeConfig, "decode", translate.DECODE_FLAGS, panel="")) == (
        "eval.align_threshold eval.buckets --beam"
    )
    assert str(UserError(message)) == "eval.align_threshold eval.buckets decode.beam_size"


def test_no_command_line_function_is_longer_than_40_lines():
    """The command line parses, calls and prints: each function's body (its docstring aside) is short, the
    work lives in the layers below."""
    for path in sorted((ROOT / "seq2seq_attn" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                first = node.body[1] if ast.get_docstring(node) and len(node.body) > 1 else node.body[0]
                assert node.end_lineno - first.lineno + 1 <= 40, f"{path.name}: {node.name}"


def commands(command, path: tuple[str, ...] = ()):
    """(path, click command) of every command and group, the app first."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from commands(sub, (*path, name))


def test_every_help_reads_whole_at_80_columns():
    """No option name or word is cut ("…") in any command's `--help` on an 80-column terminal, and every
    option's names are shown. In process: the text is the same as `python -m seq2seq_attn ... --help`
    prints (rich reads the width from COLUMNS either way)."""
    runner = CliRunner()
    for path, command in commands(typer.main.get_command(app)):
        result = runner.invoke(
            app, [*path, "--help"], env={"COLUMNS": "80", "TERM": "dumb"}, prog_name="python -m seq2seq_attn"
        )
        assert result.exit_code == 0, result.output
        shown = " ".join(path) or "seq2seq"
        assert "…" not in result.stdout, f"`{shown} --help` cuts: {result.stdout}"
        assert max(len(line) for line in result.stdout.splitlines()) <= 80, shown
        for param in command.params:
            for name in [*param.opts, *param.secondary_opts]:
                if name.startswith("-"):
                    assert name in result.stdout, (shown, name)


@pytest.mark.slow
def test_a_reader_that_goes_away_is_no_error():
    """`seq2seq config --keys | head -1`: output cut short by its reader exits 0, silently (typer catches
    the closed pipe itself and exits 1 unless told otherwise)."""
    command = [sys.executable, "-m", "seq2seq_attn", "config", "--keys"]
    for _ in range(3):  # where the pipe closes varies: one of the runs meets it mid-output
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        process.stdout.readline()
        process.stdout.close()
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0 and stderr == b"", stderr
