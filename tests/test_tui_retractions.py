"""The Review screen lists a pending retraction with the quarantine queue; approve and reject
act on the retraction (the real app under App.run_test())."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from custody_app.ledger.facade import Ledger
from screens.reason import ReasonDialog
from screens.review import RETRACTION, ReviewScreen
from tests.tuikit import Story, app_on, build_story, cell_texts, idle, keys

AGENT = "agent:stray"


@pytest.fixture
def story(tmp_path: Path) -> Story:
    made = build_story(tmp_path / "story.db")
    with Ledger.open(made.path) as led:
        assert led.retract(made["plan2"], actor=AGENT, reason="I think it is wrong",
                           provenance="claimed").pending
    return made


def queue(app: Any) -> DataTable[Any]:
    return app.screen.query_one("#queue", DataTable)


def status(path: Path, fact_id: str) -> str:
    with Ledger.open(path, readonly=True) as led:
        return led.history(fact_id).status


@pytest.mark.parametrize(("key", "reason", "after"), [("a", "agreed", "retracted"),
                                                      ("x", "the agent is wrong", "active")])
async def test_a_pending_retraction_is_reviewed_from_the_queue(
        story: Story, key: str, reason: str, after: str) -> None:
    app = app_on(story.path, reviewer="reviewer:dana")
    async with app.run_test(size=(180, 40)) as pilot:
        await pilot.press("2")
        await idle(pilot)
        assert isinstance(app.screen, ReviewScreen)
        row = RETRACTION + story["plan2"]
        assert keys(queue(app))[0] == row
        cells = cell_texts(queue(app), row)
        assert AGENT in cells and "pending retraction" in cells
        assert status(story.path, story["plan2"]) == "active"
        await pilot.press(key)
        await pilot.pause()
        assert isinstance(app.screen, ReasonDialog)
        await pilot.press(*reason, "enter")
        await idle(pilot)
        assert status(story.path, story["plan2"]) == after
        assert row not in keys(queue(app))
        assert story["claim"] in keys(queue(app))  # the quarantine queue is untouched
