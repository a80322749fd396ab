"""Running the application: the listening socket, and uvicorn serving the application on it.

The socket is bound before the models load, so a port that is taken is a one-line error at once (not a
failure after minutes of loading and a "serving on" line).
"""

from __future__ import annotations

import socket

import uvicorn
from fastapi import FastAPI

from ..errors import UserError


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port`, or a one-line error naming them."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a restart reuses it
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    return sock


def serve(app: FastAPI, sock: socket.socket, grace: float) -> None:
    """Serve `app` on `sock` until SIGTERM or Ctrl-C, then answer the requests in flight for up to
    `grace` seconds."""
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=int(grace))
    uvicorn.Server(config).run(sockets=[sock])
