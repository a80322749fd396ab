"""The HTTP application: OpenNMT-py's REST routes (serving/opennmt.py), our own `/v1` API
(serving/v1.py), and the attention page at `/`, assembled with the middleware and error handlers they
share.

Built on FastAPI (Starlette underneath, served by uvicorn): typed request bodies give the `/v1` routes
their checks and an OpenAPI description (`/openapi.json`, browsable at `/docs`) from one declaration.

Every refusal is `{"error": "<one line>", "status": "error"}` with its status (serving/errors.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from importlib import resources

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from . import opennmt, v1
from .errors import add_error_handlers, error_response
from .hosting import HostedModel
from .limits import Limits, Refusal

STATIC = resources.files("seq2seq_attn.serving") / "static"


class BodyGuard:
    """ASGI middleware: a body over `limit` bytes is refused with 413 before it is read to the end, and
    every body is read as JSON whatever its Content-Type says, as OpenNMT-py's server reads it
    (`request.get_json(force=True)`: `curl -d` sends form encoding unless told otherwise)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        json_type = (b"content-type", b"application/json")
        scope = {**scope, "headers": [*(h for h in scope["headers"] if h[0] != b"content-type"), json_type]}
        declared = headers.get(b"content-length", b"0")
        too_big = f"request body over {self.limit} bytes"
        if not declared.isdigit() or int(declared) > self.limit:
            message = too_big if declared.isdigit() else "bad Content-Length"
            await error_response(413 if declared.isdigit() else 400, message)(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise Refusal(413, too_big)
            return message

        await self.app(scope, counted, send)


def create_app(
    hosted: dict[int, HostedModel], limits: Limits = Limits(), url_root: str = "/translator"
) -> FastAPI:
    """The FastAPI application serving `hosted` (model id -> model)."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        for model in hosted.values():  # the requests in flight are answered before the threads stop
            await model.batcher.close()
            model.close()

    app = FastAPI(
        title="seq2seq-attn",
        version=__version__,
        summary="RNN encoder-decoder translation with attention: OpenNMT-py's REST routes and /v1.",
        lifespan=lifespan,
    )
    app.state.hosted, app.state.limits = hosted, limits
    app.add_middleware(BodyGuard, limit=limits.max_body_bytes)
    add_error_handlers(app)
    app.include_router(opennmt.router, prefix="/" + url_root.strip("/"))
    app.include_router(v1.router)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(str(STATIC / "index.html"))

    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    return app
