"""The `seq2seq` command line: one typer app; each pipeline stage registers its verbs from its own module.

Errors a user can cause (`UserError`, missing files, bad options) end as one line on stderr and exit
code 2; `--debug` (or SEQ2SEQ_DEBUG=1) shows the traceback instead.
"""

from __future__ import annotations

import os
import sys

import typer

try:  # recent typer vendors its own copy of click and raises its exceptions
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
    from typer._click.utils import PacifyFlushWrapper
except ImportError:  # older typer uses click itself
    from click.exceptions import ClickException, NoArgsIsHelpError
    from click.utils import PacifyFlushWrapper

from .. import __version__, console
from ..errors import UserError
from . import align as align_cli
from . import config as config_cli
from . import data as data_cli
from . import evaluate as evaluate_cli
from . import model as model_cli
from . import plot as plot_cli
from . import score as score_cli
from . import serve as serve_cli
from . import train as train_cli
from . import translate as translate_cli
from . import vocab as vocab_cli

app = typer.Typer(
    name="seq2seq",
    help="Neural machine translation with RNN encoder-decoders and attention (Bahdanau et al. 2014), "
    "with BLEU by sentence length.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

DEBUG = os.environ.get("SEQ2SEQ_DEBUG", "") not in ("", "0")


def _version(value: bool) -> None:
    if value:
        print(f"seq2seq-attn {__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or status lines."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    global DEBUG
    DEBUG = DEBUG or debug
    console.set_quiet(quiet)


for _module in (
    config_cli,
    data_cli,
    vocab_cli,
    model_cli,
    train_cli,
    translate_cli,
    evaluate_cli,
    score_cli,
    plot_cli,
    serve_cli,
):
    _module.register(app)
align_cli.register(app)


def main() -> None:
    """Console-script entry point."""
    try:
        # Non-standalone typer returns the exit code of typer.Exit (130 after Ctrl-C / SIGTERM in train).
        code = app(standalone_mode=False)
    except typer.Exit as stop:
        sys.exit(stop.exit_code)
    except NoArgsIsHelpError as err:  # `seq2seq` or `seq2seq data` alone: the help is the answer
        if err.format_message():  # (typer's rich help is printed already and leaves it empty)
            err.show()
        sys.exit(err.exit_code)
    except ClickException as err:  # bad usage (unknown option, value not a number): one line too
        print(f"seq2seq: error: {_one_line(err)}{_help_hint(err)}", file=sys.stderr)
        sys.exit(err.exit_code)
    except typer.Abort:
        print("seq2seq: aborted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:  # the reader went away (`seq2seq translate ... | head`): not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at interpreter exit
        sys.exit(0)
    except SystemExit as stop:  # typer meets a closed pipe itself: it wraps stdout and exits 1
        sys.exit(0 if isinstance(sys.stdout, PacifyFlushWrapper) else stop.code)
    except (UserError, OSError) as err:
        if DEBUG:
            raise
        print(f"seq2seq: error: {_one_line(err)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("seq2seq: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as err:
        if DEBUG:
            raise
        print(
            f"seq2seq: internal error: {type(err).__name__}: {_one_line(err)} (rerun with --debug "
            "for the traceback)",
            file=sys.stderr,
        )
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def _one_line(err: BaseException) -> str:
    if isinstance(err, OSError) and err.filename:
        return f"{err.filename}: {err.strerror}"
    if isinstance(err, ClickException):
        return " ".join(err.format_message().split())
    return " ".join(str(err).split()) or type(err).__name__


def _help_hint(err: ClickException) -> str:
    ctx = getattr(err, "ctx", None)
    return f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
