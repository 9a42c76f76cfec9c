"""The beliefs screen: first paint, filters, status toggles, time travel, diff, paging, help."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Input

from screens.beliefs import BeliefsScreen
from screens.fact import FactScreen
from screens.help import HelpScreen
from tests.tuikit import Story, app_on, build_story, cell_texts, idle, keys, notes, screen_text


@pytest.fixture
def story(tmp_path: Path) -> Story:
    return build_story(tmp_path / "story.db")


def table(app: Any) -> DataTable[Any]:
    return app.screen.query_one("#facts", DataTable)


async def test_first_paint_shows_what_is_believed_now(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        await idle(pilot)
        assert isinstance(app.screen, BeliefsScreen)
        assert keys(table(app)) == [story["name"], story["region"], story["plan2"],
                                    story["summary"]]
        assert "event #11/11 (hold by user:counsel)" in screen_text(app, "#timebar")
        assert "now (live)" in screen_text(app, "#timebar")
        row = cell_texts(table(app), story["name"])
        assert "Acme Logistics GmbH" in row and row[6:8] == ["active", "active ⚑held"]
        assert app.sub_title.startswith("2 waiting for review · story.db · user:dana · policy ")


async def test_filters_by_subject_space_and_predicate(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        app.screen.query_one("#space", Input).focus()
        await pilot.press(*"team:support", "enter")
        await idle(pilot)
        assert keys(table(app)) == []
        app.screen.query_one("#space", Input).focus()
        await pilot.press("ctrl+a", "ctrl+k", *"org", "enter")
        await idle(pilot)
        assert keys(table(app)) == [story["name"], story["region"], story["plan2"],
                                    story["summary"]]
        await pilot.press("slash")  # / is the subject filter (issue 32)
        assert app.screen.focused is app.screen.query_one("#subject", Input)
        await pilot.press(*"acct:1042", "enter")
        await idle(pilot)
        assert keys(table(app)) == [story["name"], story["plan2"], story["summary"]]
        app.screen.query_one("#predicate", Input).focus()
        await pilot.press(*"plan", "enter")
        await idle(pilot)
        assert keys(table(app)) == [story["plan2"]]


async def test_status_toggles(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        await pilot.press("r")
        await idle(pilot)
        assert story["mistake"] in keys(table(app))
        assert "retracted" in cell_texts(table(app), story["mistake"])
        assert "+retracted" in screen_text(app, "#timebar")
        await pilot.press("c", "s")  # c: claims (q quits, issue 32)
        await idle(pilot)
        shown = keys(table(app))
        assert {story["claim"], story["claim2"], story["plan"], story["mistake"]} <= set(shown)
        await pilot.press("r", "c", "s")
        await idle(pilot)
        assert story["mistake"] not in keys(table(app)) and story["claim"] not in keys(table(app))


async def test_time_travel_step_back_and_forward_one_event_each(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        for _ in range(3):  # back past the hold (11), the summary (10) and claim2 (9)
            await pilot.press("left_square_bracket")
            await idle(pilot)
        assert "event #8/11 (assert by agent:support-bot)" in screen_text(app, "#timebar")
        assert "time travel" in screen_text(app, "#timebar")
        assert story["summary"] not in keys(table(app))
        assert cell_texts(table(app), story["name"])[6] == "active"
        await pilot.press("right_square_bracket", "right_square_bracket")
        await idle(pilot)
        assert "event #10/11" in screen_text(app, "#timebar")
        assert story["summary"] in keys(table(app))
        await pilot.press("n")
        await idle(pilot)
        assert "now (live)" in screen_text(app, "#timebar")


async def test_jump_to_a_typed_instant_or_event_and_diff_against_now(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        await idle(pilot)
        await pilot.press("g")
        await pilot.press(*story.tx["region"], "enter")
        await idle(pilot)
        assert keys(table(app)) == [story["plan"], story["name"], story["region"]]
        await pilot.press("d")
        await idle(pilot)
        rows = {k: cell_texts(table(app), k) for k in keys(table(app))}
        assert rows[story["plan"]][0] == "-" and rows[story["plan2"]][0] == "+"
        assert rows[story["name"]][0] == " "
        assert "diff vs now" in screen_text(app, "#timebar")
        app.screen.query_one("#jump", Input).focus()
        await pilot.press("ctrl+a", "ctrl+k", *"#3", "enter")
        await idle(pilot)
        assert "event #3/11" in screen_text(app, "#timebar")
        app.screen.query_one("#jump", Input).focus()
        await pilot.press("ctrl+a", "ctrl+k", *"last tuesday", "enter")
        await idle(pilot)
        assert any("is not an ISO 8601 time" in n for n in notes(app))
        assert "event #3/11" in screen_text(app, "#timebar")


async def test_pages_through_results_without_loading_everything(tmp_path: Path) -> None:
    story = build_story(tmp_path / "big.db", extra_facts=120)
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        assert table(app).row_count == 50
        assert "page 1 · rows 1–50 · PgDn: next page" in screen_text(app, "#pager")
        await pilot.press("pagedown", "pagedown")
        await idle(pilot)
        assert table(app).row_count == 24 and "last page" in screen_text(app, "#pager")
        assert keys(table(app))[-1] == story["bulk119"]
        await pilot.press("pageup")
        await idle(pilot)
        assert "page 2 · rows 51–100" in screen_text(app, "#pager")


async def test_enter_opens_the_fact_and_escape_comes_back(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        await pilot.press("down", "down", "down", "enter")
        await idle(pilot)
        assert isinstance(app.screen, FactScreen) and app.screen.fact_id == story["summary"]
        await pilot.press("escape")
        await idle(pilot)
        assert isinstance(app.screen, BeliefsScreen)


async def test_help_screen_and_command_palette_list_the_keys(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        rows = [tuple(str(c) for c in app.screen.query_one(DataTable).get_row_at(i))
                for i in range(app.screen.query_one(DataTable).row_count)]
        assert ("Beliefs", "[", "Back 1 event") in rows
        assert ("everywhere", "2", "Review") in rows
        await pilot.press("escape")
        await pilot.pause()
        commands = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Back 1 event", "Diff vs now", "Review", "Integrity", "Help"} <= commands
