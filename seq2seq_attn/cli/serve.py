"""`seq2seq serve`: host trained models over HTTP (serving/app.py says what it answers).

One model from `--model` (repeat it for an ensemble, as in `translate`), or several side by side from a
`--conf` file in the layout of OpenNMT-py's conf.json (serving/hosting.py). The Search and Speed options
override the run's `decode` keys, as in `translate`. It binds 127.0.0.1 unless `--host` says otherwise;
SIGTERM or Ctrl-C stops taking connections, answers the requests in flight, then exits.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import typer

from ..config import DecodeConfig
from ..console import info, warn
from ..errors import UserError
from ..serving.limits import BatchLimits, Limits
from .options import Device, config_options, device_option
from .translate import DECODE_FLAGS, OUTPUT, SEARCH, SPEED

SERVER, LIMITS = "Server", "Limits"
BATCHING, LIMITED = BatchLimits(), Limits()  # the defaults
GRACE_SECONDS = 30  # how long a stopping server waits for the requests in flight


def _stopped(signum: int, frame: object) -> None:
    """SIGTERM after uvicorn's graceful shutdown (or while the models load): a requested stop, exit 0."""
    raise SystemExit(0)


def _limit(default: float, flag: str, help: str, least: float = 1) -> Any:
    """An option of the Limits panel: its default from `limits.py`, a value of at least `least`."""
    return typer.Option(default, flag, min=least, metavar="N", help=help, rich_help_panel=LIMITS)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_command)


@config_options(
    DecodeConfig, "decode", DECODE_FLAGS, panel=SEARCH, panels=(SERVER, LIMITS, SEARCH, SPEED, OUTPUT)
)
def serve_command(
    model: list[Path] | None = typer.Option(
        None,
        "--model",
        "-m",
        help="Run directory, checkpoint or exported model folder; repeat it for an ensemble.",
        show_default=False,
        rich_help_panel=SERVER,
    ),
    conf: Path | None = typer.Option(
        None,
        "--conf",
        help="JSON file of models to host side by side (OpenNMT-py's conf.json layout).",
        rich_help_panel=SERVER,
    ),
    model_id: int = typer.Option(100, "--id", help="The id of the --model model.", rich_help_panel=SERVER),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind.", rich_help_panel=SERVER),
    allowed_host: list[str] | None = typer.Option(
        None,
        "--allowed-host",
        metavar="NAME",
        help="A Host name the server answers besides its local ones (repeat it; *.example.com, or *: any).",
        show_default=False,
        rich_help_panel=SERVER,
    ),
    port: int = typer.Option(5000, "--port", help="Port to bind.", rich_help_panel=SERVER),
    url_root: str = typer.Option(
        "/translator", "--url-root", help="Where OpenNMT-py's routes live.", rich_help_panel=SERVER
    ),
    device: Device = device_option(panel=SERVER),
    threads: int | None = typer.Option(
        None, "--threads", min=1, metavar="N", help="CPU threads for the search.", rich_help_panel=SERVER
    ),
    max_wait_ms: float = _limit(
        BATCHING.max_wait * 1000, "--max-wait-ms", "How long a sentence waits for others.", 0
    ),
    max_batch: int = _limit(
        BATCHING.max_sentences, "--max-batch", "Sentences of several requests searched together."
    ),
    mix_int8: bool = typer.Option(
        False,
        "--mix-int8",
        metavar="",
        help="Batch int8 models' requests together too (answers may then vary).",
        rich_help_panel=LIMITS,
    ),
    max_body_bytes: int = _limit(LIMITED.max_body_bytes, "--max-body-bytes", "Largest request body, bytes."),
    max_sentences: int = _limit(LIMITED.max_sentences, "--max-sentences", "Sentences per request at most."),
    max_chars: int = _limit(LIMITED.max_chars, "--max-chars", "Characters per sentence at most."),
    max_nbest: int = _limit(LIMITED.max_nbest, "--max-nbest", "Largest n-best a request may ask."),
    overrides: dict[str, Any] | None = None,
) -> None:
    """Serve trained models over HTTP: OpenNMT-py's REST routes, a /v1 API (OpenAPI at /docs) and a page
    at / that shows each translation's attention."""
    if bool(model) == bool(conf):
        raise UserError("give --model (repeat it for an ensemble) or --conf FILE, not both")
    from ..serving.app import create_app
    from ..serving.hosting import ModelSpec, host_models, read_conf
    from ..serving.middleware import allowed_hosts
    from ..serving.server import listen, serve

    sock = listen(host, port)
    specs = read_conf(conf) if conf else [ModelSpec(model_id, [str(path) for path in model or []])]
    decode = {key: value for key, value in (overrides or {}).items() if value is not None}
    batching = BatchLimits(max_batch, max_wait_ms / 1000)
    hosted = host_models(specs, device.value, batching, mix_int8, decode, threads)
    limits = Limits(max_body_bytes, max_sentences, max_chars, max_nbest)
    hosts, warning = allowed_hosts(host, allowed_host or [])
    if warning:
        warn(warning)
    app = create_app(hosted, limits, url_root, hosts)
    info(f"serve: {len(hosted)} model(s) ({', '.join(map(str, hosted))}) on http://{host}:{port}/")
    signal.signal(signal.SIGTERM, _stopped)  # uvicorn passes SIGTERM on once it has shut down
    serve(app, sock, GRACE_SECONDS)
