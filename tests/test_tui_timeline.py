"""The live event timeline: events newest first with kind, actor, subject, predicate, status
and a summary; a second process appends and the row appears without a key; enter opens the
fact, and is shown disabled on an event about no fact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from textual.widgets import DataTable

from screens.fact import FactScreen
from screens.timeline import TimelineScreen
from tests.test_tui_live import batch, until
from tests.tuikit import app_on, build_story, cell_texts, idle, keys, open_screen


async def test_the_timeline_lists_events_newest_first(tmp_path: Path) -> None:
    story = build_story(tmp_path / "t.db")
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await open_screen(pilot, "8")
        assert isinstance(app.screen, TimelineScreen)
        table = app.screen.query_one("#events", DataTable)
        assert keys(table) == [str(n) for n in range(11, 0, -1)]
        assert cell_texts(table, "11")[2:6] == ["hold", "user:counsel", "acct:1042",
                                                "legal_name"]
        assert cell_texts(table, "11")[7] == "case 2026-114"
        retract = cell_texts(table, "7")
        assert retract[2:4] == ["retract", "user:maria"]
        assert retract[6] == "retracted attested" and retract[7] == "poisoned tool result"
        claim = cell_texts(table, "9")
        assert claim[6] == "quarantined claimed"
        assert claim[7] == f'= "eu-central" (claimed, supersedes {story["region"]})'
        assert cell_texts(table, "5")[6] == "active attested"


async def test_a_second_writer_appends_and_the_row_appears_without_a_key(tmp_path: Path) -> None:
    story = build_story(tmp_path / "live.db")
    app = app_on(story.path, watch=True)
    async with app.run_test(size=(160, 40)) as pilot:
        await open_screen(pilot, "8")
        table = app.screen.query_one("#events", DataTable)
        assert keys(table)[0] == "11"
        done = batch(story.path, {
            "op": "assert", "subject": "acct:7", "predicate": "plan", "value": "enterprise",
            "provenance": "attested", "actor": "agent:other", "space": "org",
            "cause": {"kind": "tool", "ref": "crm#9"}})
        assert done.returncode == 0, done.stderr
        new = json.loads(done.stdout.splitlines()[0])["result"]
        # No key is pressed from here on: the live watcher reloads the open screen.
        seq = str(new["seq"])
        assert await until(pilot, lambda: seq in keys(table)), keys(table)
        assert keys(table)[0] in (seq, str(new["seq"] + 1))  # the batch's checkpoint may follow
        row = cell_texts(table, seq)
        assert row[2:6] == ["assert", "agent:other", "acct:7", "plan"]
        assert row[7] == '= "enterprise" (attested)'


async def test_enter_opens_the_fact_and_is_disabled_where_there_is_none(tmp_path: Path) -> None:
    story = build_story(tmp_path / "t.db")
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await open_screen(pilot, "8")
        screen = app.screen
        table = screen.query_one("#events", DataTable)
        table.move_cursor(row=keys(table).index("1"))  # the policy event: about no fact
        await pilot.pause()
        assert screen.check_action("open_fact", ()) is None
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen
        table.move_cursor(row=keys(table).index("7"))  # the retraction of the mistake
        await pilot.pause()
        assert screen.check_action("open_fact", ()) is True
        await pilot.press("enter")
        await idle(pilot)
        assert isinstance(app.screen, FactScreen) and app.screen.fact_id == story["mistake"]


async def test_the_timeline_is_in_help_and_in_the_palette_from_any_screen(tmp_path: Path) -> None:
    from screens.help import HelpScreen

    story = build_story(tmp_path / "t.db")
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        grid = app.screen.query_one(DataTable)
        rows = [tuple(str(c) for c in grid.get_row_at(i)) for i in range(grid.row_count)]
        assert ("everywhere", "8", "Timeline") in rows
        assert any(r[0] == "Timeline" and r[2] == "Open fact" for r in rows)
        await pilot.press("escape")
        app.push_screen(FactScreen(app.access, story["plan2"]))
        await idle(pilot)
        timeline = [c for c in app.get_system_commands(app.screen) if c.title == "Timeline"]
        assert len(timeline) == 1
        app.call_later(timeline[0].callback)  # as the palette runs a chosen command
        await idle(pilot)
        assert isinstance(app.screen, TimelineScreen)


def _swept_with_a_cutoff(path: Path) -> None:
    """A sweep with an explicit cutoff (as `sweep --before` and the Retention screen's cutoff
    run it): its expire events carry a cutoff and no policy window."""
    from custody_app.domain.timeutil import ManualClock
    from custody_app.ledger.facade import Ledger
    from tests.tuikit import FROZEN

    with Ledger.open(path, clock=ManualClock(FROZEN)) as led:
        result = led.sweep(before="2026-03-02T10:30:00Z", actor="user:dana")
        assert result.expired, result


def test_the_timeline_reads_after_a_sweep_with_an_explicit_cutoff(tmp_path: Path) -> None:
    from custody_app.ledger.facade import Ledger

    story = build_story(tmp_path / "t.db")
    _swept_with_a_cutoff(story.path)
    with Ledger.open(story.path, readonly=True) as led:
        page = led.timeline(limit=50)
    expires = [e for e in page.events if e.kind == "expire"]
    assert expires and all("cutoff 2026-03-02T10:30:00" in e.summary for e in expires)
    assert all("window" not in e.summary for e in expires)


async def test_the_timeline_screen_shows_the_expiry_rows_of_a_cutoff_sweep(
        tmp_path: Path) -> None:
    story = build_story(tmp_path / "t.db")
    _swept_with_a_cutoff(story.path)
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await open_screen(pilot, "8")
        table = app.screen.query_one("#events", DataTable)
        kinds = [cell_texts(table, k)[2] for k in keys(table)]
        assert "expire" in kinds, kinds


async def test_a_failing_read_is_said_on_the_timeline_not_a_silent_empty_table(
        tmp_path: Path, monkeypatch: Any) -> None:
    from custody_app.ledger.facade import Ledger
    from tests.tuikit import notes, screen_text

    story = build_story(tmp_path / "t.db")
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await open_screen(pilot, "8")
        table = app.screen.query_one("#events", DataTable)
        assert table.row_count
        # A defect in the read (the KeyError this screen once met): not a LedgerError.
        def broken(self: Any, **kw: Any) -> Any:
            raise KeyError("window")

        monkeypatch.setattr(Ledger, "timeline", broken)
        app.screen.reload()
        await idle(pilot)
        assert table.row_count == 0  # no stale page shown as if live
        assert "cannot read the timeline" in screen_text(app, "#detail")
        assert "KeyError" in screen_text(app, "#detail")
        assert "not live" in screen_text(app, "#pager")
        assert any("KeyError" in n for n in notes(app))
        monkeypatch.undo()
        app.screen.reload()  # the next change of the ledger reads again, and it recovers
        await idle(pilot)
        assert table.row_count and "cannot read" not in screen_text(app, "#detail")


async def test_the_timeline_columns_follow_a_resize(tmp_path: Path) -> None:
    story = build_story(tmp_path / "t.db")
    app = app_on(story.path)
    async with app.run_test(size=(160, 40)) as pilot:
        await open_screen(pilot, "8")
        table = app.screen.query_one("#events", DataTable)
        wide = [str(c.label) for c in table.columns.values()]
        assert "actor" in wide and "time" in wide
        await pilot.resize_terminal(80, 24)
        await idle(pilot)
        narrow = [str(c.label) for c in table.columns.values()]
        assert "actor" not in narrow and "subject" in narrow and "summary" in narrow
        assert table.row_count == 11 and len(cell_texts(table, "11")) == len(narrow)
        await pilot.resize_terminal(160, 40)
        await idle(pilot)
        assert [str(c.label) for c in table.columns.values()] == wide
