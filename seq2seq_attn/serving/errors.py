"""How a refused request is answered: `{"error": "<one line>", "status": "error"}` with its status, from
every route and every middleware alike, and the one text type request bodies hold.

400 a body that is not JSON, not UTF-8, or holds a lone surrogate; 404 no such model; 413 over a limit
(serving/limits.py); 422 a body of the wrong shape or a request the model refuses (the API's one-line
reason, e.g. scoring with an ensemble); 500 only for a fault of ours, logged with its traceback. No
traceback reaches a client, and a refusal of a malformed body is one line in the server's log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Annotated

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator
from pydantic_core import PydanticCustomError
from starlette.exceptions import HTTPException

from ..errors import UserError
from .limits import Refusal

LOG = logging.getLogger("seq2seq.serve")
LONE_SURROGATE = "lone_surrogate"  # the validation error of `Text`


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": " ".join(message.split()), "status": "error"}, status_code=status, headers=headers
    )


def _is_text(value: str) -> str:
    """JSON's `\\ud800` escape decodes to half of a UTF-16 pair: a str that no UTF-8 encoder (the
    tokenizer's, the answer's) takes, so it is refused where the body is read."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PydanticCustomError(LONE_SURROGATE, "a lone surrogate (U+D800 to U+DFFF) is not text") from None
    return value


Text = Annotated[str, AfterValidator(_is_text)]  # a str that can be encoded as UTF-8


def refused(status: int, message: str) -> JSONResponse:
    """A malformed body's answer, and its one line in the log."""
    LOG.warning("refused: %s", message)
    return error_response(status, message)


def add_error_handlers(app: FastAPI) -> None:
    """Every refusal as `{"error", "status"}` (module docstring); a fault of ours logged, answered 500."""

    @app.exception_handler(Refusal)
    async def refusal(_: Request, error: Refusal) -> JSONResponse:
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
        if first.get("type") == LONE_SURROGATE:
            return refused(400, f"{where}: {first['msg']}")
        return error_response(422, f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, error: HTTPException) -> JSONResponse:
        return error_response(error.status_code, str(error.detail), error.headers)  # 405's Allow

    @app.exception_handler(Exception)
    async def fault(_: Request, error: Exception) -> JSONResponse:
        LOG.exception("internal error")
        return error_response(500, f"internal error: {type(error).__name__}")
