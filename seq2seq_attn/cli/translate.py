"""`seq2seq translate`: raw text in, translations out, one line per line; `seq2seq average`: checkpoint means;
`seq2seq lexical-shortlist`: learn a run's lexical shortlist (decoding/shortlist_learning.py), for faster
translation.

Search settings default to the run's `decode` config section (the first run's, for an ensemble of
several `--model` runs); every decode key is an option that overrides it, made from the schema
(`options.config_options`: its type, choices and short help), so a new decode key needs no edit here.
torch is imported inside the commands, so `seq2seq --help` and every other command start fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..config import DecodeConfig
from ..console import info
from ..errors import UserError
from ..io import check_readable, check_writable
from .options import Device, Flag, config_options, device_option, models_option, refuse_standard_streams

SEARCH, SPEED, OUTPUT = "Search", "Speed", "Output"  # the panels of `translate --help`

# The decode keys whose option is not named after the key, or is not a search setting; every other decode
# key is an option `--key-name` in the Search panel (options.config_options).
DECODE_FLAGS = {
    "beam_size": Flag("--beam"),
    "nbest": Flag(panel=OUTPUT),
    "batch_tokens": Flag(panel=SPEED),
    "batch_sentences": Flag(panel=SPEED),
    "precision": Flag(panel=SPEED),
    "compile": Flag(panel=SPEED),
    "cuda_graphs": Flag(panel=SPEED),
    "lexical_shortlist": Flag(negative="--full-vocabulary", panel=SPEED),
    "max_src_tokens": Flag(panel=SPEED),
    "no_unk": Flag(negative="--allow-unk"),
    "replace_unk": Flag(panel=OUTPUT),
    "unk_dictionary": Flag("--dictionary", panel=OUTPUT),
}

OUTPUT_AVERAGE_HELP = (
    "Averaged checkpoint to write (atomically); put it in the run's checkpoints/ folder so `translate "
    "--model` finds the run's vocabulary, under a name of its own (not best.pt, latest.pt or step-N.pt)."
)


def register(app: typer.Typer) -> None:
    app.command("translate")(translate_command)
    app.command("average")(average_command)
    app.command("lexical-shortlist")(lexical_shortlist_command)


@config_options(DecodeConfig, "decode", DECODE_FLAGS, panel=SEARCH, panels=(SEARCH, SPEED, OUTPUT))
def translate_command(
    model: list[Path] = models_option(),
    input_path: str = typer.Option(
        "-", "--input", "-i", help="Source text (.gz read directly); - for stdin.", rich_help_panel=OUTPUT
    ),
    output_path: str = typer.Option(
        "-", "--output", "-o", help="Output, written atomically; - for stdout.", rich_help_panel=OUTPUT
    ),
    device: Device = device_option(panel=SPEED),
    scores: bool = typer.Option(
        False,
        "--scores",
        metavar="",
        help="Write score<TAB>translation (normalised score).",
        rich_help_panel=OUTPUT,
    ),
    attention: Path | None = typer.Option(
        None,
        "--attention",
        help="Folder for each line's attention heat map (PNG) and matrix (JSON), named by 0-based line "
        "(an earlier run's numbered files there are removed first).",
        rich_help_panel=OUTPUT,
    ),
    average: int = typer.Option(
        0, "--average", help="Average the last K step-N.pt checkpoints of the run (of each run)."
    ),
    overrides: dict[str, Any] | None = None,
) -> None:
    """Translate raw text with a trained run, or the ensemble of several: one output line per input line,
    in order. The Search, Speed and Output options override the run's `decode` key named in parentheses."""
    if average < 0:
        raise UserError(f"--average must be >= 0, got {average}")
    refuse_standard_streams("translate", [("--attention", attention)])
    if input_path != "-":
        check_readable(input_path)  # a missing input or output folder fails before loading the model
    if output_path != "-":
        check_writable(output_path)
    from ..decoding.loader import load_translator
    from ..decoding.translate import translate_file
    from ..model.device import resolve_device

    target = resolve_device(device.value, "--device")
    translator = load_translator(model, target, overrides, average=average)

    each = None
    if attention is not None:
        from ..evaluation.models.heatmap import (
            attention_files,  # matplotlib is slow to import: only when drawing
        )

        each = attention_files(translator, attention)
    count = translate_file(translator, input_path, output_path, scores, each)
    info(f"translate: {count} lines")


def average_command(
    paths: list[Path] = typer.Argument(
        ..., help="A run directory (with --last) or checkpoint files.", show_default=False
    ),
    last: int = typer.Option(0, "--last", help="With a run directory: average its last K step-N.pt files."),
    output: Path = typer.Option(..., "--output", "-o", help=OUTPUT_AVERAGE_HELP, show_default=False),
) -> None:
    """Average the weights of several checkpoints of one run into one checkpoint."""
    from ..runs.average import average_checkpoints
    from ..runs.checkpoint import save_checkpoint
    from ..runs.run_folder import average_latest, written_by_training

    refuse_standard_streams("average", [("--output", output)])
    if written_by_training(output):
        raise UserError(
            f"--output {output}: a name training writes and replaces (latest.pt, best.pt, step-N.pt); "
            "give another, such as checkpoints/average.pt"
        )
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


def lexical_shortlist_command(
    run: Path = typer.Argument(
        ...,
        help="A run directory (its best checkpoint) or a checkpoint file: one table per checkpoint, "
        "lexical_shortlist.npz for the best, lexical_shortlist.<name>.npz for another.",
    ),
    top_k: int = typer.Option(50, "--top-k", help="Candidates kept per source piece.", min=1),
    frequent: int = typer.Option(1000, "--frequent", help="Most frequent target pieces, always in.", min=0),
    sentences: int = typer.Option(
        20000, "--sentences", help="Training pairs sampled to learn from (seeded).", min=1
    ),
    device: Device = device_option(),
) -> None:
    """Learn which target pieces each source piece's translation uses, from the run's own attention on its
    training data, into RUN/lexical_shortlist.npz; `translate --lexical-shortlist` (decode.lexical_shortlist)
    then scores only those. Prints the share of the dev set's reference pieces the lists cover."""
    from ..decoding.shortlist_learning import build_for_run
    from ..model.device import resolve_device

    built = build_for_run(run, top_k, frequent, sentences, resolve_device(device.value, "--device"))
    typer.echo(f"lexical shortlist: {built.path} from {built.pairs} training pairs")
    typer.echo(f"dev reference pieces covered: {100 * built.valid_coverage:.2f}%")
