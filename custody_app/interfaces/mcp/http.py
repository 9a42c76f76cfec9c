"""The MCP server over Streamable HTTP on 127.0.0.1 only, behind a bearer token from the
environment; every JSON or event-stream body it sends is escaped as `json_text` writes JSON."""

from __future__ import annotations

import asyncio
import codecs
import hmac
import json
import signal
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import anyio
import uvicorn
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from custody_app.domain.escaping import escape_json
from custody_app.interfaces.mcp.guard import INVALID_REQUEST, MAX_MESSAGE_BYTES, refusal
from custody_app.interfaces.mcp.server import build_server, new_session_id
from custody_app.interfaces.mcp.sessions import DEFAULT_IDLE_SECONDS, AgentRun, HttpSessions
from custody_app.interfaces.mcp.tools import MemoryTools

LOOPBACK = "127.0.0.1"
# Seconds a POST body may take to arrive in full (a loopback client sends 4 MiB in milliseconds).
BODY_SECONDS = 5.0
# After SIGTERM: how long requests in flight may take to finish before they are cut.
GRACE_SECONDS = 3
SESSION_HEADER = b"mcp-session-id"
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BearerGate:
    """Refuses every HTTP request without `Authorization: Bearer <token>` (401, nothing run);
    answers GET and other methods 405 (the server offers no event stream to GET); refuses a
    session id the server did not issue, or one expired or ended (404); guards a POST body
    before the SDK parses it; and registers the session the SDK issues at initialize."""

    def __init__(self, app: ASGIApp, token: str, sessions: HttpSessions | None = None) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = EscapingSend(send)
        headers = dict(scope.get("headers") or [])
        if not hmac.compare_digest(headers.get(b"authorization", b""), self._expected):
            await _unauthorized(send)
            return
        method = scope.get("method")
        if method not in ("POST", "DELETE"):
            await _reply(send, 405, _error_body(INVALID_REQUEST, f"{method} is not served here: "
                         "POST a JSON-RPC message, or DELETE to end a session"),
                         [(b"allow", b"POST, DELETE")])
            return
        raw_id = headers.get(SESSION_HEADER)
        session_id = raw_id.decode("latin-1") if raw_id is not None else None
        if self.sessions is None:
            await self._pass(scope, receive, send)
            return
        if session_id is None:
            self.sessions.expire()  # every request prunes the table, not only a session's own
            await self._pass(scope, receive, _Issued(send, self.sessions))
            return
        if not self.sessions.known(session_id):
            await _reply(send, 404, _error_body(INVALID_REQUEST, "session not found: this "
                         "server did not issue that Mcp-Session-Id, or it expired or ended; "
                         "initialize a new session"))
            return
        version = headers.get(b"mcp-protocol-version", b"").decode("latin-1")
        if version and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            # The stateless protocol has no sessions: an issued id sent on it would join that
            # session from another client's requests.
            await _reply(send, 400, _error_body(INVALID_REQUEST, f"protocol {version[:40]!r} "
                         "has no sessions: send no Mcp-Session-Id with it"))
            return
        self.sessions.begin(session_id)
        try:
            await self._pass(scope, receive, send)
        finally:
            self.sessions.finish(session_id)
            if method == "DELETE":
                self.sessions.end(session_id)

    async def _pass(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") == "POST":
            await self._guarded(scope, receive, send)
        else:
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
        refused = refusal(body, truncated=truncated)
        if refused is not None:
            await _reply(send, refused.status, refused.text().encode())
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


class _Issued:
    """The `send` of a request outside any session: a session id the SDK's reply carries (a
    successful initialize) is registered as issued, with a ledger run of its own."""

    def __init__(self, send: Send, sessions: HttpSessions) -> None:
        self.send = send
        self.sessions = sessions

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start" and message.get("status") == 200:
            issued = dict(message.get("headers") or []).get(SESSION_HEADER)
            if issued:
                self.sessions.issue(issued.decode("latin-1"))
        await self.send(message)


def _error_body(code: int, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": None,
                       "error": {"code": code, "message": message}}).encode()


async def _reply(send: Send, status: int, body: bytes,
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


async def _unauthorized(send: Send) -> None:
    body = json.dumps({"error": "unauthorized",
                       "message": "a valid bearer token is required"}).encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="custody-app"')]})
    await send({"type": "http.response.body", "body": body})


def http_app(tools: MemoryTools, token: str,
             idle_seconds: float = DEFAULT_IDLE_SECONDS) -> ASGIApp:
    """The Streamable HTTP app (endpoint /mcp) behind the bearer gate, with the server's own
    sessions (expiring after `idle_seconds` without a request, here and in the SDK)."""
    sessions = HttpSessions(lambda: AgentRun(new_session_id(), tools.now()), idle_seconds)
    server = build_server(tools, sessions)
    # JSON replies, not event streams: the tools send nothing before their result, and an
    # event stream is ended at once on SIGTERM (sse-starlette), losing a reply in flight.
    app: ASGIApp = server.streamable_http_app(host=LOOPBACK, session_idle_timeout=idle_seconds,
                                              json_response=True)
    return BearerGate(app, token, sessions)


class _Server(uvicorn.Server):
    """uvicorn's server without its signal capture, which raises the signal again once the
    server has stopped (the process would end by SIGTERM, not exit 0)."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _serve(app: ASGIApp, port: int) -> None:
    config = uvicorn.Config(app, host=LOOPBACK, port=port, log_level="warning",
                            timeout_graceful_shutdown=GRACE_SECONDS)
    server = _Server(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.handle_exit, sig, None)
    await server.serve()


def serve_http(tools: MemoryTools, port: int, token: str,
               idle_seconds: float = DEFAULT_IDLE_SECONDS) -> None:
    """Serve until SIGTERM or SIGINT, bound to 127.0.0.1 (never another interface). On the
    signal no new connection is taken; requests in flight finish, cut after GRACE_SECONDS;
    then the process returns (exit 0)."""
    asyncio.run(_serve(http_app(tools, token, idle_seconds), port))
