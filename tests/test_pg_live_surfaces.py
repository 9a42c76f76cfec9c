"""The long-running surfaces on a ledger on a PostgreSQL server, beside the same on a SQLite
file: `custody-app serve` (MCP over stdio, a real server process) and the terminal app (Textual
Pilot): its screens, a review, and live refresh when another process writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from tests.mcp_wire import StdioWire
from tests.test_pg_surfaces import cli, fact, ops
from tests.test_tui_live import until
from tests.tuikit import app_on, build_story, idle, keys


@pytest.fixture(params=("sqlite", "postgres"))
def address(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A ledger address on each backend: a file in tmp_path, or a fresh database."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db")
    return str(request.getfixturevalue("pg_url"))


def _structured(reply: dict[str, Any]) -> Any:
    assert "result" in reply and not reply["result"]["isError"], reply
    return reply["result"]["structuredContent"]


def test_serve_writes_a_claim_and_reads_it_once_confirmed(address: str) -> None:
    assert cli("init", "--ledger", address).returncode == 0
    server = StdioWire(address)  # type: ignore[arg-type]  # an address, not only a path
    try:
        wrote = _structured(server.call("memory_write", 1, subject="acct:1", predicate="plan",
                                        value="basic", cause={"kind": "tool", "ref": "crm#1"}))
        assert (wrote["status"], wrote["provenance"], wrote["seq"]) == (
            "quarantined", "claimed", 2)
        assert _structured(server.call("memory_read", 2, subject="acct:1"))["facts"] == []
        pending = _structured(server.call("memory_pending", 3))
        assert wrote["fact_id"] in json.dumps(pending)
        # A reviewer in another process confirms it; the running server reads it at once.
        done = cli("confirm", wrote["fact_id"], "--ledger", address, "--actor", "user:rev")
        assert done.returncode == 0, done.stderr
        read = _structured(server.call("memory_read", 4, subject="acct:1"))
        assert [(f["fact_id"], f["value"], f["status"]) for f in read["facts"]] == [
            (wrote["fact_id"], "basic", "active")]
    finally:
        assert server.close() == 0
    # What the server served is in the ledger: a served event for its session.
    served = cli("verify", "--ledger", address, "--json")
    assert json.loads(served.stdout)["valid"] is True
    assert json.loads(served.stdout)["events"] >= 4


def test_serve_refuses_a_server_schema_without_a_ledger_and_creates_one_when_asked(
        pg_url: str) -> None:
    import subprocess
    import sys

    run = [sys.executable, "-m", "custody_app", "serve", "--agent", "agent:x", "--ledger", pg_url]
    refused = subprocess.run(run, capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL)
    assert refused.returncode == 3 and "(ledger_missing)" in refused.stderr, refused.stderr
    made = subprocess.run([*run, "--create"], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)  # stdin closed at once: serves nothing
    assert made.returncode == 0, made.stderr
    assert cli("verify", "--ledger", pg_url).returncode == 0


# --- the terminal app ---------------------------------------------------------------------------

async def test_the_app_shows_beliefs_and_confirms_a_claim_on_either_backend(
        address: str) -> None:
    story = build_story(address)  # type: ignore[arg-type]
    app = app_on(address, watch=False)  # type: ignore[arg-type]
    async with app.run_test(size=(180, 40)) as pilot:
        await idle(pilot)
        facts = app.screen.query_one("#facts", DataTable)
        assert story["plan2"] in keys(facts) and story["claim"] not in keys(facts)
        believed = keys(facts)
        await pilot.press("2")  # the review queue
        await idle(pilot)
        queue = app.screen.query_one("#queue", DataTable)
        assert keys(queue) == [story["claim"], story["claim2"]]
        await pilot.press("a")  # approve the claim under the cursor, with a reason
        await pilot.pause()
        await pilot.press(*"checked", "enter")
        await idle(pilot)
        assert await until(pilot, lambda: keys(queue) == [story["claim2"]]), keys(queue)
        await pilot.press("1")
        await idle(pilot)
        facts = app.screen.query_one("#facts", DataTable)
        assert await until(pilot, lambda: story["claim"] in keys(facts)), keys(facts)
    assert set(believed) < set(keys(facts))
    if address.startswith("postgresql://"):
        assert "/custody" in app.sub_title and "postgresql://" not in app.sub_title


async def test_the_app_on_a_server_shows_another_processs_write(pg_url: str) -> None:
    """No file shows a server ledger's changes: the app hears them (LISTEN/NOTIFY)."""
    story = build_story(pg_url)  # type: ignore[arg-type]
    app = app_on(pg_url, watch=True)  # type: ignore[arg-type]
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        table = app.screen.query_one("#facts", DataTable)
        assert story["plan2"] in keys(table)
        done = cli("--batch", "-", "--ledger", pg_url,
                   stdin=ops(fact("acct:7", "plan", "enterprise", space="org")))
        assert done.returncode == 0, done.stderr
        new = json.loads(done.stdout)["result"]["fact_id"]
        assert await until(pilot, lambda: new in keys(table), seconds=30), keys(table)
        done = cli("retract", new, "--reason", "wrong account", "--ledger", pg_url)
        assert done.returncode == 0, done.stderr
        assert await until(pilot, lambda: new not in keys(table), seconds=30)
