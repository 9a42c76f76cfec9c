"""The fact screen: why it is believed, and retract, hold, release and forget from it (the
forget after a dialog naming exactly what will be erased); refusals shown in their words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Static

from custody_app.domain.timeutil import ManualClock
from custody_app.ledger.facade import Ledger
from screens.confirm import ConfirmDialog
from screens.fact import FactScreen
from screens.reason import ReasonDialog
from tests.tuikit import FROZEN, Story, app_on, build_story, idle, keys, notes


@pytest.fixture
def story(tmp_path: Path) -> Story:
    return build_story(tmp_path / "story.db")


async def open_fact(app: Any, pilot: Any, fact_id: str) -> None:
    await idle(pilot)
    app.push_screen(FactScreen(app.access, fact_id))
    await idle(pilot)


def text(app: Any, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def kinds(path: Path, fact_id: str) -> list[tuple[str, str]]:
    with Ledger.open(path, readonly=True) as led:
        return [(e.kind, e.actor) for e in led.history(fact_id).events]


async def test_fact_screen_says_why(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 50)) as pilot:
        await open_fact(app, pilot, story["summary"])
        why = text(app, "#why")
        assert "by llm:haiku" in why and "Cause tool crm.lookup#1" in why
        assert story["plan2"] in why and story["name"] in why  # its sources
        assert "LLM haiku" in why and "verified" in why
        assert "salience" in text(app, "#summary")
        await pilot.press("o")
        policy = text(app, "#policy")
        assert app.access.policy.hash in policy and "[retention.windows]" in policy
        app.pop_screen()
        await open_fact(app, pilot, story["plan"])
        why = text(app, "#why")
        assert f"Superseded by {story['plan2']}" in why
        assert keys(app.screen.query_one("#events", DataTable)) == ["2", "5"]


async def test_retract_with_a_reason_appends_the_event(story: Story) -> None:
    app = app_on(story.path, reviewer="user:maria")
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await open_fact(app, pilot, story["region"])
        await pilot.press("t")
        await pilot.pause()
        assert isinstance(app.screen, ReasonDialog)
        await pilot.press("enter")  # empty: refused in the dialog
        await pilot.pause()
        assert isinstance(app.screen, ReasonDialog)
        await pilot.press(*"wrong region", "enter")
        await idle(pilot)
        assert isinstance(app.screen, FactScreen)
        assert kinds(story.path, story["region"])[-1] == ("retract", "user:maria")
        assert any("retract" in n and "now retracted" in n for n in notes(app))
        assert "status retracted" in text(app, "#summary")


async def test_hold_release_and_no_second_hold_offered(story: Story) -> None:
    app = app_on(story.path, reviewer="user:counsel")
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await open_fact(app, pilot, story["plan2"])
        assert app.screen.check_action("release", ()) is None  # not held: nothing to release
        await pilot.press("h", *"case 7", "enter")
        await idle(pilot)
        assert kinds(story.path, story["plan2"])[-1] == ("hold", "user:counsel")
        # Held now: a second hold and a forget are shown disabled and do nothing.
        assert app.screen.check_action("hold", ()) is None
        assert app.screen.check_action("forget", ()) is None
        await pilot.press("h")
        await pilot.pause()
        assert isinstance(app.screen, FactScreen)
        assert kinds(story.path, story["plan2"])[-1] == ("hold", "user:counsel")
        await pilot.press("u", *"case closed", "enter")
        await idle(pilot)
        assert kinds(story.path, story["plan2"])[-1] == ("release", "user:counsel")


async def test_forget_names_the_cascade_then_erases_it(story: Story) -> None:
    app = app_on(story.path, reviewer="user:dpo")
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await open_fact(app, pilot, story["plan2"])
        await pilot.press("f")
        await idle(pilot)
        assert isinstance(app.screen, ConfirmDialog)
        listed = str(app.screen.query_one("#list", Static).render())
        assert story["plan2"] in listed and story["summary"] in listed and "(derived)" in listed
        assert "Forget 2 fact(s)" in str(app.screen.query_one("#title").render())
        await pilot.press("escape")  # cancel: nothing written
        await idle(pilot)
        assert kinds(story.path, story["plan2"])[-1][0] == "assert"
        await pilot.press("f")
        await idle(pilot)
        await pilot.press("y")
        await idle(pilot)
        with Ledger.open(story.path, readonly=True) as led:
            assert led.history(story["plan2"]).status == "forgotten"
            assert led.history(story["summary"]).status == "forgotten"
            assert led.history(story["plan2"]).events[-1].actor == "user:dpo"
        assert any("forgot 2 fact(s), certificate complete" in n for n in notes(app))
        assert "(erased)" in text(app, "#summary")


async def test_forget_of_a_held_fact_is_refused_in_its_words(story: Story) -> None:
    with Ledger.open(story.path, clock=ManualClock(FROZEN)) as led:  # plan2's dependent held
        led.hold(story["summary"], actor="user:counsel", reason="case 9")
    app = app_on(story.path, reviewer="user:dpo")
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await open_fact(app, pilot, story["name"])
        assert app.screen.check_action("forget", ()) is None  # held itself: not offered
        await pilot.press("f")
        await idle(pilot)
        assert isinstance(app.screen, FactScreen)
        app.pop_screen()
        await open_fact(app, pilot, story["plan2"])  # not held, but its cascade is
        await pilot.press("f")
        await idle(pilot)
        assert "On legal hold" in str(app.screen.query_one("#warning").render())
        # The dialog of a held fact does not offer Erase: the button is disabled, y does nothing.
        from textual.widgets import Button
        assert app.screen.query_one("#ok", Button).disabled
        await pilot.press("y")
        await idle(pilot)
        assert not any("forgot" in n for n in notes(app))
        assert kinds(story.path, story["plan2"])[-1][0] == "assert"
