"""The HTTP application: OpenNMT-py's REST routes (serving/opennmt.py), our own `/v1` API
(serving/v1.py), and the attention page at `/`, assembled with the middleware and error handlers they
share.

Built on FastAPI (Starlette underneath, served by uvicorn): typed request bodies give the `/v1` routes
their checks and an OpenAPI description (`/openapi.json`, browsable at `/docs`) from one declaration.

Every refusal is `{"error": "<one line>", "status": "error"}` with its status (serving/errors.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from importlib import resources

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from .. import __version__
from . import opennmt, v1
from .errors import add_error_handlers
from .hosting import HostedModel
from .limits import ConnectionLimits, Limits, Refusal
from .middleware import LOCAL_NAMES, STOPPING, BodyGuard, CrossSiteGuard, HeadAsGet, HostGuard

STATIC = resources.files("seq2seq_attn.serving") / "static"
ANSWERING = 1.0  # seconds a stopping server keeps to answer the requests whose searches it stops


def create_app(
    hosted: dict[int, HostedModel],
    limits: Limits = Limits(),
    url_root: str = "/translator",
    hosts: Sequence[str] = tuple(LOCAL_NAMES),
    body_timeout: float = ConnectionLimits().body_timeout,
) -> FastAPI:
    """The FastAPI application serving `hosted` (model id -> model) to requests whose Host is one of
    `hosts` (`middleware.allowed_hosts` makes them from the bound address and the names given); `stop`
    stops it."""

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
        redirect_slashes=False,  # a redirect would echo the client's Host
    )
    app.state.hosted, app.state.limits, app.state.stopping = hosted, limits, asyncio.Event()
    # (the middleware added last runs first)
    app.add_middleware(
        BodyGuard, limit=limits.max_body_bytes, timeout=body_timeout, stopping=app.state.stopping
    )
    app.add_middleware(HeadAsGet)
    app.add_middleware(CrossSiteGuard)
    app.add_middleware(HostGuard, allowed_hosts=hosts)
    add_error_handlers(app)
    app.include_router(opennmt.router, prefix="/" + url_root.strip("/"))
    app.include_router(v1.router)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(str(STATIC / "index.html"))

    @app.get("/favicon.ico", include_in_schema=False)  # where a browser looks for the icon unasked
    async def icon() -> FileResponse:
        return FileResponse(str(STATIC / "favicon.svg"), media_type="image/svg+xml")

    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    return app


def stop(app: FastAPI, grace: float) -> None:
    """Begin to stop: the bodies still arriving are answered 503 at once, the searches go on until one
    second before the `grace` period ends, and then every request still waiting for one is answered 503
    and every search stopped, so that each request has its answer within the grace period."""
    app.state.stopping.set()
    loop = asyncio.get_running_loop()
    for model in app.state.hosted.values():
        loop.call_later(max(0.0, grace - ANSWERING), model.stop, Refusal(503, STOPPING))
