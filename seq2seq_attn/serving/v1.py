"""`/v1`, the API of our own: the Python API's answers over HTTP, described by OpenAPI (`/openapi.json`,
browsable at `/docs`) from the typed request bodies below.

`/v1/models`, `/v1/models/{id}` (the card), `/v1/translate` (n-best, scores, attention and pieces),
`/v1/score` (forced decoding of given translations), `/v1/health`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from .. import __version__
from ..api import Attention, Found
from .errors import Text
from .hosting import find
from .limits import Refusal, check_nbest, check_sentences, check_work
from .middleware import unless_gone

router = APIRouter(prefix="/v1", tags=["v1"])


class TranslateRequest(BaseModel):
    model: int | None = Field(None, description="The model's id (optional when one model is hosted).")
    sentences: list[Text] = Field(description="Raw source sentences, one translation each.")
    nbest: int = Field(1, ge=1, description="Candidates per sentence, best first (a beam of at least n).")
    attention: bool = Field(False, description="Return the best candidate's attention and pieces.")


class ScoreRequest(BaseModel):
    model: int | None = None
    sources: list[Text]
    targets: list[Text] = Field(description="One given translation per source.")


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


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    return {"status": "ok", "version": __version__, "models": list(request.app.state.hosted)}


@router.get("/models")
async def models(request: Request) -> list[dict[str, Any]]:
    return [model.summary() for model in request.app.state.hosted.values()]


@router.get("/models/{model_id}")
async def card(request: Request, model_id: int) -> dict[str, Any]:
    return find(request.app.state.hosted, model_id).card()


@router.post("/translate")
async def translate(request: Request, body: TranslateRequest) -> dict[str, Any]:
    check_sentences(request.app.state.limits, body.sentences)
    check_nbest(request.app.state.limits, body.nbest)
    check_work(request.app.state.limits, body.sentences, body.nbest, body.attention)
    model = find(request.app.state.hosted, body.model)
    if body.attention and not model.attends:
        raise Refusal(422, f"model {model.id} has no attention (model.attention: none): ask without it")
    found = await unless_gone(request, model.translate(body.sentences, body.nbest, body.attention))
    return {
        "model": model.id,
        "translations": [found_json(s, f) for s, f in zip(body.sentences, found, strict=True)],
    }


@router.post("/score")
async def score(request: Request, body: ScoreRequest) -> dict[str, Any]:
    check_sentences(request.app.state.limits, body.sources, "sources")
    check_sentences(request.app.state.limits, body.targets, "targets")
    check_work(request.app.state.limits, [*body.sources, *body.targets])
    model = find(request.app.state.hosted, body.model)
    scores = await unless_gone(request, model.score(body.sources, body.targets))
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
