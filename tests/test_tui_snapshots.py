"""Snapshot tests (pytest-textual-snapshot) of the main screens on the story ledger, with the
app's clock frozen and fact ids seeded, so every run renders the same SVG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from screens.fact import FactScreen
from tests.conftest import SUITE_DEFAULT_POLICY
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


# A long value and long lines: the fact's value pane wraps it whole, the blast tree's detail
# pane shows the node under the cursor in full (fixed clock and id seed: the same every run).
LONG = ("Customer asked on the phone to move every seat of the Hamburg office to the business "
        "plan from the first of next month, keep the two Vienna seats on team until their "
        "contract ends, and send the revised quote to procurement@acme.example with the "
        "discount agreed in the March call; the account manager confirmed it in writing.")


def _with_long_value(story: Story) -> tuple[str, str]:
    from datetime import timedelta

    from custody_app import Ledger
    from custody_app.domain.timeutil import ManualClock
    from tests.tuikit import CAUSE, T0

    with Ledger.open(story.path, clock=ManualClock(T0 + timedelta(hours=10)), id_seed=11) as led:
        note = led.assert_fact("acct:1042", "support_call_summary_for_billing", LONG,
                               actor="agent:support-bot", cause=CAUSE,
                               provenance="attested").fact_id
        derived = led.assert_fact("acct:1042", "billing_change_request_pending_quote", "move",
                                  actor="llm:haiku", cause=CAUSE, provenance="attested",
                                  sources=[note], llm={"model": "haiku", "prompt_hash": "p" * 8,
                                                       "input_hash": "i" * 8,
                                                       "output_hash": "o" * 8, "tokens": 9})
    return note, derived


async def _fact_long(pilot: Any, story: Story, ids: tuple[str, str]) -> None:
    await idle(pilot)
    pilot.app.push_screen(FactScreen(pilot.app.access, ids[0]))
    await _fact_settled(pilot)


async def _blast_long(pilot: Any, story: Story, ids: tuple[str, str]) -> None:
    from screens.blast import BlastScreen

    await idle(pilot)
    pilot.app.push_screen(BlastScreen(pilot.app.access, ids[0], fact_screen=FactScreen))
    await idle(pilot)
    await pilot.press("down")  # the derived fact: its whole line in the detail pane
    await idle(pilot)


async def _timeline(pilot: Any, story: Story, ids: tuple[str, str]) -> None:
    await idle(pilot)
    await pilot.press("8")
    await _settled(pilot, "#events")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("screen", [_fact_long, _blast_long, _timeline],
                         ids=["fact-long", "blast-long", "timeline"])
def test_snapshot_long_lines_and_timeline_at_two_sizes(story: Story, snap_compare: Any,
                                                       size: Any, screen: Any) -> None:
    ids = _with_long_value(story)

    async def ready(pilot: Any) -> None:
        await screen(pilot, story, ids)

    assert snap_compare(app_on(story.path), terminal_size=size, run_before=ready)


# Every other screen and every dialog at 80x24 and 160x48 (issue 32), on the story ledger with
# a pending retraction waiting beside the claims (fixed clock and ids: the same every run).
# Integrity has its own test below (its chain head covers random salts, and it shows the
# ledger's path and size).
@pytest.fixture
def waiting(story: Story) -> Story:
    from datetime import timedelta

    from custody_app import Ledger
    from custody_app.domain.timeutil import ManualClock
    from tests.tuikit import T0

    with Ledger.open(story.path, clock=ManualClock(T0 + timedelta(hours=9)), id_seed=13) as led:
        assert led.retract(story["plan2"], actor="agent:stray", reason="I think it is wrong",
                           provenance="claimed").pending
    return story


async def _number(pilot: Any, key: str, table: str | None) -> None:
    await idle(pilot)
    await pilot.press(key)
    if table:
        await _settled(pilot, table)
    else:
        await idle(pilot)


async def _holds(pilot: Any, story: Story) -> None:
    await _number(pilot, "3", "#holds")


async def _retention(pilot: Any, story: Story) -> None:
    await _number(pilot, "4", "#spaces")
    await pilot.press("c", *"2026-03-02T12:00:00Z", "enter")
    await idle(pilot)
    await pilot.press("p")
    await _settled(pilot, "#preview")


async def _actions(pilot: Any, story: Story) -> None:
    await _number(pilot, "7", None)


async def _review_retraction(pilot: Any, story: Story) -> None:
    await _number(pilot, "2", "#queue")


async def _approve_retraction(pilot: Any, story: Story) -> None:
    await _review_retraction(pilot, story)
    await pilot.press("a")
    await idle(pilot)


async def _reject_marked(pilot: Any, story: Story) -> None:
    await _review_retraction(pilot, story)
    await pilot.press("down", "space", "space", "x")
    await idle(pilot)


async def _forget(pilot: Any, story: Story) -> None:
    await idle(pilot)
    pilot.app.push_screen(FactScreen(pilot.app.access, story["region"]))
    await _fact_settled(pilot)
    await pilot.press("f")
    await idle(pilot)


async def _sweep(pilot: Any, story: Story) -> None:
    await _retention(pilot, story)
    await pilot.press("s")
    await idle(pilot)


async def _help(pilot: Any, story: Story) -> None:
    await _number(pilot, "2", "#queue")
    await pilot.press("f1")
    await idle(pilot)


EVERY = [_holds, _retention, _actions, _review_retraction, _approve_retraction,
         _reject_marked, _forget, _sweep, _help]
EVERY_IDS = ["holds", "retention-preview", "actions", "review-retraction",
             "dialog-approve-retraction", "dialog-reject-marked", "dialog-forget",
             "dialog-sweep", "dialog-help"]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("screen", EVERY, ids=EVERY_IDS)
def test_snapshot_every_screen_and_dialog_at_two_sizes(waiting: Story, snap_compare: Any,
                                                       size: Any, screen: Any) -> None:
    async def ready(pilot: Any) -> None:
        await screen(pilot, waiting)
        await pilot.pause(0.1)
        await idle(pilot)

    assert snap_compare(app_on(waiting.path), terminal_size=size, run_before=ready)



# Integrity at both sizes: the chain head's hash covers each assert's salt, drawn from
# os.urandom, and the screen names the ledger's file and its size. The story is built with
# keys, salts and nonces from a fixed seed (as tests/test_ingest_golden.py does) in the test's
# tmp folder, opened by a relative path from there: the screen shows exactly what it shows a
# user, and every value on it is the same every run (a verify and a projection check run
# too, so their results are in the picture).
@pytest.fixture
def seeded_story(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Story:
    import os
    import random

    rng = random.Random(20261205)
    monkeypatch.setattr(os, "urandom", lambda n: rng.randbytes(n))
    monkeypatch.setenv("CUSTODY_MASTER_KEY", "11" * 32)
    monkeypatch.chdir(tmp_path)
    # The shipped policy, recorded by a path relative to the test's folder (not the checkout's)
    shipped = SUITE_DEFAULT_POLICY  # the shipped one, its embedder pinned to hashed-ngram
    Path("policy.toml").write_bytes(shipped.read_bytes())
    return build_story(Path("story.db"), policy=Path("policy.toml"))


async def _integrity(pilot: Any) -> None:
    await _number(pilot, "5", "#policies")
    await pilot.press("v")
    await idle(pilot)
    await pilot.press("c")
    await idle(pilot)
    await pilot.pause(0.1)
    await idle(pilot)


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_integrity_at_two_sizes(seeded_story: Story, snap_compare: Any,
                                         size: Any) -> None:
    assert snap_compare(app_on(seeded_story.path), terminal_size=size, run_before=_integrity)
