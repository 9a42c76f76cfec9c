"""The footer shows a key whose action cannot apply now as disabled (dimmed and struck
through, via the screen's check_action answering None), and follows as that changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Input

from screens.fact import FactScreen
from screens.keybar import KeyBar
from tests.tuikit import app_on, build_story, idle, keys, open_screen


def key_states(app: Any) -> dict[str, str]:
    """Description -> 'on' or 'off' for every key the open screen's footer shows: a key cap
    (a styled span) is followed by its description, struck through when disabled."""
    text = app.screen.query_one(KeyBar).keys_text()
    caps = [s for s in text.spans if "strike" not in str(s.style)]
    states: dict[str, str] = {}
    for cap, after in zip(caps, [*caps[1:], None], strict=True):
        end = after.start if after is not None else len(text.plain)
        words = text.plain[cap.end:end].strip()
        struck = any("strike" in str(s.style) and cap.end <= s.start < end for s in text.spans)
        states[words] = "off" if struck else "on"
    return states


def rendered(app: Any) -> str:
    return str(app.screen.query_one(KeyBar).render())


async def test_fact_keys_follow_the_hold(tmp_path: Path) -> None:
    story = build_story(tmp_path / "t.db")
    app = app_on(story.path, reviewer="user:counsel")
    async with app.run_test(size=(200, 50)) as pilot:
        await idle(pilot)
        app.push_screen(FactScreen(app.access, story["name"]))  # on legal hold
        await idle(pilot)
        states = key_states(app)
        assert states["Forget"] == "off" and states["Hold"] == "off"
        assert states["Release"] == "on" and states["Retract"] == "on"
        assert states["Approve"] == "off" and states["Reject"] == "off"  # not a claim
        await pilot.press("u", *"case closed", "enter")
        await idle(pilot)
        states = key_states(app)  # the write reloaded the fact: the footer followed
        assert states["Forget"] == "on" and states["Hold"] == "on"
        assert states["Release"] == "off"
        app.push_screen(FactScreen(app.access, story["claim"]))
        await idle(pilot)
        assert key_states(app)["Approve"] == "on"


async def test_review_approve_is_disabled_when_nothing_is_shown(tmp_path: Path) -> None:
    story = build_story(tmp_path / "t.db")
    app = app_on(story.path)
    async with app.run_test(size=(200, 50)) as pilot:
        await open_screen(pilot, "2")
        assert key_states(app)["Approve"] == "on"
        assert key_states(app)["Unmark all"] == "off"  # nothing marked yet
        await pilot.press("space")
        await pilot.pause()
        assert key_states(app)["Unmark all"] == "on"
        await pilot.press("u")
        box = app.screen.query_one("#filter", Input)
        box.value = "no such writer"
        await pilot.pause(0.5)
        await idle(pilot)
        assert keys(app.screen.query_one("#queue", DataTable)) == []
        states = key_states(app)
        assert states["Approve"] == "off" and states["Reject"] == "off"
        assert states["Mark page"] == "off"


async def test_timeline_open_fact_follows_the_cursor(tmp_path: Path) -> None:
    story = build_story(tmp_path / "t.db")
    app = app_on(story.path)
    async with app.run_test(size=(200, 50)) as pilot:
        await open_screen(pilot, "8")
        assert key_states(app)["Open fact"] == "on"  # the newest event: a hold of a fact
        table = app.screen.query_one("#events", DataTable)
        await pilot.press(*["down"] * (table.row_count - 1))  # the policy event: about no fact
        await pilot.pause()
        assert keys(table)[table.cursor_row] == "1"
        assert key_states(app)["Open fact"] == "off"
        assert "Open fact" in rendered(app)
