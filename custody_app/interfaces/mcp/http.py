"""The MCP server over Streamable HTTP on 127.0.0.1 only, behind a bearer token from the environment."""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from custody_app.interfaces.mcp.guard import MAX_MESSAGE_BYTES, refusal
from custody_app.interfaces.mcp.server import build_server
from custody_app.interfaces.mcp.tools import MemoryTools

LOOPBACK = "127.0.0.1"
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
