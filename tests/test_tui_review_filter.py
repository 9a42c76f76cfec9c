"""The Review screen's queue filter: typing applies (no enter needed), esc leaves the box, the
totals say "N of M shown", and marks act only on the claims the filter shows.
A contract module (tests/conftest.py): every test runs on a SQLite file and on a server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Input

from custody_app import Ledger
from screens.beliefs import BeliefsScreen
from screens.reason import ReasonDialog
from screens.review import PAGE, ReviewScreen
from tests.tuikit import (
    REVIEWER,
    Story,
    add_helper_claims,
    app_on,
    build_story,
    idle,
    keys,
    open_screen,
    queue_items,
    screen_text,
)

HELPERS = PAGE + 10


@pytest.fixture
def story(ledger_at: Callable[[str], Any]) -> Story:
    return add_helper_claims(build_story(ledger_at("story.db")), HELPERS)


def waiting(path: Path) -> list[str]:
    return [i.fact.fact_id for i in queue_items(path)]


def confirmed_by_reviewer(path: Path, fact_ids: list[str]) -> list[str]:
    with Ledger.open(path, readonly=True) as led:
        return [f for f in fact_ids
                if any(e.kind == "confirm" and e.actor == REVIEWER for e in led.history(f).events)]


async def typed(pilot: Any, text: str) -> None:
    """Type into the focused box and wait past the pause after which a filter applies."""
    await pilot.press(*text)
    await pilot.pause(0.5)
    await idle(pilot)


async def open_review(app: Any, pilot: Any) -> DataTable[Any]:
    await open_screen(pilot, "2")
    assert isinstance(app.screen, ReviewScreen)
    return app.screen.query_one("#queue", DataTable)


async def test_typing_filters_without_enter_and_esc_leaves_the_box(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        table = await open_review(app, pilot)
        assert len(keys(table)) == PAGE
        await pilot.press("slash")
        box = app.screen.query_one("#filter", Input)
        assert app.screen.focused is box
        await typed(pilot, "TOOL:CRM")  # any case; matches the cause tool:crm.lookup#1
        assert box.value == "TOOL:CRM"
        assert keys(table) == [story["claim"], story["claim2"]]
        pager = screen_text(app, "#pager")
        assert pager.startswith(f"✓ 0 marked · 2 shown of {HELPERS + 2} waiting (filter TOOL:CRM)"), pager
        await pilot.press("escape")
        assert app.screen.focused is table  # out of the box: the screen keys work again
        await pilot.press("1")
        await pilot.pause()
        assert isinstance(app.screen, BeliefsScreen)
        await pilot.press("2")
        await idle(pilot)
        assert box.value == "TOOL:CRM" and keys(table) == [story["claim"], story["claim2"]]
        # Clearing the box shows the whole queue again, still without enter.
        await pilot.press("slash", *["backspace"] * 8)
        await pilot.pause(0.5)
        await idle(pilot)
        assert len(keys(table)) == PAGE
        assert screen_text(app, "#pager").startswith(f"✓ 0 marked · {HELPERS + 2} waiting ·")


async def test_mark_all_after_filtering_approves_only_the_filtered_claims(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        table = await open_review(app, pilot)
        await pilot.press("slash")
        await typed(pilot, "message:m1")  # m1, m10..m19 of agent:helper: 11 claims
        await pilot.press("enter")
        await idle(pilot)
        assert app.screen.focused is table
        shown = keys(table)
        assert len(shown) == 11
        await pilot.press("M")
        await idle(pilot)
        assert " 11 marked · " in screen_text(app, "#pager")
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ReasonDialog)
        await pilot.press("enter")
        await idle(pilot, rounds=5)
    left = waiting(story.path)
    assert not set(shown) & set(left)
    assert len(left) == HELPERS + 2 - 11 and story["claim"] in left
    assert confirmed_by_reviewer(story.path, shown) == shown


async def test_marks_made_before_the_filter_act_only_on_what_it_shows(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        table = await open_review(app, pilot)
        await pilot.press("M")  # every claim in the queue, before any filter
        await idle(pilot)
        assert f" {HELPERS + 2} marked" in screen_text(app, "#pager")
        await pilot.press("slash")
        await typed(pilot, "timezone")  # the predicate of one story claim
        await pilot.press("escape")
        assert keys(table) == [story["claim"]]
        pager = screen_text(app, "#pager")
        assert f" 1 marked (+{HELPERS + 1} outside the filter, not acted on)" in pager, pager
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ReasonDialog)
        assert app.screen.title_text.startswith(f"Approve {story['claim']} as ")
        await pilot.press("enter")
        await idle(pilot, rounds=5)
    left = waiting(story.path)
    assert story["claim"] not in left and len(left) == HELPERS + 1


async def test_a_filter_matching_nothing_disables_approve_and_a_hostile_one_is_text(
        story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        table = await open_review(app, pilot)
        box = app.screen.query_one("#filter", Input)
        box.value = "[/]nothing[link=x]"
        await pilot.pause(0.5)
        await idle(pilot)
        assert keys(table) == [], screen_text(app, "#pager")
        assert screen_text(app, "#pager").startswith(
            f"✓ 0 marked · 0 shown of {HELPERS + 2} waiting (filter [/]")
        await pilot.press("escape")
        assert app.screen.check_action("review", ("confirm",)) is None
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ReviewScreen)  # no dialog: nothing to approve
    assert len(waiting(story.path)) == HELPERS + 2
