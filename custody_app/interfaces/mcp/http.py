"""The MCP server over Streamable HTTP on 127.0.0.1 only, behind a bearer token from the environment."""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

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
        await self.app(scope, receive, send)


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
