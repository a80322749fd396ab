"""`seq2seq translate`: raw text in, translations out, one line per line; `seq2seq average`: checkpoint means.

Search settings default to the run's `decode` config section (the first run's, for an ensemble of
several `--model` runs); each option overrides one key.
torch is imported inside the commands, so `seq2seq --help` and every other command start fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

from ..config import DecodeConfig, choices_enum
from ..console import info
from ..errors import UserError
from ..io import check_writable, open_binary
from .options import Device, device_option, models_option

Precision = choices_enum(DecodeConfig, "precision")
Penalty = choices_enum(DecodeConfig, "length_penalty")
Stopping = choices_enum(DecodeConfig, "stopping")
AtMaxLen = choices_enum(DecodeConfig, "at_max_len")

# The command-line option that overrides each decode key, for error messages.
OPTIONS = {
    "beam_size": "--beam",
    "nbest": "--nbest",
    "batch_tokens": "--batch-tokens",
    "batch_sentences": "--batch-sentences",
    "precision": "--precision",
    "compile": "--compile",
    "replace_unk": "--replace-unk",
    "unk_dictionary": "--dictionary",
    "length_penalty": "--length-penalty",
    "alpha": "--alpha",
    "max_len_a": "--max-len-a",
    "max_len_b": "--max-len-b",
    "min_len": "--min-len",
    "min_len_a": "--min-len-a",
    "no_repeat_ngram": "--no-repeat-ngram",
    "stopping": "--stopping",
    "at_max_len": "--at-max-len",
    "no_unk": "--no-unk",
    "max_src_tokens": "--max-src-tokens",
    "lexical_shortlist": "--lexical-shortlist",
}


HELP = {
    "nbest": "Hypotheses per sentence; above 1, rows index<TAB>rank<TAB>score<TAB>text (decode.nbest).",
    "batch_tokens": "Padded source tokens per search batch (decode.batch_tokens).",
    "batch_sentences": "At most this many sentences per search batch, 0: no limit (decode.batch_sentences).",
    "precision": "auto: bf16 on GPU, fp32 on CPU; bf16 pays on some CPUs only; int8: CPU search with int8 "
    "weights (decode.precision).",
    "attention": "Folder for each line's attention heat map (PNG) and matrix (JSON), named by 0-based line.",
    "replace_unk": "Replace each <unk> by the most attended source word (decode.replace_unk).",
    "compile": "Run the additive attention through torch.compile: faster beam search after seconds of "
    "compiling; greedy never compiles (decode.compile).",
    "dictionary": "TSV source word<TAB>target word; implies --replace-unk (decode.unk_dictionary).",
    "length_penalty": "Score normalisation (decode.length_penalty).",
    "max_len_a": "At most a * source length + b output tokens (decode.max_len_a).",
    "no_repeat_ngram": "Forbid repeating any n-gram of this size, 0 off (decode.no_repeat_ngram).",
    "stopping": "bound: stop a sentence once no open hypothesis can win; top: once a step's best candidate "
    "is EOS, as OpenNMT-py and JoeyNMT (faster, may miss a better hypothesis) (decode.stopping).",
    "at_max_len": "force_eos: EOS is forced at the maximum length; retry: unfinished hypotheses are dropped "
    "there and a sentence with none ended is searched again with a doubled beam, as GroundHog "
    "(decode.at_max_len).",
    "no_unk": "Never generate <unk>; a sentence with no translation without it is searched again with it "
    "(decode.no_unk).",
    "max_src_tokens": "Longer sources are cut to this many pieces (bounds time and memory) "
    "(decode.max_src_tokens).",
    "output_average": "Averaged checkpoint to write (atomically); put it in the run's checkpoints/ folder "
    "so `translate --model` finds the run's vocabulary.",
}


def register(app: typer.Typer) -> None:
    app.command("translate")(translate_command)
    app.command("average")(average_command)


def translate_command(
    model: list[Path] = models_option(),
    input_path: str = typer.Option(
        "-", "--input", "-i", help="Source text (.gz read directly); - for stdin."
    ),
    output_path: str = typer.Option("-", "--output", "-o", help="Output, written atomically; - for stdout."),
    beam: int | None = typer.Option(None, "--beam", help="Beam width, 1 for greedy (decode.beam_size)."),
    nbest: int | None = typer.Option(None, "--nbest", help=HELP["nbest"]),
    batch_tokens: int | None = typer.Option(None, "--batch-tokens", help=HELP["batch_tokens"]),
    batch_sentences: int | None = typer.Option(None, "--batch-sentences", help=HELP["batch_sentences"]),
    device: Device = device_option(),
    precision: Precision | None = typer.Option(None, "--precision", help=HELP["precision"]),
    compile_attention: bool | None = typer.Option(None, "--compile/--no-compile", help=HELP["compile"]),
    scores: bool = typer.Option(False, "--scores", help="Write score<TAB>translation (normalised score)."),
    attention: Path | None = typer.Option(None, "--attention", help=HELP["attention"]),
    replace_unk: bool | None = typer.Option(None, "--replace-unk/--no-replace-unk", help=HELP["replace_unk"]),
    dictionary: Path | None = typer.Option(None, "--dictionary", help=HELP["dictionary"]),
    average: int = typer.Option(
        0, "--average", help="Average the last K step-N.pt checkpoints of the run (of each run)."
    ),
    length_penalty: Penalty | None = typer.Option(None, "--length-penalty", help=HELP["length_penalty"]),
    alpha: float | None = typer.Option(None, "--alpha", help="GNMT length-penalty exponent (decode.alpha)."),
    max_len_a: float | None = typer.Option(None, "--max-len-a", help=HELP["max_len_a"]),
    max_len_b: int | None = typer.Option(None, "--max-len-b", help="See --max-len-a (decode.max_len_b)."),
    min_len: int | None = typer.Option(
        None, "--min-len", help="No EOS before this many tokens (decode.min_len)."
    ),
    min_len_a: float | None = typer.Option(
        None, "--min-len-a", help="No EOS before ceil(a * source length) tokens (decode.min_len_a)."
    ),
    no_repeat_ngram: int | None = typer.Option(None, "--no-repeat-ngram", help=HELP["no_repeat_ngram"]),
    stopping: Stopping | None = typer.Option(None, "--stopping", help=HELP["stopping"]),
    at_max_len: AtMaxLen | None = typer.Option(None, "--at-max-len", help=HELP["at_max_len"]),
    no_unk: bool | None = typer.Option(None, "--no-unk/--allow-unk", help=HELP["no_unk"]),
    max_src_tokens: int | None = typer.Option(None, "--max-src-tokens", help=HELP["max_src_tokens"]),
    lexical_shortlist: bool | None = typer.Option(
        None,
        "--lexical-shortlist/--full-vocabulary",
        help="Score only each sentence's lexical candidates (`seq2seq lexical-shortlist RUN` builds them): "
        "faster, approximate (decode.lexical_shortlist).",
    ),
) -> None:
    """Translate raw text with a trained run, or the ensemble of several: one output line per input line,
    in order."""
    if average < 0:
        raise UserError(f"--average must be >= 0, got {average}")
    if input_path != "-":
        open_binary(input_path).close()  # a missing input or output folder fails before loading the model
    if output_path != "-":
        check_writable(output_path)
    from ..decoding.loader import load_translator
    from ..decoding.translate import translate_file
    from ..model.device import resolve_device

    given = {
        "beam_size": beam,
        "nbest": nbest,
        "batch_tokens": batch_tokens,
        "batch_sentences": batch_sentences,
        "precision": precision.value if precision else None,
        "compile": compile_attention,
        "replace_unk": True if dictionary and replace_unk is None else replace_unk,
        "unk_dictionary": str(dictionary) if dictionary else None,
        "length_penalty": length_penalty.value if length_penalty else None,
        "alpha": alpha,
        "max_len_a": max_len_a,
        "max_len_b": max_len_b,
        "min_len": min_len,
        "min_len_a": min_len_a,
        "no_repeat_ngram": no_repeat_ngram,
        "stopping": stopping.value if stopping else None,
        "at_max_len": at_max_len.value if at_max_len else None,
        "no_unk": no_unk,
        "max_src_tokens": max_src_tokens,
        "lexical_shortlist": lexical_shortlist,
    }
    target = resolve_device(device.value, "--device")
    translator = load_translator(model, target, given, average=average, names=OPTIONS)

    each = None
    if attention is not None:
        from ..evaluation.heatmap import attention_files  # matplotlib is slow to import: only when drawing

        each = attention_files(translator, attention)
    count = translate_file(translator, input_path, output_path, scores, each)
    info(f"translate: {count} lines")


def average_command(
    paths: list[Path] = typer.Argument(
        ..., help="A run directory (with --last) or checkpoint files.", show_default=False
    ),
    last: int = typer.Option(0, "--last", help="With a run directory: average its last K step-N.pt files."),
    output: Path = typer.Option(..., "--output", "-o", help=HELP["output_average"], show_default=False),
) -> None:
    """Average the weights of several checkpoints of one run into one checkpoint."""
    from ..decoding.average import average_checkpoints
    from ..decoding.run_folder import average_latest
    from ..model.checkpoint import save_checkpoint

    if len(paths) == 1 and paths[0].is_dir():
        if last < 1:
            raise UserError(f"{paths[0]}: is a run directory; give --last K (K >= 1) checkpoints to average")
        averaged, paths = average_latest(paths[0], last)
    elif last:
        raise UserError("--last K needs exactly one run directory, not checkpoint files")
    else:
        averaged = average_checkpoints(paths)
    save_checkpoint(output, averaged)
    info(f"average: {output} = mean of {', '.join(str(p) for p in paths)}")
