"""The walkthrough of docs/mcp.md with the real TUI: an agent writes through the MCP server, the write
appears on the open quarantine screen, a reviewer approves it there, the agent recalls it."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from textual.widgets import DataTable

from custody_app.interfaces.mcp.server import build_server
from custody_app.interfaces.mcp.tools import MemoryTools
from custody_app.ledger.facade import Ledger
from screens.reason import ReasonDialog
from screens.review import ReviewScreen
from tests.tuikit import app_on, build_story, idle, keys

AGENT = "agent:mcp-bot"


async def until(pilot: Any, check: Callable[[], bool], seconds: float = 20.0) -> bool:
    """Poll while the app keeps running, until `check()` holds or time runs out."""
    for _ in range(int(seconds / 0.1)):
        if check():
            return True
        await asyncio.sleep(0.1)
        await pilot.pause()
    return check()


async def _tool(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def _server(where: str, path: Path) -> tuple[AbstractContextManager[Any], Callable[[Any], Any]]:
    """The server on its own connection to the file: in this process, or `custody-app serve`
    as a real subprocess spoken to over stdio."""
    if where == "in-process":
        return Ledger.open(path), lambda led: build_server(MemoryTools(led, AGENT))
    cli = str(Path(sys.executable).parent / "custody-app")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    params = StdioServerParameters(command=cli, args=["serve", "--create", "--ledger", str(path),
                                                      "--agent", AGENT], env=env)
    return nullcontext(), lambda _: params


@pytest.mark.parametrize("where", ["in-process", "serve-subprocess"])
async def test_a_write_through_the_server_appears_on_the_open_quarantine_screen(
        tmp_path: Path, where: str) -> None:
    story = build_story(tmp_path / "shared.db")
    app = app_on(story.path, reviewer="user:dana", watch=True)
    opened, target = _server(where, story.path)
    with opened as server_ledger:
        async with app.run_test(size=(180, 40), notifications=True) as pilot, \
                Client(target(server_ledger)) as agent:
            await pilot.press("2")
            await idle(pilot)
            assert isinstance(app.screen, ReviewScreen)
            queue = app.screen.query_one("#queue", DataTable)
            assert keys(queue) == [story["claim"], story["claim2"]]

            written = await _tool(agent, "memory_write", subject="acct:3001", predicate="plan",
                                  value="enterprise trial",
                                  cause={"kind": "message", "ref": "chat-118"})
            fact = written["fact_id"]
            assert written["status"] == "quarantined"
            assert await until(pilot, lambda: fact in keys(queue)), keys(queue)
            row = [str(c) for c in queue.get_row(fact)]
            assert AGENT in row and "message:chat-118" in row
            recalled = await _tool(agent, "memory_recall", query="enterprise trial")
            assert fact not in [h["fact"]["fact_id"] for h in recalled["results"]]

            queue.move_cursor(row=keys(queue).index(fact))
            await pilot.press("a")
            await pilot.pause()
            assert isinstance(app.screen, ReasonDialog)
            await pilot.press(*"called the customer", "enter")
            await idle(pilot)
            assert await until(pilot, lambda: fact not in keys(queue))

            recalled = await _tool(agent, "memory_recall", query="enterprise trial")
            assert [h["fact"]["fact_id"] for h in recalled["results"]][0] == fact
            why = await _tool(agent, "memory_why", fact_id=fact)
            assert [(r["kind"], r["actor"], r["reason"]) for r in why["reviews"]] == [
                ("confirm", "user:dana", "called the customer")]
            assert why["fact"]["provenance"] == "attested"
