"""The ASGI middleware in front of the routes: what every request goes through before a route sees it.

- `HeadAsGet`: every GET route answers HEAD too (the GET's headers, no body), as HTTP asks.
- `BodyGuard`: the body's size limit, and JSON whatever the Content-Type says.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_response
from .limits import Refusal


class HeadAsGet:
    """ASGI middleware: a HEAD request is answered as its GET without the body, and a 405 that allows
    GET says it allows HEAD too (FastAPI's routes answer only the methods they are declared with)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        head = scope["method"] == "HEAD"

        async def sent(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                message = {**message, "headers": [_allow_head(*h) for h in message.get("headers", [])]}
            elif message["type"] == "http.response.body" and head:
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"} if head else scope, receive, sent)


def _allow_head(name: bytes, value: bytes) -> tuple[bytes, bytes]:
    if name.lower() == b"allow" and b"GET" in value.split(b", ") and b"HEAD" not in value:
        return name, value + b", HEAD"
    return name, value


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
