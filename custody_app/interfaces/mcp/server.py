"""The ledger as an MCP server (official `mcp` SDK, low-level Server): one session per connection."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from custody_app.domain.errors import LedgerError
from custody_app.domain.escaping import json_text
from custody_app.interfaces.mcp.guard import out_of_range
from custody_app.interfaces.mcp.sessions import AgentRun, HttpSessions
from custody_app.interfaces.mcp.tools import MemoryTools

SERVER_NAME = "custody-app"
INSTRUCTIONS = (
    "Governed memory. Write what you learn with memory_write (always give a cause); read what "
    "is believed with memory_read or memory_recall; correct a fact by writing its replacement "
    "with `supersedes`, or retract it. Your writes may be quarantined until a person reviews "
    "them: a quarantined fact is not returned by reads or recall until it is confirmed "
    "(memory_pending lists yours still waiting). Every read is recorded against this "
    "connection's session.")


def new_session_id() -> str:
    return f"mcp-{uuid.uuid4()}"


@dataclass
class ConnectionState:
    """What one connection (one agent run) carries. Streamable HTTP serves many connections
    from one lifespan: there the session id the server issued at initialize picks the run
    (`http`); requests outside any session (the sessionless 2026 protocol) share one run."""

    tools: MemoryTools
    http: HttpSessions | None = None
    run: AgentRun = field(init=False)

    def __post_init__(self) -> None:
        self.run = self.new_run()

    def new_run(self) -> AgentRun:
        return AgentRun(new_session_id(), self.tools.now())

    def run_for(self, transport_session: str | None) -> AgentRun:
        if self.http is None or transport_session is None:
            # stdio: the one connection. HTTP outside any session (the sessionless 2026
            # protocol): the server's one agent identity, one run, so that blast radius still
            # links its reads to its later writes (a run per request would cut them apart).
            return self.run
        run = self.http.run(transport_session)
        if run is None:  # the HTTP gate refuses unknown ids before: this is a race with expiry
            raise MCPError(code=types.INVALID_REQUEST, message="session not found: it expired "
                           "or was never issued; initialize a new one")
        return run


def _transport_session(ctx: ServerRequestContext[ConnectionState, Any]) -> str | None:
    """The Mcp-Session-Id of a streamable HTTP request (None on stdio and in-process)."""
    headers = getattr(ctx.request, "headers", None)
    value = headers.get("mcp-session-id") if headers is not None else None
    return value if isinstance(value, str) and value else None


def tool_error(exc: LedgerError) -> types.CallToolResult:
    """A refusal as an MCP tool error: the ledger's stable code and its one-sentence message."""
    error = exc.to_json()
    return types.CallToolResult(
        content=[types.TextContent(text=f"{exc.code}: {exc.message}")],
        structured_content={"error": error}, is_error=True)


def build_server(tools: MemoryTools, http: HttpSessions | None = None) -> Server[ConnectionState]:
    """An MCP server exposing `tools`; each connection gets a fresh `mcp-<uuid>` session (over
    HTTP, each session the server issues: `http`)."""

    @asynccontextmanager
    async def lifespan(_server: Server[ConnectionState]) -> AsyncIterator[ConnectionState]:
        yield ConnectionState(tools, http)

    listing = [
        types.Tool(
            name=spec.name, description=spec.description, input_schema=spec.input_schema(),
            annotations=types.ToolAnnotations(
                read_only_hint=spec.read_only, destructive_hint=False, open_world_hint=False))
        for spec in tools.specs()]

    async def list_tools(ctx: ServerRequestContext[ConnectionState, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listing)

    async def call_tool(ctx: ServerRequestContext[ConnectionState, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in {t.name for t in listing}:
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown tool {params.name!r}")
        where = out_of_range(params.arguments)
        if where is not None:
            raise MCPError(code=types.INVALID_PARAMS, message=(
                f"{where}: the tools accept integers within +/-(2^53 - 1) and finite numbers "
                "only (RFC 8785); nothing was run"))
        run = ctx.lifespan_context.run_for(_transport_session(ctx))
        try:
            result = tools.call(params.name, params.arguments, run.session, started=run.started)
        except LedgerError as exc:
            return tool_error(exc)
        data = result.model_dump(mode="json")
        return types.CallToolResult(
            content=[types.TextContent(text=json_text(data))],
            structured_content=data)

    return Server(SERVER_NAME, version=_version(), instructions=INSTRUCTIONS,
                  lifespan=lifespan, on_list_tools=list_tools, on_call_tool=call_tool)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("custody-app")
    except PackageNotFoundError:
        return "0"


async def serve_stdio(tools: MemoryTools) -> None:
    """Serve one connection over this process's stdin/stdout until the client closes it; each
    line is guarded (size, depth) before the SDK parses it."""
    from custody_app.interfaces.mcp.stdio import guarded_stdio

    server = build_server(tools)
    async with guarded_stdio() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
