"""`seq2seq serve`: host trained models over HTTP (serving/app.py says what it answers).

One model from `--model` (repeat it for an ensemble, as in `translate`), or several side by side from a
`--conf` file in the layout of OpenNMT-py's conf.json (serving/hosting.py). The Search and Speed options
override the run's `decode` keys, as in `translate`. It binds 127.0.0.1 unless `--host` says otherwise;
SIGTERM or Ctrl-C stops taking connections, answers the requests in flight within `--grace` seconds,
then exits (serving/server.py).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import typer

from ..config import DecodeConfig
from ..console import info, warn
from ..errors import UserError
from ..serving.limits import BatchLimits, ConnectionLimits, Limits
from .options import Device, config_options, device_option
from .translate import DECODE_FLAGS, OUTPUT, SEARCH, SPEED

SERVER, LIMITS, CONNECTIONS = "Server", "Limits", "Connections"
BATCHING, LIMITED, CONNECTED = BatchLimits(), Limits(), ConnectionLimits()  # the defaults


def _stopped(signum: int, frame: object) -> None:
    """SIGTERM or Ctrl-C after uvicorn's graceful shutdown (or while the models load): a requested stop,
    exit 0 at once. Every request has its answer and nothing is left to write, so the interpreter's own
    teardown (torch's modules: 0.3 to 2 s on a busy 2-core machine) is skipped rather than taken from the
    grace period."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _limit(default: float, flag: str, help: str, least: float = 1, panel: str = LIMITS) -> Any:
    """An option of the Limits (or Connections) panel: its default from `limits.py`, a value of at least
    `least`; seconds in the Connections panel."""
    metavar = "S" if panel == CONNECTIONS and isinstance(default, float) else "N"
    return typer.Option(default, flag, min=least, metavar=metavar, help=help, rich_help_panel=panel)


def _seconds(default: float, flag: str, help: str) -> Any:
    return _limit(default, flag, help, 0.1, CONNECTIONS)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_command)


@config_options(
    DecodeConfig,
    "decode",
    DECODE_FLAGS,
    panel=SEARCH,
    panels=(SERVER, LIMITS, CONNECTIONS, SEARCH, SPEED, OUTPUT),
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
    max_batch_chars: int = _limit(
        BATCHING.max_chars, "--max-batch-chars", "A batch's sentences x longest x beam, characters."
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
    max_request_chars: int = _limit(
        LIMITED.max_request_chars, "--max-request-chars", "A request's characters x n-best at most."
    ),
    max_attention_chars: int = _limit(
        LIMITED.max_attention_chars, "--max-attention-chars", "A request's characters with attention."
    ),
    header_timeout: float = _seconds(
        CONNECTED.header_timeout, "--header-timeout", "Seconds a request's headers may take."
    ),
    body_timeout: float = _seconds(CONNECTED.body_timeout, "--body-timeout", "Seconds its body may take."),
    keep_alive: float = _seconds(CONNECTED.keep_alive, "--keep-alive", "Seconds an idle connection stays."),
    answer_timeout: float = _seconds(
        CONNECTED.answer_timeout, "--answer-timeout", "Seconds an answer may wait for its client to read it."
    ),
    max_connections: int = _limit(
        CONNECTED.max_connections, "--max-connections", "Open at once; more get 503.", 1, CONNECTIONS
    ),
    grace: float = _limit(
        CONNECTED.grace, "--grace", "On SIGTERM, seconds to answer what is in flight.", 0, CONNECTIONS
    ),
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
    batching = BatchLimits(max_batch, max_wait_ms / 1000, max_batch_chars)
    hosted = host_models(specs, device.value, batching, mix_int8, decode, threads)
    limits = Limits(
        max_body_bytes, max_sentences, max_chars, max_nbest, max_request_chars, max_attention_chars
    )
    connections = ConnectionLimits(
        header_timeout, body_timeout, keep_alive, max_connections, grace, answer_timeout
    )
    hosts, warning = allowed_hosts(host, allowed_host or [])
    if warning:
        warn(warning)
    app = create_app(hosted, limits, url_root, hosts, body_timeout)
    info(f"serve: {len(hosted)} model(s) ({', '.join(map(str, hosted))}) on http://{host}:{port}/")
    for stop in (signal.SIGTERM, signal.SIGINT):  # uvicorn passes each on once it has shut down
        signal.signal(stop, _stopped)
    serve(app, sock, connections)
