"""OpenNMT-py's REST routes, answered as OpenNMT-py 3.5.1's `onmt_server` answers them
(`onmt/bin/server.py`), so its clients work unchanged: `GET {url_root}/models`, `GET {url_root}/health`
and `POST {url_root}/translate`, which takes `[{"src": "...", "id": 100}, ...]` (the first item's id picks
the model) and answers a list indexed by n-best rank, each a list over the inputs of
`{"src", "tgt", "n_best", "pred_score"}` (with `align` and `align_score` when the model's conf has
`report_align`). As there, a translation keeps its source's leading and trailing whitespace, and a
request without an id asks for model 0 (with one model hosted, the id may be left out).

Its model-management routes (`/clone_model/ID`, `/unload_model/ID`, `/to_cpu/ID`, `/to_gpu/ID`) answer 501:
our models are loaded once, when the server starts, and a client cannot load, clone or move them (nor
exhaust the server's memory that way).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from ..api import Attention
from ..vocab.pieces import word_of_piece
from .errors import Text
from .hosting import find
from .limits import Refusal, check_sentences, check_work
from .middleware import unless_gone

router = APIRouter(tags=["OpenNMT-py"])
DEFAULT_ID = 0  # the model OpenNMT-py's server picks for a request without an id
MODEL_MANAGEMENT = [("POST", "clone_model"), ("GET", "unload_model"), ("GET", "to_cpu"), ("GET", "to_gpu")]
NOT_SUPPORTED = (
    "not supported: models are loaded once, when `seq2seq serve` starts (--model, --conf); start a server "
    "with other settings instead"
)


class OpenNMTItem(BaseModel):
    """One input of OpenNMT-py's `/translate`; other keys are accepted and ignored, as there."""

    model_config = ConfigDict(extra="allow")
    src: Text
    id: int | None = None


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


def outer_whitespace(text: str) -> tuple[str, str]:
    """The whitespace `text` begins and ends with, found as OpenNMT-py finds it (`re.search(r"^\\s+")`,
    `r"\\s+$"`; a blank text is both)."""
    head, tail = re.search(r"^\s+", text), re.search(r"\s+$", text)
    return (head.group() if head else "", tail.group() if tail else "")


@router.get("/models")
async def onmt_models(request: Request) -> list[dict[str, Any]]:
    return [model.opennmt_entry() for model in request.app.state.hosted.values()]


@router.get("/health")
async def onmt_health() -> dict[str, str]:
    return {"status": "ok"}


@router.post("/translate")
async def onmt_translate(request: Request, inputs: list[OpenNMTItem]) -> list[list[dict[str, Any]]]:
    if not inputs:
        raise Refusal(422, 'body: expected a list of at least one {"src": ...}')
    sources = [item.src for item in inputs]
    check_sentences(request.app.state.limits, sources, "inputs")
    hosted = request.app.state.hosted
    model = find(hosted, inputs[0].id if inputs[0].id is not None or len(hosted) == 1 else DEFAULT_ID)
    n = model.model.decode.nbest
    check_work(request.app.state.limits, sources, n, model.spec.report_align)
    found = await unless_gone(request, model.translate(sources, n, attention=model.spec.report_align))
    ranks: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    for source, result in zip(sources, found, strict=True):
        head, tail = outer_whitespace(source)
        for rank in range(n):
            candidate = result.candidates[rank] if rank < len(result.candidates) else None
            answer = {
                "src": source,
                "tgt": head + (candidate.text if candidate else "") + tail,
                "n_best": n,
                "pred_score": candidate.score if candidate else 0,
            }
            if model.spec.report_align and rank == 0 and result.attention is not None:
                align, scores = word_alignment(result.attention)
                answer |= {"align": [align], "align_score": [scores]}
            ranks[rank].append(answer)
    return ranks


def _not_supported(action: str) -> Callable[[int], Awaitable[None]]:
    async def refuse(model_id: int) -> None:
        raise Refusal(501, f"{action}: {NOT_SUPPORTED}")

    return refuse


for _method, _action in MODEL_MANAGEMENT:
    router.add_api_route(
        f"/{_action}/{{model_id}}",
        _not_supported(_action),
        methods=[_method],
        name=_action,
        summary=f"{_action}: answered 501 (module docstring)",
        responses={501: {"description": NOT_SUPPORTED}},
    )
