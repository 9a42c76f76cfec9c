"""The MCP server over Streamable HTTP on 127.0.0.1 only, behind a bearer token from the
environment; every JSON or event-stream body it sends is escaped as `json_text` writes JSON."""

from __future__ import annotations

import codecs
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio

from custody_app.domain.escaping import escape_json
from custody_app.interfaces.mcp.guard import INVALID_REQUEST, MAX_MESSAGE_BYTES, refusal
from custody_app.interfaces.mcp.server import build_server
from custody_app.interfaces.mcp.tools import MemoryTools

LOOPBACK = "127.0.0.1"
# Seconds a POST body may take to arrive in full (a loopback client sends 4 MiB in milliseconds).
BODY_SECONDS = 5.0
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BearerGate:
    """Refuses every HTTP request without `Authorization: Bearer <token>` (401, nothing run)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            send = EscapingSend(send)
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await _unauthorized(send)
                return
            if scope.get("method") == "POST":
                await self._guarded(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the body (at most MAX_MESSAGE_BYTES) and check it before the SDK parses it."""
        chunks: list[bytes] = []
        size, more, truncated = 0, True, False
        # A body that never ends (a chunked stream left open, a trickle) would hold the
        # connection and its buffer forever: it gets a deadline and an answer.
        with anyio.move_on_after(BODY_SECONDS) as timer:
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                chunk = message.get("body", b"")
                size += len(chunk)
                more = bool(message.get("more_body"))
                if size > MAX_MESSAGE_BYTES:
                    truncated = True
                    continue  # drain without keeping
                chunks.append(chunk)
        if timer.cancelled_caught:
            late = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message":
                    f"the request body did not arrive within {BODY_SECONDS:g} seconds; nothing "
                    "was run"}}
            await _reply(send, 408, json.dumps(late).encode())
            return
        body = b"".join(chunks)
        error = refusal(body, truncated=truncated)
        if error is not None:
            await _reply(send, 413 if truncated else 400, json.dumps(error).encode())
            return
        sent = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class EscapingSend:
    """The ASGI `send` of one response, with the characters the SDK's serialiser leaves raw in
    JSON strings (U+2028, U+2029, DEL, C1, bidi) written as `\\uNNNN` in JSON and event-stream
    bodies. A body of known length is held until complete, to restate its Content-Length; a
    stream is escaped chunk by chunk (a character split between chunks is held for the next)."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.mode = "pass"
        self.start: MutableMapping[str, Any] | None = None
        self.held: list[bytes] = []
        self.decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = dict(message.get("headers") or [])
            kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if kind in (b"application/json", b"text/event-stream"):
                self.mode = "hold" if b"content-length" in headers else "stream"
            if self.mode == "hold":
                self.start = message
                return
        elif message["type"] == "http.response.body" and self.mode != "pass":
            more = bool(message.get("more_body"))
            text = self.decoder.decode(message.get("body", b""), final=not more)
            body = escape_json(text).encode("utf-8", "surrogateescape")
            if self.mode == "hold":
                self.held.append(body)
                if more:
                    return
                await self._release()
                return
            message = {**message, "body": body}
        await self.send(message)

    async def _release(self) -> None:
        assert self.start is not None
        body = b"".join(self.held)
        headers = [(k, v) for k, v in self.start.get("headers") or [] if k.lower() != b"content-length"]
        await self.send({**self.start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await self.send({"type": "http.response.body", "body": body, "more_body": False})


async def _reply(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


async def _unauthorized(send: Send) -> None:
    body = json.dumps({"error": "unauthorized",
                       "message": "a valid bearer token is required"}).encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="custody-app"')]})
    await send({"type": "http.response.body", "body": body})


def http_app(tools: MemoryTools, token: str) -> ASGIApp:
    """The Streamable HTTP app (endpoint /mcp) behind the bearer gate."""
    server = build_server(tools)
    app: ASGIApp = server.streamable_http_app(host=LOOPBACK)
    return BearerGate(app, token)


def serve_http(tools: MemoryTools, port: int, token: str) -> None:
    """Serve until interrupted, bound to 127.0.0.1 (never another interface)."""
    import uvicorn

    uvicorn.run(http_app(tools, token), host=LOOPBACK, port=port, log_level="warning")
