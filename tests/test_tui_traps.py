"""Keyboard traps and boxes that lie, found when the terminal app was tried by its users: each
test drives the real app with keys and fails on the code before the fix."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Input, Tree

from screens.beliefs import FILTER_PAUSE_S, BeliefsScreen
from screens.blast import BlastScreen
from screens.fact import FactScreen
from screens.holds import HoldsScreen
from screens.review import ReviewScreen
from tests.tuikit import Story, app_on, build_story, idle, keys, open_screen, screen_text


@pytest.fixture
def story(tmp_path: Path) -> Story:
    return build_story(tmp_path / "story.db")


def facts(app: Any) -> DataTable[Any]:
    return app.screen.query_one("#facts", DataTable)


async def test_blast_radius_screen_keys_work_on_arrival(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await open_screen(pilot, "6")
        assert isinstance(app.screen, BlastScreen)
        assert not isinstance(app.screen.focused, Input)
        await pilot.press("2")  # a screen key, not a digit typed into the fact-id box
        await idle(pilot)
        assert isinstance(app.screen, ReviewScreen)
        await pilot.press("6")
        await idle(pilot)
        assert app.screen.query_one("#fact", Input).value == ""


async def test_escape_leaves_the_blast_fact_id_box(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await open_screen(pilot, "6")
        await pilot.press("slash", *"f_12")
        box = app.screen.query_one("#fact", Input)
        assert app.screen.focused is box and box.value == "f_12"
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen.focused, Input)
        await pilot.press("1")
        await idle(pilot)
        assert isinstance(app.screen, BeliefsScreen) and box.value == "f_12"


async def test_escape_leaves_the_holds_box_and_every_beliefs_box(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        for box_id in ("space", "subject", "predicate", "valid", "jump"):
            app.screen.query_one(f"#{box_id}", Input).focus()
            await pilot.pause()
            await pilot.press("escape")
            await pilot.pause()
            assert app.screen.focused is facts(app), box_id
        await pilot.press("3")
        await idle(pilot)
        assert isinstance(app.screen, HoldsScreen)
        app.screen.query_one("#fact", Input).focus()
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen.focused, Input)


async def test_a_filter_box_applies_what_it_shows_without_enter(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        app.screen.query_one("#subject", Input).focus()
        await pilot.press(*"acct:1042")  # no enter
        await asyncio.sleep(FILTER_PAUSE_S + 0.2)
        await idle(pilot)
        assert keys(facts(app)) == [story["name"], story["plan2"], story["summary"]]
        await pilot.press("tab")  # leaving the box at once applies it too
        app.screen.query_one("#predicate", Input).focus()
        await pilot.press(*"plan", "escape")
        await idle(pilot)
        assert app.screen.query_one("#predicate", Input).value == "plan"
        assert keys(facts(app)) == [story["plan2"]]


async def test_after_go_to_an_event_then_now_the_box_reads_now(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        await pilot.press("g", *"#3", "enter")
        await idle(pilot)
        assert "time travel" in screen_text(app, "#timebar")
        assert app.screen.query_one("#jump", Input).value == "#3"
        await pilot.press("n")
        await idle(pilot)
        assert "now (live)" in screen_text(app, "#timebar")
        assert app.screen.query_one("#jump", Input).value == ""
        await pilot.press("left_square_bracket")
        await idle(pilot)
        assert app.screen.query_one("#jump", Input).value == "#10"


async def test_a_time_box_left_without_enter_shows_the_applied_instant(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        await pilot.press("g", *"#2", "escape")  # typed, never applied
        await idle(pilot)
        assert "now (live)" in screen_text(app, "#timebar")
        assert app.screen.query_one("#jump", Input).value == ""


async def test_enter_on_a_blast_tree_fact_opens_it_and_x_unfolds(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        app.push_screen(BlastScreen(app.access, story["plan2"], fact_screen=FactScreen))
        await idle(pilot)
        tree: Tree[str] = app.screen.query_one("#tree", Tree)
        assert app.screen.focused is tree
        summary = [n for n in _nodes(tree.root) if n.data == story["summary"]]
        assert summary, [str(n.label) for n in _nodes(tree.root)]
        tree.root.collapse()
        await pilot.press("x")
        await pilot.pause()
        assert tree.root.is_expanded
        tree.move_cursor(summary[0])
        await pilot.press("enter")
        await idle(pilot)
        assert isinstance(app.screen, FactScreen) and app.screen.fact_id == story["summary"]


def _nodes(node: Any) -> list[Any]:
    out = [node]
    for child in node.children:
        out += _nodes(child)
    return out


async def test_beliefs_marks_two_values_of_a_one_valued_predicate(story: Story) -> None:
    from custody_app import Ledger
    from custody_app.domain.timeutil import ManualClock
    from tests.tuikit import CAUSE, FROZEN, cell_texts

    with Ledger.open(story.path, clock=ManualClock(FROZEN)) as led:
        rival = led.assert_fact("acct:1042", "plan", "enterprise", actor="agent:x", cause=CAUSE,
                                provenance="attested").fact_id
    app = app_on(story.path)
    async with app.run_test(size=(200, 40)) as pilot:
        await idle(pilot)
        for fact in (story["plan2"], rival):
            assert "active ⚠contradiction" in cell_texts(facts(app), fact), fact
        assert "⚠" not in " ".join(cell_texts(facts(app), story["name"]))


async def test_help_names_keys_as_people_do_and_covers_every_screen(story: Story) -> None:
    from screens.help import HelpScreen

    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        await pilot.press("2", "question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        grid = app.screen.query_one(DataTable)
        rows = [tuple(str(c) for c in grid.get_row_at(i)) for i in range(grid.row_count)]
        assert rows[0][0] == "Review"  # the open screen first
        assert ("everywhere", "f1, ?", "Help") in rows and ("everywhere", "^q", "Quit") in rows
        assert ("everywhere", "q", "Quit") in rows
        wheres = {r[0] for r in rows}
        assert {"Beliefs", "Review", "Holds", "Retention", "Integrity", "Blast radius",
                "Fact detail", "everywhere"} <= wheres
        assert not [r for r in rows if "_" in r[1] or r[0].endswith("Screen")], rows
        await pilot.press("escape")
        await pilot.pause()
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert len(titles) == len(set(titles)), titles
        # Global actions from a pushed screen too.
        app.push_screen(FactScreen(app.access, story["plan2"]))
        await idle(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert {"Retract", "Beliefs", "Review", "Blast radius", "Help"} <= set(titles)
        assert len(titles) == len(set(titles)), titles


async def test_the_header_counts_claims_waiting_and_follows_a_write(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        await idle(pilot)
        assert app.sub_title.startswith("2 waiting for review · ")
        await pilot.press("2", "space", "space", "a", "enter")  # approve both
        await idle(pilot)
        await idle(pilot)
        assert app.sub_title.startswith("0 waiting for review · "), app.sub_title


async def test_retention_shows_no_progress_bar_before_a_sweep_runs(story: Story) -> None:
    from textual.widgets import ProgressBar

    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await open_screen(pilot, "4")
        assert app.screen.query_one("#progress", ProgressBar).display is False
