"""`seq2seq data prepare`: read the configured corpus, clean it, write line-aligned splits and a manifest;
`seq2seq data long-inputs`: a long-input test set joined from a test set's consecutive pairs."""

from __future__ import annotations

from pathlib import Path

import typer

from .. import console
from ..config import load_config
from ..data.clean import DROP_RULES
from ..data.prepare import MANIFEST, prepare
from .config import CONFIG_ARG, SET, SET_OPTION


def register(app: typer.Typer) -> None:
    data_app = typer.Typer(help="Prepare the parallel corpus.", no_args_is_help=True)
    data_app.command("prepare")(prepare_command)
    data_app.command("long-inputs")(long_inputs_command)
    app.add_typer(data_app, name="data")


def prepare_command(
    config: Path = CONFIG_ARG,
    overrides: list[str] = SET_OPTION,
    force: bool = typer.Option(
        False, "--force", help="Redo the work even when inputs and config are unchanged."
    ),
) -> None:
    """Write <data_dir>/{train,valid,test}.{src,tgt} and manifest.json from CONFIG's `data` section.

    Cleaning applies to the splits in data.clean.splits. Unchanged inputs and settings: nothing to do.
    """
    prepared = prepare(load_config(config, overrides, SET), force=force)
    console.info(summary_table(prepared.manifest))
    for note in reading_notes(prepared.manifest):
        console.info(note)
    if prepared.redone:
        console.info(f"prepared {prepared.data_dir} (see {prepared.data_dir / MANIFEST})")
    else:
        console.info(
            f"{prepared.data_dir} is up to date (inputs and data config unchanged); --force redoes it"
        )


def summary_table(manifest: dict) -> str:
    """Pairs read and kept per split, and what each cleaning rule changed or dropped ('-': not applied)."""
    header = ["split", "read", "kept", "normalized", *DROP_RULES]
    rows = [header]
    for split, counts in manifest["splits"].items():
        cleaned = counts["cleaned"]
        rule_cells = [
            f"{counts['dropped'][rule]:,}" if cleaned and rule in counts["dropped"] else "-"
            for rule in DROP_RULES
        ]
        normalized = (
            f"{counts['normalized']:,}" if cleaned and manifest["clean"]["normalize_whitespace"] else "-"
        )
        rows.append([split, f"{counts['read']:,}", f"{counts['kept']:,}", normalized, *rule_cells])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    )


def reading_notes(manifest: dict) -> list[str]:
    """One line per split on what reading changed besides cleaning: held-out sets, CRLF, byte-order marks."""
    notes = []
    for split, counts in manifest["splits"].items():
        if held := counts.get("held_out"):
            sizes = ", ".join(f"{held[name]:,} for {name}" for name in ("valid", "test") if name in held)
            notes.append(
                f"{split}: held out {sizes} (seed {held['seed']}); removed {held['same_source_removed']:,} "
                "training pairs whose source sentence is also a held-out one"
            )
        if counts.get("crlf_lines") or counts.get("byte_order_marks"):
            notes.append(
                f"{split}: removed {counts['crlf_lines']:,} Windows line ends (CRLF) and "
                f"{counts['byte_order_marks']} byte-order mark(s)"
            )
    return notes


def long_inputs_command(
    src: Path = typer.Option(..., "--src", help="Test sources, one sentence per line.", show_default=False),
    ref: Path = typer.Option(..., "--ref", help="Their references, line-aligned.", show_default=False),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Folder for long.src, long.tgt and manifest.json.", show_default=False
    ),
    sentences: int = typer.Option(
        8, "--sentences", help="At most this many pairs per input (at least 2).", min=2
    ),
    max_words: int = typer.Option(
        200, "--max-words", help="Stop adding pairs before the source passes this.", min=1
    ),
    seed: int = typer.Option(1, "--seed", help="Seed of the number of pairs each input joins."),
) -> None:
    """Join consecutive test pairs into long inputs of 2 to --sentences sentences (concatenated, not natural
    long sentences), references aligned; `seq2seq eval --by-length` then extends the curve past the test
    set's longest sentences (raise decode.max_src_tokens with `eval --set`)."""
    from ..data.long_inputs import MANIFEST as LONG_MANIFEST
    from ..data.long_inputs import write_long_inputs

    built = write_long_inputs(src, ref, output, sentences, max_words, seed)
    longest, pairs = max(len(line.split()) for line in built.sources), sum(map(len, built.groups))
    console.info(
        f"long inputs: {len(built.groups)} inputs of {pairs} test pairs, up to {longest} words, in {output} "
        f"(see {output / LONG_MANIFEST})"
    )
