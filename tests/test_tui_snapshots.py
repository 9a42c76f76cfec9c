"""Snapshot tests (pytest-textual-snapshot) of the main screens on the story ledger, with the
app's clock frozen and fact ids seeded, so every run renders the same SVG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from screens.fact import FactScreen
from tests.tuikit import Story, app_on, build_story, idle

SIZE = (150, 32)


@pytest.fixture
def story(tmp_path: Path) -> Story:
    return build_story(tmp_path / "story.db")


async def _settled(pilot: Any, table: str) -> None:
    """The screen with its table filled and laid out: a DataTable's column widths follow its
    rows, so a screenshot taken between the fill and the next layout differs (seen under load
    on the review queue at 160x48)."""
    from textual.widgets import DataTable

    await idle(pilot)
    for _ in range(100):
        if pilot.app.screen.query_one(table, DataTable).row_count:
            break
        await pilot.pause(0.05)
    await pilot.pause(0.1)
    await idle(pilot)


def test_snapshot_beliefs_now(story: Story, snap_compare: Any) -> None:
    async def ready(pilot: Any) -> None:
        await _settled(pilot, "#facts")

    assert snap_compare(app_on(story.path), terminal_size=SIZE, run_before=ready)


def test_snapshot_beliefs_time_travel_diff(story: Story, snap_compare: Any) -> None:
    async def travel(pilot: Any) -> None:
        await idle(pilot)
        for key in ("left_square_bracket",) * 6 + ("d", "r"):
            await pilot.press(key)
            await idle(pilot)
        await _settled(pilot, "#facts")

    assert snap_compare(app_on(story.path), terminal_size=SIZE, run_before=travel)


def test_snapshot_review_queue(story: Story, snap_compare: Any) -> None:
    async def review(pilot: Any) -> None:
        await pilot.press("2")
        await _settled(pilot, "#queue")
        await pilot.press("space")
        await _settled(pilot, "#queue")

    assert snap_compare(app_on(story.path), terminal_size=SIZE, run_before=review)


async def _fact_settled(pilot: Any) -> None:
    await _settled(pilot, "#events")


def test_snapshot_fact_why(story: Story, snap_compare: Any) -> None:
    async def why(pilot: Any) -> None:
        await idle(pilot)
        pilot.app.push_screen(FactScreen(pilot.app.access, story["summary"]))
        await _fact_settled(pilot)

    assert snap_compare(app_on(story.path), terminal_size=SIZE, run_before=why)


# The main screens at the smallest terminal people use and at a large one (frozen clock, ids).
SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]


async def _beliefs(pilot: Any, story: Story) -> None:
    await _settled(pilot, "#facts")


async def _review(pilot: Any, story: Story) -> None:
    await pilot.press("2")
    await _settled(pilot, "#queue")


async def _fact(pilot: Any, story: Story) -> None:
    await idle(pilot)
    pilot.app.push_screen(FactScreen(pilot.app.access, story["plan2"]))
    await _fact_settled(pilot)


async def _blast(pilot: Any, story: Story) -> None:
    from screens.blast import BlastScreen

    await idle(pilot)
    pilot.app.push_screen(BlastScreen(pilot.app.access, story["plan2"], fact_screen=FactScreen))
    await idle(pilot)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("screen", [_beliefs, _review, _fact, _blast],
                         ids=["beliefs", "review", "fact", "blast"])
def test_snapshot_main_screens_at_two_sizes(story: Story, snap_compare: Any, size: Any,
                                            screen: Any) -> None:
    async def ready(pilot: Any) -> None:
        await screen(pilot, story)

    assert snap_compare(app_on(story.path), terminal_size=size, run_before=ready)
