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
from tests.tuikit import Story, app_on, build_story, cell_texts, idle, keys, screen_text

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


async def test_pending_retractions_count_in_the_totals_and_the_header(story: Story) -> None:
    app = app_on(story.path, reviewer="reviewer:dana")
    async with app.run_test(size=(180, 40)) as pilot:
        await pilot.press("2")
        await idle(pilot)
        rows = keys(queue(app))
        assert len(rows) == 3  # the retraction and the two claims
        pager = screen_text(app, "#pager")
        assert "3 waiting (2 claim(s), 1 retraction(s))" in pager, pager
        assert app.sub_title.startswith("3 waiting for review · "), app.sub_title


@pytest.mark.parametrize(("key", "words"), [
    ("a", "Approving a retraction: the fact stops being believed"),
    ("x", "Rejecting a retraction: it is discarded; the fact stays believed")])
async def test_the_dialog_of_a_pending_retraction_says_what_it_does(
        story: Story, key: str, words: str) -> None:
    app = app_on(story.path, reviewer="reviewer:dana")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        await idle(pilot)
        assert keys(queue(app))[0] == RETRACTION + story["plan2"]
        await pilot.press(key)
        await pilot.pause()
        assert isinstance(app.screen, ReasonDialog)
        assert app.screen.title_text.startswith(
            f"{'Approve' if key == 'a' else 'Reject'} the retraction of {story['plan2']}")
        details = str(app.screen.query_one("#details").render())
        assert (f'retraction of {story["plan2"]}: acct:1042 plan = business, by {AGENT}'
                in details), details
        assert words in details
        assert "return it from now on" not in details and "Reads and recall return" not in details


async def test_approving_names_the_retraction_read_never_a_newer_one(story: Story) -> None:
    """DESIGN 14: the decision names the retraction's event. The retraction on screen is
    discarded and another one filed before the reviewer presses enter: the approve is refused
    and the newer retraction stays pending, the fact believed."""
    app = app_on(story.path, reviewer="reviewer:dana")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        await idle(pilot)
        assert keys(queue(app))[0] == RETRACTION + story["plan2"]
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ReasonDialog)
        with Ledger.open(story.path) as led:
            led.reject(story["plan2"], actor="user:lee", reason="not this one", retraction=True)
            assert led.retract(story["plan2"], actor=AGENT, reason="a newer one",
                               provenance="claimed").pending
        await pilot.press("enter")
        await idle(pilot)
        assert status(story.path, story["plan2"]) == "active"
        with Ledger.open(story.path, readonly=True) as led:
            assert [r.reason for r in led.pending_retractions()] == ["a newer one"]
