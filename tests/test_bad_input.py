"""The bad-input matrix: every way a user can hold the tool wrong, through the command line's entry point.

Each case builds its own bad input under tmp_path and runs `seq2seq --quiet ...` (seq2seq_attn.cli.main,
in this process: `run_main`). The contract, the same for every case: exit code 2; stderr is exactly one
line starting with `seq2seq: error: ` that names the file, line, config key or option at fault; no
traceback; nothing on stdout; and no file under tmp_path created, changed or removed, so no output is left
half-written and no earlier output is overwritten. Usage errors found by the option parser (a value that is
not a number, an unknown option) follow the same contract. A few cases, one per kind of error, also run as
`python -m seq2seq_attn` in a process of its own, which must give the same line.
"""

from __future__ import annotations

import gzip
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import assert_one_line_error, run_main, seq2seq, snapshot, tiny_config, write_corpus

from seq2seq_attn.vocab.pieces import build_vocab

Fixture = Callable[[str], Any]  # request.getfixturevalue: builders ask only for what they need


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


# ----------------------------------------------------------------------------------------------------------
# fixtures: a vocabulary other than the tiny run's (conftest.py: the trained run to resume from)


@pytest.fixture(scope="module")
def other_vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = tiny_config(tmp_path_factory.mktemp("other"), vocab={"size": 30})
    write_corpus(config.data_dir, seed=1)
    return build_vocab(config).directory


# ----------------------------------------------------------------------------------------------------------
# builders: each writes one bad input under `tmp` and returns the command line that must reject it

LOCAL = """
data:
  source: local
  dir: out
  local:
    train: {src: train.en, tgt: train.fr}
    valid: {src: dev.en, tgt: dev.fr}
    test: {src: dev.en, tgt: dev.fr}
"""


def config(tmp: Path, text: str, *options: str, command: str = "train") -> list[str]:
    return [command, str(write(tmp / "exp.yaml", text)), *options]


def local_corpus(tmp: Path, train_en: str | bytes, train_fr: str | bytes) -> list[str]:
    write(tmp / "train.en", train_en)
    write(tmp / "train.fr", train_fr)
    write(tmp / "dev.en", "a cat\n")
    write(tmp / "dev.fr", "un chat\n")
    return ["data", "prepare", str(write(tmp / "exp.yaml", LOCAL))]


def vocab(tmp: Path, *options: str, corpus: bool = True) -> list[str]:
    if corpus:
        write_corpus(tmp / "data")
    return ["vocab", str(write(tmp / "exp.yaml", "data: {dir: data}\n")), *options]


def train(tmp: Path, get: Fixture, *options: str, checkpoint: bytes | None = None) -> list[str]:
    """Train the prepared tiny config into tmp/run: new, or a trained run whose latest.pt is `checkpoint`."""
    run = tmp / "run"
    if checkpoint is not None:
        shutil.copytree(get("trained_run"), run, symlinks=True)
        write(run / "checkpoints" / "latest.pt", checkpoint)
    return ["train", str(get("prepared") / "tiny.yaml"), "--set", f"train.run_dir={run}", *options]


def trained_latest(get: Fixture) -> bytes:
    return (get("trained_run") / "checkpoints" / "latest.pt").read_bytes()


def run_copy(tmp: Path, get: Fixture) -> Path:
    run = tmp / "run"
    shutil.copytree(get("tiny_run_dir"), run, symlinks=True)
    return run


def best_file(run: Path) -> Path:
    return (run / "checkpoints" / "best.pt").resolve()


def replace_best(tmp: Path, get: Fixture, edit: Callable[[dict, bytes], Any]) -> Path:
    """A copy of the tiny run whose best checkpoint is replaced by edit(payload, file bytes)."""
    run = run_copy(tmp, get)
    best = best_file(run)
    new = edit(torch.load(best, weights_only=True), best.read_bytes())
    if isinstance(new, bytes):
        best.write_bytes(new)
    else:
        torch.save(new, best)
    return run


def replace_file(tmp: Path, get: Fixture, name: str, content: bytes) -> Path:
    """A copy of the tiny run whose file `name` holds `content`."""
    run = run_copy(tmp, get)
    (run / name).write_bytes(content)
    return run


def other_hidden_size(payload: dict, _: bytes) -> dict:
    payload["config"]["model"]["hidden_size"] = 32
    return payload


def diverged(payload: dict, _: bytes) -> dict:
    """The weights of a run that diverged: one value of the third tensor NaN."""
    name = list(payload["model"])[2]
    payload["model"][name].view(-1)[0] = float("nan")
    return payload


def swap_vocab(tmp: Path, get: Fixture) -> Path:
    run = run_copy(tmp, get)
    shutil.rmtree(run / "vocab")
    shutil.copytree(get("other_vocab"), run / "vocab")
    return run


def translate(
    tmp: Path, model: Path, *options: str, source: Path | None = None, output: Path | None = None
) -> list[str]:
    """Translate `source` (default: tmp/in.txt) into `output` (default: tmp/out.txt, an earlier output)."""
    source = source or write(tmp / "in.txt", "the cat sat\n")
    output = output or write(tmp / "out.txt", "an earlier translation\n")
    return ["translate", "--model", str(model), "-i", str(source), "-o", str(output), *options]


def evaluate(
    tmp: Path,
    *options: str,
    hyp: str | bytes = "a b\nc d\n",
    ref: Path | None = None,
    output: Path | None = None,
) -> list[str]:
    """Score tmp/hyp.txt against `ref` (default: tmp/ref.txt) into `output` (default: tmp/report.json, an
    earlier report)."""
    hyp_file = write(tmp / "hyp.txt", hyp)
    ref = ref or write(tmp / "ref.txt", "a b\nc d\n")
    output = output or write(tmp / "report.json", "{}\n")
    return ["eval", "--hyp", str(hyp_file), "--ref", str(ref), "-o", str(output), *options]


def by_length(tmp: Path, *options: str) -> tuple[str, ...]:
    return ("--by-length", "--src", str(write(tmp / "src.txt", "a b\nc d\n")), *options)


def folder(path: Path, mode: int = 0o755) -> Path:
    path.mkdir()
    path.chmod(mode)
    return path


def case(name: str, build: Callable[[Path, Fixture], list[str]], *fragments: str, marks: Any = ()) -> Any:
    """One row of the matrix: `build(tmp_path, getfixturevalue)` makes the input, stderr names `fragments`."""
    return pytest.param(build, fragments, id=name, marks=marks)


AS_ROOT = pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any folder")

CASES = [
    # -- the config file and --set ------------------------------------------------------------------------
    case("yaml-malformed", lambda t, g: config(t, "train:\n  batch_size: [\n"), "exp.yaml:3: invalid YAML"),
    case(
        "keys-format-unknown",
        lambda t, g: ["config", "--keys", "--format", "json"],
        "Invalid value for '--format'",
        "'json' is not one of 'text', 'markdown'",
    ),
    case(
        "long-inputs-max-words-negative",
        lambda t, g: ["data", "long-inputs", "--src", "s", "--ref", "r", "-o", "out", "--max-words", "-5"],
        "Invalid value for '--max-words'",
    ),
    case(
        "key-misspelt",
        lambda t, g: config(t, "train:\n  learnig_rate: 0.1\n"),
        "exp.yaml: unknown key `train.learnig_rate` (did you mean `train.learning_rate`?)",
    ),
    case(
        "type-wrong",
        lambda t, g: config(t, "train:\n  batch_size: many\n"),
        "exp.yaml: `train.batch_size` must be an integer, got 'many'",
    ),
    case(
        "size-zero",
        lambda t, g: config(t, "model:\n  hidden_size: 0\n"),
        "`model.hidden_size` must be a number >= 1, got 0",
    ),
    case(
        "size-negative",
        lambda t, g: config(t, "train:\n  max_len: -5\n"),
        "`train.max_len` must be a number >= 1, got -5",
    ),
    case("config-missing", lambda t, g: ["train", str(t / "nope.yaml")], "nope.yaml: config file not found"),
    case(
        "set-without-equals",
        lambda t, g: config(t, "name: x\n", "--set", "train.max_steps"),
        "--set 'train.max_steps': expected KEY=VALUE",
    ),
    case(
        "set-unknown-key",
        lambda t, g: config(t, "name: x\n", "--set", "train.max_stpes=3"),
        "unknown key `train.max_stpes` (did you mean `train.max_steps`?)",
    ),
    case(
        "set-bad-choice",
        lambda t, g: config(t, "name: x\n", "--set", "model.cell=rnn", command="config"),
        "`model.cell` must be one of 'gru', 'lstm', got 'rnn'",
    ),
    # -- the corpus -----------------------------------------------------------------------------------------
    case(
        "corpus-missing",
        lambda t, g: local_corpus(t, "a\n", "b\n") + ["--set", "data.local.train.tgt=gone.fr"],
        "`data.local.train.tgt`:",
        "gone.fr: file not found",
    ),
    case(
        "corpus-line-counts",
        lambda t, g: local_corpus(t, "a\nb\nc\n", "x\ny\n"),
        "train.en has 3 lines",
        "train.fr has 2 lines",
    ),
    case(
        "corpus-invalid-utf8",
        lambda t, g: local_corpus(t, "a\nb\n", b"x\nbonne journ\xe9e\n"),
        "train.fr:2: invalid UTF-8",
    ),
    case(
        "corpus-empty-after-cleaning",
        lambda t, g: local_corpus(t, "\na b c d e\n", "x\ny\n"),
        "train split: all 2 pairs of",
        "dropped by cleaning (drop_empty 1, max_words 0, max_ratio 1)",
    ),
    # -- the vocabulary -------------------------------------------------------------------------------------
    case(
        "vocab-size-too-large",
        lambda t, g: vocab(t, "--set", "vocab.size=5000"),
        "vocab.size=5000 is too large",
        "set vocab.size <=",
    ),
    case(
        "vocab-data-missing",
        lambda t, g: vocab(t, corpus=False),
        "train.src: prepared data not found; run `seq2seq data prepare CONFIG` first",
    ),
    # -- training and resuming ------------------------------------------------------------------------------
    case(
        "resume-without-checkpoint",
        lambda t, g: train(t, g, "--resume"),
        "cannot resume: the run has no checkpoint",
        "latest.pt",
    ),
    case(
        "resume-corrupt-checkpoint",
        lambda t, g: train(t, g, checkpoint=os.urandom(4096)),
        "latest.pt: corrupt or truncated checkpoint",
    ),
    case(
        "resume-other-model",
        lambda t, g: train(t, g, "--set", "model.hidden_size=32", checkpoint=trained_latest(g)),
        "latest.pt: cannot resume: config changed: model.hidden_size was 24, now 32",
    ),
    # -- checkpoints given to translate ---------------------------------------------------------------------
    case("run-missing", lambda t, g: translate(t, t / "nope"), "nope: no such run directory or checkpoint"),
    case(
        "run-without-checkpoint",
        lambda t, g: translate(t, folder(t / "empty")),
        "empty: run directory has no checkpoint",
    ),
    case(
        "checkpoint-truncated",
        lambda t, g: translate(t, replace_best(t, g, lambda p, raw: raw[: len(raw) // 2])),
        "best.pt: corrupt or truncated checkpoint",
    ),
    case(
        "checkpoint-random-bytes",
        lambda t, g: translate(t, replace_best(t, g, lambda p, raw: os.urandom(len(raw)))),
        "best.pt: corrupt or truncated checkpoint (not a torch zip archive)",
    ),
    case(
        "checkpoint-other-model",
        lambda t, g: translate(t, replace_best(t, g, other_hidden_size)),
        "best.pt: checkpoint does not fit the model described by its config",
        "size mismatch",
    ),
    case(
        "checkpoint-nan-weights",
        lambda t, g: translate(t, replace_best(t, g, diverged)),
        "best.pt: the weights hold NaN or infinite values (",
        "take an earlier checkpoint",
    ),
    case(
        "checkpoint-without-config",
        lambda t, g: translate(t, replace_best(t, g, lambda p, raw: {"model": p["model"]})),
        "best.pt: not a seq2seq-attn checkpoint (no config inside)",
    ),
    case(
        "checkpoint-other-vocabulary",
        lambda t, g: translate(t, swap_vocab(t, g)),
        "best.pt: checkpoint was trained with a different vocabulary than",
        "vocab",
    ),
    case(
        "vocabulary-model-unreadable",
        lambda t, g: translate(t, replace_file(t, g, "vocab/src.model", b"not a model")),
        "vocab/src.model: not a readable sentencepiece model",
    ),
    case(
        "vocabulary-manifest-empty",
        lambda t, g: translate(t, replace_file(t, g, "vocab/manifest.json", b"{}")),
        "vocab/manifest.json: not a vocabulary manifest (no `config`)",
    ),
    case(
        "model-folder-without-weights",
        lambda t, g: translate(t, write(folder(t / "exported") / "config.json", "{}").parent),
        "exported: an exported model folder without its model.safetensors",
    ),
    # -- translate options and files ------------------------------------------------------------------------
    case(
        "translate-input-missing",
        lambda t, g: translate(t, g("tiny_run_dir"), source=t / "gone.txt"),
        "gone.txt: file not found",
    ),
    case(
        "translate-input-gz-cut-short",
        lambda t, g: translate(
            t, g("tiny_run_dir"), source=write(t / "in.gz", gzip.compress(b"a b\n" * 50)[:-8])
        ),
        "in.gz: cannot read (",
    ),
    case(
        "translate-input-gz-not-gzip",
        lambda t, g: translate(t, g("tiny_run_dir"), source=write(t / "in.gz", "the cat sat\n")),
        "in.gz: cannot read (",
    ),
    case(
        "translate-output-folder-missing",
        lambda t, g: translate(t, g("tiny_run_dir"), output=t / "no" / "out.txt"),
        "out.txt: folder",
        "no does not exist",
    ),
    case(
        "translate-output-folder-is-a-file",
        lambda t, g: translate(t, g("tiny_run_dir"), output=write(t / "file", "x") / "out.txt"),
        "file/out.txt:",
        "file is not a folder",
    ),
    case(
        "translate-output-folder-read-only",
        lambda t, g: translate(t, g("tiny_run_dir"), output=folder(t / "locked", 0o555) / "out.txt"),
        "locked/out.txt: folder",
        "is not writable",
        marks=AS_ROOT,
    ),
    case(
        "translate-average-of-a-checkpoint-file",
        lambda t, g: translate(t, best_file(run_copy(t, g)), "--average", "2"),
        ".pt: averaging takes a run's last 2 checkpoints: give the run folder",
    ),
    case(
        "translate-attention-dash",
        lambda t, g: translate(t, g("tiny_run_dir"), "--attention", "-"),
        "--attention -: translate takes a file here, not the standard streams",
    ),
    case(
        "average-output-dash",
        lambda t, g: ["average", str(run_copy(t, g)), "--last", "1", "-o", "-"],
        "--output -: average takes a file here, not the standard streams",
    ),
    case(
        "beam-zero",
        lambda t, g: translate(t, g("tiny_run_dir"), "--beam", "0"),
        "--beam: `decode.beam_size` must be a number >= 1, got 0",
    ),
    case(
        "nbest-above-beam",
        lambda t, g: translate(t, g("tiny_run_dir"), "--beam", "2", "--nbest", "3"),
        "--beam, --nbest: `decode.nbest` = 3 exceeds `decode.beam_size` = 2",
    ),
    case(
        "max-len-b-negative",
        lambda t, g: translate(t, g("tiny_run_dir"), "--max-len-b", "-1"),
        "--max-len-b: `decode.max_len_b` must be a number >= 1, got -1",
    ),
    case(
        "min-len-negative",
        lambda t, g: translate(t, g("tiny_run_dir"), "--min-len", "-1"),
        "--min-len: `decode.min_len` must be a number >= 0, got -1",
    ),
    case(
        "beam-not-a-number",
        lambda t, g: translate(t, g("tiny_run_dir"), "--beam", "wide"),
        "Invalid value for '--beam'",
        "translate --help",
    ),
    case(
        "option-unknown",
        lambda t, g: translate(t, g("tiny_run_dir"), "--beem", "2"),
        "No such option: --beem",
        "--beam",
    ),
    case("option-missing", lambda t, g: ["translate", "-i", "x.txt"], "Missing option '--model'"),
    case(
        "average-more-than-kept",
        lambda t, g: ["average", str(g("tiny_run_dir")), "--last", "3", "-o", str(t / "avg.pt")],
        "cannot average the last 3 checkpoints, the run has 1 step-N.pt files",
    ),
    # -- evaluation -----------------------------------------------------------------------------------------
    case(
        "eval-count-mismatch",
        lambda t, g: evaluate(t, hyp="a b\n"),
        "hyp.txt has 1 lines but",
        "ref.txt has 2",
    ),
    case(
        "eval-invalid-utf8",
        lambda t, g: evaluate(t, hyp=b"a b\n\xff\xfe\n"),
        "hyp.txt:2: invalid UTF-8",
    ),
    case(
        "eval-output-is-the-references",
        lambda t, g: evaluate(t, output=write(t / "ref.txt", "a b\nc d\n")),
        "ref.txt: given as --ref and written as --output: eval would write over its input",
    ),
    case(
        "eval-a-runs-translation-is-a-hyp",
        lambda t, g: [
            *("eval", "--hyp", str(write(t / "in.after.hyp", "a b\nc d\n")), "--label", "before"),
            *(
                "--model",
                str(g("tiny_run_dir")),
                "--label",
                "after",
                "--src",
                str(write(t / "in.txt", "a\nb\n")),
            ),
            *("--ref", str(write(t / "ref.txt", "a b\nc d\n")), "-o", str(write(t / "report.json", "{}\n"))),
        ],
        "in.after.hyp: given as --hyp and written as after's translation",
    ),
    case(
        "eval-output-dash",
        lambda t, g: evaluate(t, output=Path("-")),
        "--output -: eval takes a file here, not the standard streams",
    ),
    case(
        "eval-reference-dash",
        lambda t, g: evaluate(t, ref=Path("-")),
        "--ref -: eval takes a file here, not the standard streams",
    ),
    case(
        "eval-reference-missing",
        lambda t, g: evaluate(t, ref=t / "gone.txt"),
        "gone.txt: file not found",
    ),
    case(
        "eval-output-folder-missing",
        lambda t, g: evaluate(t, output=t / "no" / "report.json"),
        "report.json: folder",
        "no does not exist",
    ),
    case(
        "eval-plot-folder-missing",
        lambda t, g: evaluate(t, *by_length(t, "--plot", str(t / "no" / "curve.png"))),
        "curve.png: folder",
        "no does not exist",
    ),
    case(
        "eval-plot-format-unknown",
        lambda t, g: evaluate(t, *by_length(t, "--plot", str(t / "curve.gif"))),
        "curve.gif: cannot tell the image format",
    ),
    case(
        "eval-plot-folder-read-only",
        lambda t, g: evaluate(t, *by_length(t, "--plot", str(folder(t / "locked", 0o555) / "curve.png"))),
        "locked/curve.png: folder",
        "is not writable",
        marks=AS_ROOT,
    ),
    case(
        "bootstrap-negative",
        lambda t, g: evaluate(t, "--bootstrap", "-1"),
        "Invalid value for '--bootstrap'",
        "eval --help",
    ),
    case(
        "buckets-not-increasing",
        lambda t, g: evaluate(t, *by_length(t, "--buckets", "0,20,10")),
        "bucket edges [0, 20, 10]: expected strictly increasing",
        "--buckets",
    ),
    case(
        "buckets-not-numbers",
        lambda t, g: evaluate(t, *by_length(t, "--buckets", "0,ten")),
        "--buckets '0,ten': expected comma-separated whole numbers",
    ),
]


@pytest.mark.parametrize(("build", "fragments"), CASES)
def test_bad_input_is_one_clear_line_and_changes_nothing(build, fragments, tmp_path, request):
    args = build(tmp_path, request.getfixturevalue)
    before = snapshot(tmp_path)
    assert_one_line_error(run_main("--quiet", *args, cwd=tmp_path), *fragments)
    assert snapshot(tmp_path) == before


# one case per layer the error comes from: the config loader, the option parser, torch's checkpoint reader,
# evaluation's file checks
IN_A_PROCESS = ["key-misspelt", "beam-not-a-number", "checkpoint-truncated", "eval-invalid-utf8"]


@pytest.mark.slow
@pytest.mark.parametrize(("build", "fragments"), [case for case in CASES if case.id in IN_A_PROCESS])
def test_a_process_of_its_own_gives_the_same_line(build, fragments, tmp_path, request):
    args = build(tmp_path, request.getfixturevalue)
    before = snapshot(tmp_path)
    line = assert_one_line_error(seq2seq(*args, cwd=tmp_path), *fragments)
    assert snapshot(tmp_path) == before
    in_process = run_main("--quiet", *args, cwd=tmp_path).stderr.decode()
    # the usage hint names the program as started: `seq2seq` (the console script) or `python -m seq2seq_attn`
    assert line == in_process.replace("(see `seq2seq ", "(see `python -m seq2seq_attn ")
