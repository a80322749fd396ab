"""The HTTP application: OpenNMT-py's REST routes, our own `/v1` API, and the attention page at `/`.

Built on FastAPI (Starlette underneath, served by uvicorn): typed request bodies give the `/v1` routes
their checks and an OpenAPI description (`/openapi.json`, browsable at `/docs`) from one declaration.

- `{url_root}/models`, `/health`, `/translate` answer as OpenNMT-py 3.5.1's `onmt_server` does
  (`onmt/bin/server.py`), so its clients work unchanged: `POST /translate` takes
  `[{"src": "...", "id": 100}, ...]` (the first item's id picks the model) and answers a list indexed by
  n-best rank, each a list over the inputs of `{"src", "tgt", "n_best", "pred_score"}` (with `align`
  and `align_score` when the model's conf has `report_align`).
- `/v1/models`, `/v1/models/{id}` (the card), `/v1/translate` (n-best, scores, attention and pieces),
  `/v1/score` (forced decoding of given translations), `/v1/health`.

Every refusal is `{"error": "<one line>", "status": "error"}` with its status: 400 a body that is not
JSON (or not UTF-8), 404 no such model, 413 over a size limit (body bytes, sentences, characters of one
sentence), 422 a body of the wrong shape or a request the model refuses (the API's one-line reason, e.g.
scoring with an ensemble); 500 only for a fault of ours, logged. No traceback reaches a client.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..api import Attention, Found
from ..errors import UserError
from ..vocab.pieces import word_of_piece
from .hosting import HostedModel
from .limits import Limits

LOG = logging.getLogger("seq2seq.serve")
STATIC = resources.files("seq2seq_attn.serving") / "static"


class Refusal(Exception):
    """A request refused with `status` and a one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": " ".join(message.split()), "status": "error"}, status_code=status)


# --- request bodies -------------------------------------------------------------------------------------


class OpenNMTItem(BaseModel):
    """One input of OpenNMT-py's `/translate`; other keys are accepted and ignored, as there."""

    model_config = ConfigDict(extra="allow")
    src: str
    id: int | None = None


class TranslateRequest(BaseModel):
    model: int | None = Field(None, description="The model's id (optional when one model is hosted).")
    sentences: list[str] = Field(description="Raw source sentences, one translation each.")
    nbest: int = Field(1, ge=1, description="Candidates per sentence, best first (a beam of at least n).")
    attention: bool = Field(False, description="Return the best candidate's attention and pieces.")


class ScoreRequest(BaseModel):
    model: int | None = None
    sources: list[str]
    targets: list[str] = Field(description="One given translation per source.")


# --- answers ----------------------------------------------------------------------------------------------


def attention_json(attention: Attention | None) -> dict[str, Any] | None:
    if attention is None:
        return None
    return {
        "source": attention.source,
        "target": attention.target,
        "weights": [[round(float(w), 5) for w in row] for row in attention.weights],
    }


def found_json(source: str, found: Found) -> dict[str, Any]:
    return {
        "source": source,
        "candidates": [{"text": c.text, "score": c.score, "log_prob": c.log_prob} for c in found.candidates],
        "attention": attention_json(found.attention),
    }


def word_alignment(attention: Attention) -> tuple[str, str]:
    """OpenNMT-py's `align` and `align_score` of a translation, over whitespace words: `i-j` pairs
    (source word i, target word j), each target word linked to the source word of its most attended
    piece, sorted by source then target; and `j-score` (that piece's weight) for each target word."""
    source_words = word_of_piece(attention.source[:-1])  # the last column is the source </s>
    target_words = word_of_piece(attention.target[:-1])
    best: dict[int, tuple[float, int]] = {}
    for row, word in enumerate(target_words):
        weights = attention.weights[row, : len(source_words)]
        column = int(weights.argmax())
        if word not in best or weights[column] > best[word][0]:
            best[word] = (float(weights[column]), source_words[column])
    pairs = sorted((source, target) for target, (_, source) in best.items())
    return (
        " ".join(f"{i}-{j}" for i, j in pairs),
        " ".join(f"{j}-{score:.5f}" for j, (score, _) in sorted(best.items())),
    )


# --- the application ----------------------------------------------------------------------------------------


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
    app.state.hosted = hosted
    app.add_middleware(BodyGuard, limit=limits.max_body_bytes)
    url_root = "/" + url_root.strip("/")

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

    def pick(model_id: int | None) -> HostedModel:
        if model_id is None and len(hosted) == 1:
            return next(iter(hosted.values()))
        if model_id not in hosted:
            raise Refusal(404, f"No such model '{model_id}' (the models: {', '.join(map(str, hosted))})")
        return hosted[model_id]

    def check_sentences(sentences: Sequence[str], what: str = "sentences") -> None:
        if len(sentences) > limits.max_sentences:
            raise Refusal(413, f"{len(sentences)} {what}: at most {limits.max_sentences} per request")
        for n, sentence in enumerate(sentences):
            if len(sentence) > limits.max_chars:
                raise Refusal(413, f"{what}[{n}]: {len(sentence)} characters, at most {limits.max_chars}")

    def check_nbest(n: int) -> None:
        if n > limits.max_nbest:
            raise Refusal(413, f"nbest {n}: at most {limits.max_nbest}")

    # OpenNMT-py's routes ------------------------------------------------------------------------------------

    @app.get(f"{url_root}/models", tags=["OpenNMT-py"])
    async def onmt_models() -> list[dict[str, Any]]:
        return [model.opennmt_entry() for model in hosted.values()]

    @app.get(f"{url_root}/health", tags=["OpenNMT-py"])
    async def onmt_health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post(f"{url_root}/translate", tags=["OpenNMT-py"])
    async def onmt_translate(inputs: list[OpenNMTItem]) -> list[list[dict[str, Any]]]:
        if not inputs:
            raise Refusal(422, 'body: expected a list of at least one {"src": ...}')
        sources = [item.src for item in inputs]
        check_sentences(sources, "inputs")
        model = pick(inputs[0].id)
        n = model.model.decode.nbest
        found = await model.translate(sources, n, attention=model.spec.report_align)
        ranks: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        for source, result in zip(sources, found, strict=True):
            for rank in range(n):
                candidate = result.candidates[rank] if rank < len(result.candidates) else None
                answer = {
                    "src": source,
                    "tgt": candidate.text if candidate else "",
                    "n_best": n,
                    "pred_score": candidate.score if candidate else 0,
                }
                if model.spec.report_align and rank == 0 and result.attention is not None:
                    align, scores = word_alignment(result.attention)
                    answer |= {"align": [align], "align_score": [scores]}
                ranks[rank].append(answer)
        return ranks

    # our own API ------------------------------------------------------------------------------------------

    @app.get("/v1/health", tags=["v1"])
    async def health() -> dict[str, Any]:
        return {"status": "ok", "version": __version__, "models": list(hosted)}

    @app.get("/v1/models", tags=["v1"])
    async def models() -> list[dict[str, Any]]:
        return [model.summary() for model in hosted.values()]

    @app.get("/v1/models/{model_id}", tags=["v1"])
    async def card(model_id: int) -> dict[str, Any]:
        return pick(model_id).card()

    @app.post("/v1/translate", tags=["v1"])
    async def translate(request: TranslateRequest) -> dict[str, Any]:
        check_sentences(request.sentences)
        check_nbest(request.nbest)
        model = pick(request.model)
        found = await model.translate(request.sentences, request.nbest, request.attention)
        return {
            "model": model.id,
            "translations": [found_json(s, f) for s, f in zip(request.sentences, found, strict=True)],
        }

    @app.post("/v1/score", tags=["v1"])
    async def score(request: ScoreRequest) -> dict[str, Any]:
        check_sentences(request.sources, "sources")
        check_sentences(request.targets, "targets")
        model = pick(request.model)
        scores = await model.score(request.sources, request.targets)
        return {
            "model": model.id,
            "scores": [
                {
                    "log_prob": s.log_prob,
                    "pieces": s.pieces,
                    "mean": s.mean,
                    "piece_log_probs": s.piece_log_probs,
                    "source_cut": s.src_cut,
                }
                for s in scores
            ],
        }

    # the page ---------------------------------------------------------------------------------------------

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(str(STATIC / "index.html"))

    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    return app
