"""Running the application: the listening socket, and uvicorn serving the application on it with the
guards uvicorn lacks.

- The socket is bound before the models load, so a port that is taken is a one-line error at once (not
  a failure after minutes of loading and a "serving on" line).
- A connection must finish each request's headers within `header_timeout` seconds of opening or of its
  previous answer, or it is closed (with a 408 if it had begun them): uvicorn closes a connection idle
  after an answer (`keep_alive`), but not one that never sends a whole request, and such connections
  would hold the server's file descriptors until it can accept no more. The body's timeout is the
  application's (serving/middleware.py's `BodyGuard`).
- At most `max_connections` are open: one more is answered 503 as soon as it opens and closed (uvicorn's
  own limit answers only once a request has arrived, so it keeps silent connections open).
- An answer that waits `answer_timeout` seconds for its client to read on (the send buffer full, or a
  closing connection with bytes unsent) is dropped with its connection: a client that never reads would
  otherwise hold the connection, and its place under `max_connections`, for ever.
- SIGTERM or Ctrl-C: the server stops accepting, closes the connections that wait between requests or
  have not finished their headers, answers the bodies still arriving 503, and gives the searches in
  flight the `grace` period (serving/app.py's `stop`): every request gets its translation or a JSON 503
  within it, and the process exits 0.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import UserError
from .app import stop
from .limits import ConnectionLimits


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host`:`port`, or a one-line error naming them. Its protocol is named, as
    asyncio's own sockets are: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on connections of
    such a socket, and with it on, an answer written in parts waited for the client's delayed
    acknowledgement, about 40 ms on Linux, whenever a client sent its next request at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a restart reuses it
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    return sock


def raw_response(status: str, message: str | None = None) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, written before any request was read; with a
    message, the body every refusal has (`{"error", "status"}`)."""
    body = json.dumps({"error": message, "status": "error"}).encode() if message else b""
    kind = b"content-type: application/json\r\n" if message else b""
    head = f"HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: {len(body)}\r\n".encode()
    return head + kind + b"\r\n" + body


def cancelled(timer: Any) -> None:
    """Cancel `timer` (an event loop's handle, or None); None, for the attribute that held it."""
    if timer is not None:
        timer.cancel()


class GuardedProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for a request's headers and a cap on open connections
    (module docstring)."""

    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.headers_due: Any = None  # the timer that closes the connection if the headers are late
        self.answer_due: Any = None  # the timer that drops the connection if its answer is not read

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections:
            self.transport = transport
            most = self.limits.max_connections
            transport.write(
                raw_response("503 Service Unavailable", f"too many connections: at most {most} open")
            )
            transport.close()
            return
        super().connection_made(transport)
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self.headers_due = cancelled(self.headers_due)
        self.answer_due = cancelled(self.answer_due)
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        """The send buffer is full: the client is not reading as fast as it is answered."""
        super().pause_writing()
        self._await_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        self.answer_due = cancelled(self.answer_due)

    def timeout_keep_alive_handler(self) -> None:
        super().timeout_keep_alive_handler()
        self._bound_unsent()

    def shutdown(self) -> None:
        super().shutdown()
        self._bound_unsent()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a request's headers arrived
            self.headers_due = cancelled(self.headers_due)

    def on_response_complete(self) -> None:
        self._await_headers()  # the next request's (first: an answer may start a pipelined request at once)
        super().on_response_complete()
        self._bound_unsent()

    def _await_headers(self) -> None:
        self.headers_due = cancelled(self.headers_due)
        self.headers_due = self.loop.call_later(self.limits.header_timeout, self._headers_late)

    def send_400_response(self, msg: str) -> None:
        """A request uvicorn cannot parse (bad framing, a bad Content-Length, no Host, ...) is refused as
        every other: `{"error", "status"}` JSON, and the connection closed."""
        self.transport.write(raw_response("400 Bad Request", "invalid HTTP request"))
        self.transport.close()

    def _headers_late(self) -> None:
        self.headers_due = None
        if self.transport.is_closing():
            return
        begun, _ = self.conn.trailing_data  # the bytes of headers not yet whole
        if begun:
            self.transport.write(raw_response("408 Request Timeout"))
        self.transport.close()
        self._bound_unsent()

    def _bound_unsent(self) -> None:
        """A closing connection waits for its unsent bytes to go: as long as `answer_timeout`, no longer."""
        if self.transport.is_closing() and self.transport.get_write_buffer_size():
            self._await_reading()

    def _await_reading(self) -> None:
        if self.answer_due is None:
            self.answer_due = self.loop.call_later(self.limits.answer_timeout, self.transport.abort)


class GracefulServer(uvicorn.Server):
    """uvicorn's server, which tells the application to stop (serving/app.py's `stop`) before it waits
    for the requests in flight."""

    def __init__(self, config: uvicorn.Config, app: FastAPI, grace: float) -> None:
        super().__init__(config)
        self.app, self.grace = app, grace

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        stop(self.app, self.grace)
        await super().shutdown(sockets)


def serve(app: FastAPI, sock: socket.socket, limits: ConnectionLimits) -> None:
    """Serve `app` on `sock` until SIGTERM or Ctrl-C, then stop within `limits.grace` (module docstring)."""

    def protocol(**kwargs: Any) -> GuardedProtocol:
        return GuardedProtocol(limits=limits, **kwargs)

    config = uvicorn.Config(
        app,
        http=protocol,  # type: ignore[arg-type]
        log_level="warning",
        timeout_keep_alive=limits.keep_alive,  # type: ignore[arg-type]
        timeout_graceful_shutdown=limits.grace,  # type: ignore[arg-type]
    )
    GracefulServer(config, app, limits.grace).run(sockets=[sock])
