"""Sealed free text in the terminal app's Fact screen (App.run_test) and through the MCP
server's tools (the SDK's client in-process): shown opened, and as erased after a forget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import Static

from custody_app.domain.sealed_text import ERASED_TEXT
from custody_app.interfaces.mcp.tools import MemoryTools
from custody_app.ledger.facade import Ledger
from screens.fact import FactScreen
from tests.test_mcp_server import call, connect
from tests.tuikit import app_on, idle


def _ledger(path: Path) -> tuple[str, str]:
    with Ledger.open(path) as led:
        kept = led.assert_fact("acct:7", "plan", "pro", actor="agent:bot", provenance="attested",
                               cause={"kind": "tool", "ref": "crm#77",
                                      "detail": "Meera Iyer asked for pro"}).fact_id
        led.retract(kept, actor="agent:bot", reason="Meera Iyer changed her mind")
        gone = led.assert_fact("acct:7", "tier", "gold", actor="agent:bot", provenance="attested",
                               cause={"kind": "tool", "ref": "crm#78",
                                      "detail": "Meera Iyer wants gold"}).fact_id
        led.forget(gone, actor="user:dpo", reason="subject_request")
    return kept, gone


async def test_the_fact_screen_shows_the_opened_text_and_says_when_it_was_erased(
        tmp_path: Path) -> None:
    path = tmp_path / "views.db"
    kept, gone = _ledger(path)
    app = app_on(path)
    async with app.run_test(size=(160, 50)) as pilot:
        await idle(pilot)
        app.push_screen(FactScreen(app.access, kept))
        await idle(pilot)
        why = str(app.screen.query_one("#why", Static).render())
        assert "crm#77" in why and "Meera Iyer asked for pro" in why
        app.pop_screen()
        app.push_screen(FactScreen(app.access, gone))
        await idle(pilot)
        why = str(app.screen.query_one("#why", Static).render())
        assert ERASED_TEXT in why and "Meera Iyer" not in why and "crm#78" not in why


async def test_mcp_why_and_history_open_the_text_and_say_when_it_was_erased(
        tmp_path: Path) -> None:
    path = tmp_path / "mcp.db"
    kept, gone = _ledger(path)
    with Ledger.open(path) as led:
        tools = MemoryTools(led, "agent:bot")
        async with connect(tools) as client:
            why: dict[str, Any] = await call(client, "memory_why", fact_id=kept)
            assert why["cause"]["detail"] == "Meera Iyer asked for pro"
            history = await call(client, "memory_history", fact_id=kept)
            assert history["events"][-1]["reason"] == "Meera Iyer changed her mind"
            erased = await call(client, "memory_why", fact_id=gone)
            assert erased["cause"]["detail"] == ERASED_TEXT
            assert erased["cause"]["ref"] == ERASED_TEXT
