"""The README walkthrough with the real TUI: an agent writes through the MCP server, the write
appears on the open quarantine screen, a reviewer approves it there, the agent recalls it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp import Client
from textual.widgets import DataTable

from custody_app.ledger import Ledger
from custody_app.mcp_server import build_server
from custody_app.mcp_tools import MemoryTools
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


async def test_a_write_through_the_server_appears_on_the_open_quarantine_screen(
        tmp_path: Path) -> None:
    story = build_story(tmp_path / "shared.db")
    app = app_on(story.path, reviewer="user:dana", watch=True)
    # The server has its own connection to the same file, as a separate `serve` process would.
    with Ledger.open(story.path) as server_ledger:
        tools = MemoryTools(server_ledger, AGENT)
        async with app.run_test(size=(180, 40), notifications=True) as pilot, \
                Client(build_server(tools)) as agent:
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
