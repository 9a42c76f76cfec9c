"""Quarantine review and holds: approve or reject one or a marked selection with a reason, as
the app's reviewer; the writer's own approval refused; place and release holds.
A contract module (tests/conftest.py): every test runs on a SQLite file and on a server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Input

from custody_app.ledger.facade import Ledger
from screens.holds import HoldsScreen
from screens.reason import ReasonDialog
from screens.review import ReviewScreen
from tests.tuikit import WRITER, Story, app_on, build_story, cell_texts, idle, keys, notes


@pytest.fixture
def story(ledger_at: Callable[[str], Any]) -> Story:
    return build_story(ledger_at("story.db"))


def queue(app: Any) -> DataTable[Any]:
    return app.screen.query_one("#queue", DataTable)


def last(path: Path, fact_id: str) -> tuple[str, str, Any]:
    with Ledger.open(path, readonly=True) as led:
        e = led.history(fact_id).events[-1]
        return e.kind, e.actor, (e.model_extra or {}).get("reason")


async def test_queue_oldest_first_with_writer_cause_and_supersedes(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(180, 40)) as pilot:
        await pilot.press("2")
        await idle(pilot)
        assert isinstance(app.screen, ReviewScreen)
        assert keys(queue(app)) == [story["claim"], story["claim2"]]
        row = cell_texts(queue(app), story["claim2"])
        assert WRITER in row and "tool:crm.lookup#1" in row
        assert f"{story['region']} (active)" in row


async def test_approve_one_records_the_reviewer(story: Story) -> None:
    app = app_on(story.path, reviewer="reviewer:dana")
    async with app.run_test(size=(180, 40), notifications=True) as pilot:
        await pilot.press("2")
        await idle(pilot)
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ReasonDialog)
        await pilot.press(*"checked the CRM", "enter")
        await idle(pilot)
        assert last(story.path, story["claim"]) == ("confirm", "reviewer:dana", "checked the CRM")
        assert keys(queue(app)) == [story["claim2"]]
        assert any("approved 1 fact(s)" in n for n in notes(app))


async def test_the_writer_cannot_approve_its_own_fact(story: Story) -> None:
    app = app_on(story.path, reviewer="user:writer")
    with Ledger.open(story.path) as led:
        own = led.assert_fact("acct:9", "plan", "free", actor="user:writer",
                              cause={"kind": "manual", "ref": "call"}).fact_id
    async with app.run_test(size=(180, 40), notifications=True) as pilot:
        await pilot.press("2")
        await idle(pilot)
        assert keys(queue(app))[-1] == own
        await pilot.press("down", "down", "a", "enter")
        await idle(pilot)
        assert any("(own_write)" in n for n in notes(app)), notes(app)
        assert last(story.path, own)[0] == "assert"
        assert own in keys(queue(app))


async def test_reject_a_marked_selection_with_a_reason(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(180, 40), notifications=True) as pilot:
        await pilot.press("2")
        await idle(pilot)
        await pilot.press("space", "space")  # marks both (the cursor moves down)
        assert cell_texts(queue(app), story["claim"])[0] == "✓"
        await pilot.press("x")
        await pilot.pause()
        await pilot.press("enter")  # a reject needs a reason
        await pilot.pause()
        assert isinstance(app.screen, ReasonDialog)
        await pilot.press(*"no source", "enter")
        await idle(pilot)
        for name in ("claim", "claim2"):
            assert last(story.path, story[name]) == ("reject", "user:dana", "no source")
        assert keys(queue(app)) == []
        assert any("rejected 2 fact(s)" in n for n in notes(app))


async def test_place_and_release_holds(story: Story) -> None:
    app = app_on(story.path, reviewer="user:counsel")
    async with app.run_test(size=(180, 40), notifications=True) as pilot:
        await pilot.press("3")
        await idle(pilot)
        assert isinstance(app.screen, HoldsScreen)
        holds = app.screen.query_one("#holds", DataTable)
        assert keys(holds) == [story["name"]]
        assert "case 2026-114" in cell_texts(holds, story["name"])
        await pilot.press("h")
        assert app.screen.focused is app.screen.query_one("#fact", Input)
        await pilot.press(*story["plan2"], "enter")
        await pilot.pause()
        await pilot.press(*"audit 9", "enter")
        await idle(pilot)
        assert keys(holds) == [story["name"], story["plan2"]]
        assert last(story.path, story["plan2"]) == ("hold", "user:counsel", "audit 9")
        await pilot.press("h", *"f_nope", "enter")
        await pilot.pause()
        await pilot.press(*"x", "enter")
        await idle(pilot)
        assert any("(unknown_fact)" in n for n in notes(app))
        holds.focus()
        await pilot.press("home", "u", *"settled", "enter")
        await idle(pilot)
        assert keys(holds) == [story["plan2"]]
        assert last(story.path, story["name"]) == ("release", "user:counsel", "settled")
