"""The HTTP application: OpenNMT-py's REST routes (serving/opennmt.py), our own `/v1` API
(serving/v1.py), and the attention page at `/`, assembled with the middleware and error handlers they
share.

Built on FastAPI (Starlette underneath, served by uvicorn): typed request bodies give the `/v1` routes
their checks and an OpenAPI description (`/openapi.json`, browsable at `/docs`) from one declaration.

Every refusal is `{"error": "<one line>", "status": "error"}` with its status: 400 a body that is not
JSON (or not UTF-8), 404 no such model, 413 over a size limit (body bytes, sentences, characters of one
sentence), 422 a body of the wrong shape or a request the model refuses (the API's one-line reason, e.g.
scoring with an ensemble); 500 only for a fault of ours, logged. No traceback reaches a client.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..errors import UserError
from . import opennmt, v1
from .hosting import HostedModel
from .limits import Limits, Refusal

LOG = logging.getLogger("seq2seq.serve")
STATIC = resources.files("seq2seq_attn.serving") / "static"


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": " ".join(message.split()), "status": "error"}, status_code=status)


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


def add_error_handlers(app: FastAPI) -> None:
    """Every refusal as `{"error", "status"}` (module docstring); a fault of ours logged, answered 500."""

    @app.exception_handler(Refusal)
    async def refused(_: Request, error: Refusal) -> JSONResponse:
        return error_response(error.status, str(error))

    @app.exception_handler(UserError)
    async def user_error(_: Request, error: UserError) -> JSONResponse:
        return error_response(422, str(error))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        problems = error.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return error_response(400, "the body is not valid JSON")
        first = problems[0] if problems else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "body"
        return error_response(422, f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, error: HTTPException) -> JSONResponse:
        return error_response(error.status_code, str(error.detail))

    @app.exception_handler(Exception)
    async def fault(_: Request, error: Exception) -> JSONResponse:
        LOG.exception("internal error")
        return error_response(500, f"internal error: {type(error).__name__}")


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
