"""The ASGI middleware in front of the routes: what every request goes through before a route sees it.

- `HostGuard`: Starlette's `TrustedHostMiddleware` with `allowed_hosts`, its refusal answered in JSON as
  every other: only the server's own names are answered, so a page elsewhere whose name was rebound to
  the server's address (DNS rebinding) reaches nothing.
- `CrossSiteGuard`: a POST from a page elsewhere (its `Origin` or `Sec-Fetch-Site` says so) is refused:
  the body is read as JSON whatever its Content-Type, so a page's `text/plain` POST, which browsers send
  without asking the server first, would otherwise translate.
- `HeadAsGet`: every GET route answers HEAD too (the GET's headers, no body), as HTTP asks.
- `BodyGuard`: the body read whole before a route runs, within its size limit and its timeout, as JSON
  whatever the Content-Type says.

And for the routes: `unless_gone`, a route's work dropped when its client leaves (uvicorn goes on running
a route whose client has gone; it only tells the application, by `http.disconnect`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TypeVar

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_response
from .limits import Refusal

T = TypeVar("T")

LOCAL_NAMES = ["127.0.0.1", "localhost", "[::1]"]  # a server's names on its own machine
ANY_ADDRESS = {"0.0.0.0", "::", ""}  # binds that answer on every interface
SAME_SITE = ("same-origin", "none")  # the Sec-Fetch-Site values of the server's own page and of a user
CLOSE = {"connection": "close"}  # a body left unread: the connection cannot carry another request
ADMITTED = "seq2seq_attn.host_admitted"  # the scope's mark of a request whose Host HostGuard admitted
STOPPING = "the server is stopping"  # the answer to every request a stopping server cannot finish


def allowed_hosts(bind: str, named: Sequence[str]) -> tuple[list[str], str]:
    """The Host names a server bound to `bind` answers (`TrustedHostMiddleware`'s patterns: a name, or
    `*.example.com`, or `*` for any) and a warning for the user, or "": the local names, the bound
    address, and the names given (`--allowed-host`). Bound to every interface, a server has no name of its
    own to check against: without names given it answers any Host, and warns."""
    if "*" in named:
        return ["*"], ""
    if bind in ANY_ADDRESS and not named:
        return ["*"], (
            f"serve: bound to {bind or 'every address'} without --allowed-host, so any Host header is "
            "answered (a page elsewhere can reach the API by DNS rebinding): name the server's names with "
            "--allowed-host"
        )
    address = f"[{bind}]" if ":" in bind else bind
    own = [] if bind in ANY_ADDRESS or address in LOCAL_NAMES else [address]
    return [*LOCAL_NAMES, *own, *named], ""


class HostGuard:
    """ASGI middleware: Starlette's `TrustedHostMiddleware` decides which Host is the server's own; a
    request for any other is refused as every refusal of the server is, in JSON (Starlette's own answer
    is plain text)."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        self.app = app
        self.check = TrustedHostMiddleware(self._admit, allowed_hosts=list(allowed_hosts), www_redirect=False)

    async def _admit(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[ADMITTED] = True
        await self.app(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.check(scope, receive, send)
            return

        async def unless_refused(message: Message) -> None:
            if scope.get(ADMITTED):  # the application's answer; Starlette's refusal is replaced below
                await send(message)

        await self.check(scope, receive, unless_refused)
        if not scope.get(ADMITTED):
            await error_response(400, "invalid Host header")(scope, receive, send)


class CrossSiteGuard:
    """ASGI middleware: 403 for a request for work (any method but GET and HEAD) that a browser sent from
    a page of another origin: an `Origin` other than the server's own (scheme and Host), or a
    `Sec-Fetch-Site` other than `same-origin` or `none` (typed or bookmarked). Clients that are not
    browsers send neither, and are answered; a GET does no work and its answer is not readable from
    another origin, so a link elsewhere still opens the page."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD") and _cross_site(scope):
            await error_response(403, "cross-site request refused")(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _cross_site(scope: Scope) -> bool:
    headers = Headers(scope=scope)
    origin, fetch_site = headers.get("origin"), headers.get("sec-fetch-site")
    own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"
    return (origin is not None and origin.lower() != own.lower()) or fetch_site not in (None, *SAME_SITE)


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
    """ASGI middleware: the whole body is read before a route sees it, so that one over `limit` bytes is
    refused with 413 as soon as it passes the limit, whether it declared its length or came in chunks;
    one that does not arrive within `timeout` seconds gets 408, and one still arriving when the server
    stops (`stopping`) gets 503, both closing the connection. Every body is read as JSON whatever its
    Content-Type says, as OpenNMT-py's server reads it (`request.get_json(force=True)`: `curl -d` sends
    form encoding unless told otherwise)."""

    def __init__(self, app: ASGIApp, limit: int, timeout: float, stopping: asyncio.Event) -> None:
        self.app, self.limit, self.timeout, self.stopping = app, limit, timeout, stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        json_type = (b"content-type", b"application/json")
        scope = {**scope, "headers": [*(h for h in scope["headers"] if h[0] != b"content-type"), json_type]}
        if not declared.isdigit():
            await error_response(400, "bad Content-Length")(scope, receive, send)
            return
        body = b"" if int(declared) > self.limit else await self._read_in_time(receive)
        if isinstance(body, Refusal):
            await error_response(body.status, str(body), CLOSE)(scope, receive, send)
            return
        if body is None:  # the client left before its body was complete: nobody to answer
            return
        if int(declared) > self.limit or len(body) > self.limit:
            await error_response(413, f"request body over {self.limit} bytes", CLOSE)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read_in_time(self, receive: Receive) -> bytes | Refusal | None:
        """The body (`_read`), or the refusal of a body late or cut short by the server stopping."""
        read = asyncio.ensure_future(self._read(receive))
        stop = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait([read, stop], timeout=self.timeout, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if read.done():
            return read.result()
        read.cancel()
        if self.stopping.is_set():
            return Refusal(503, STOPPING)
        return Refusal(408, f"the body did not arrive within {self.timeout:g} s")

    async def _read(self, receive: Receive) -> bytes | None:
        """The body, or its first chunks once they pass the limit; None if the client disconnected."""
        body = bytearray()
        while len(body) <= self.limit:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        return bytes(body)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the body read, then what the client sends next (its disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


async def unless_gone(request: Request, work: Awaitable[T]) -> T:
    """The result of `work`, unless the client disconnects first: then `work` is cancelled (its waiting
    lines dropped, its search stopped) and the route answers 499 to nobody."""
    done = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnect(request.receive))
    try:
        await asyncio.wait([done, gone], return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not done.done():
        done.cancel()
        raise Refusal(499, "the client closed the connection")
    return done.result()


async def _disconnect(receive: Receive) -> None:
    """Return when the client disconnects (the body was read: nothing else can come)."""
    while (await receive())["type"] != "http.disconnect":
        pass
