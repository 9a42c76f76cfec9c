"""Review at scale in the terminal app: totals of the whole queue, bulk marks (page, all, by
writer, by cause) across pages, dialogs that say what and what follows, approve/reject from
the fact screen, and a held fact's forget dialog that does not offer Erase.
A contract module (tests/conftest.py): every test runs on a SQLite file and on a server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.widgets import DataTable, Static

from custody_app import Ledger
from screens.fact import FactScreen
from screens.reason import ReasonDialog
from screens.review import PAGE, ReviewScreen
from tests.tuikit import (
    Story,
    add_helper_claims,
    app_on,
    build_story,
    idle,
    open_screen,
    queue_items,
    screen_text,
)


@pytest.fixture
def story(ledger_at: Callable[[str], Any]) -> Story:
    return add_helper_claims(build_story(ledger_at("story.db")), PAGE + 10)  # more than a page


async def open_review(app: Any, pilot: Any) -> DataTable[Any]:
    await open_screen(pilot, "2")
    assert isinstance(app.screen, ReviewScreen)
    return app.screen.query_one("#queue", DataTable)


async def test_the_footer_counts_the_whole_queue(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await open_review(app, pilot)
        pager = screen_text(app, "#pager")
        assert f"{PAGE + 12} waiting · page 1 (claims 1–{PAGE})" in pager, pager


async def test_mark_by_writer_spans_pages_and_approves_them_all(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        table = await open_review(app, pilot)
        table.move_cursor(row=5)  # a claim of agent:helper (the story's two come first)
        await pilot.press("w")
        await idle(pilot)
        assert f"{PAGE + 10} marked" in screen_text(app, "#pager")
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ReasonDialog)
        details = str(app.screen.query_one("#details", Static).render())
        assert "tier = gold, by agent:helper" in details and "… and" in details
        assert "return them from now on" in details
        # It names the marked rows the reviewer sees, in the order shown (not the first ids
        # of all pages: ids minted in one millisecond sort at random against the queue).
        review = app.screen_stack[-2]
        assert isinstance(review, ReviewScreen) and review.page is not None
        on_screen = [i.fact.fact_id for i in review.page.items if i.writer == "agent:helper"]
        assert [line.split(":")[0] for line in details.splitlines()[:3]] == on_screen[:3]
        await pilot.press("enter")
        await idle(pilot)
    assert [i.writer for i in queue_items(story.path)] == ["agent:support-bot"] * 2


async def test_mark_page_all_by_cause_and_unmark(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await open_review(app, pilot)
        await pilot.press("m")
        await pilot.pause()
        assert f"{PAGE} marked" in screen_text(app, "#pager")
        await pilot.press("u", "M")
        await idle(pilot)
        assert f"{PAGE + 12} marked" in screen_text(app, "#pager")
        await pilot.press("u")
        await pilot.pause()
        await pilot.press("c")  # cursor on the first claim: the story's, cause kind tool
        await idle(pilot)
        assert " 2 marked" in screen_text(app, "#pager")


async def test_approve_and_reject_from_the_fact_screen(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await idle(pilot)
        app.push_screen(FactScreen(app.access, story["claim"]))
        await idle(pilot)
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ReasonDialog)
        details = str(app.screen.query_one("#details", Static).render())
        assert 'acct:2077 timezone = "Europe/Amsterdam"' in details
        await pilot.press("enter")
        await idle(pilot)
        assert isinstance(app.screen, FactScreen)
        # Now believed: approve and reject are no longer offered.
        assert app.screen.check_action("approve", ()) is None
        app.push_screen(FactScreen(app.access, story["claim2"]))
        await idle(pilot)
        await pilot.press("x")
        await pilot.pause()
        assert "what it would replace stays believed" in str(
            app.screen.query_one("#details", Static).render())
        await pilot.press(*"wrong region", "enter")
        await idle(pilot)
    waiting = [i.fact.fact_id for i in queue_items(story.path)]
    assert story["claim"] not in waiting and story["claim2"] not in waiting
    with Ledger.open(story.path, readonly=True) as led:
        assert led.why(story["claim"]).fact.status == "active"
        assert led.why(story["claim2"]).fact.status == "retracted"


async def test_the_retract_dialog_says_what_is_believed_again(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 50)) as pilot:
        await idle(pilot)
        app.push_screen(FactScreen(app.access, story["plan2"]))
        await idle(pilot)
        await pilot.press("t")
        await pilot.pause()
        details = str(app.screen.query_one("#details", Static).render())
        assert details.startswith('acct:1042 plan = "business"')
        assert f"believed again: {story['plan']} (acct:1042 plan, superseded)" in details


async def test_marks_across_the_whole_queue_read_it_in_chunks(story: Story,
                                                              monkeypatch: Any) -> None:
    # The queue (62) is read in chunks when marking; with chunks of 7 every chunk must be read,
    # or "mark all" and "mark writer" would mark only the first chunk.
    import screens.review

    monkeypatch.setattr(screens.review, "MARK_CHUNK", 7)
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        table = await open_review(app, pilot)
        await pilot.press("M")
        await idle(pilot)
        assert f" {PAGE + 12} marked" in screen_text(app, "#pager")
        await pilot.press("u")
        table.move_cursor(row=5)
        await pilot.press("w")
        await idle(pilot)
        assert f" {PAGE + 10} marked" in screen_text(app, "#pager")
