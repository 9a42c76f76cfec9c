"""Retention and sweeps, and integrity: windows per space, a preview with held facts skipped,
the sweep after a confirmation with progress and certificate; verify, projection, checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Input, ProgressBar, Static

from custody_app.ledger.facade import Ledger
from screens.confirm import ConfirmDialog
from screens.integrity import IntegrityScreen
from screens.retention import RetentionScreen
from tests.tuikit import Story, app_on, build_story, cell_texts, idle, keys, notes

POLICY = '[retention.windows]\n"team:*" = "P1D"\norg = "P2D"\n'


@pytest.fixture
def story(tmp_path: Path) -> Story:
    return build_story(tmp_path / "story.db")


def text(app: Any, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def statuses(path: Path) -> dict[str, str]:
    with Ledger.open(path, readonly=True) as led:
        return {f.fact_id: f.status for f in led.db.facts.dump()[0]}


async def test_preview_then_sweep_with_confirmation(story: Story, tmp_path: Path) -> None:
    policy = tmp_path / "retention.toml"
    policy.write_text(POLICY)
    app = app_on(story.path, policy=policy, reviewer="user:dpo")
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await pilot.press("4")
        await idle(pilot)
        assert isinstance(app.screen, RetentionScreen)
        spaces = app.screen.query_one("#spaces", DataTable)
        assert cell_texts(spaces, "org")[:3] == ["org", "org", "P2D"]
        assert cell_texts(spaces, "team:support")[:3] == ["team:support", "team:*", "P1D"]
        assert "team:* = P1D (cutoff now 2026-03-04T09:00:00)" in text(app, "#windows")
        # No preview yet: "Run sweep" is shown dimmed and does nothing (issue 32: keys that
        # cannot apply are dimmed; it used to run and say "preview the sweep first").
        from tests.test_tui_keybar import key_states

        assert key_states(app)["Run sweep"] == "off"
        await pilot.press("s")
        await idle(pilot)
        assert not isinstance(app.screen, ConfirmDialog)
        before = statuses(story.path)
        await pilot.press("p")
        await idle(pilot)
        preview = app.screen.query_one("#preview", DataTable)
        assert cell_texts(preview, story["name"])[-1] == "skipped: on hold"
        due = [k for k in keys(preview) if k != story["name"]]
        assert story["mistake"] in due and story["plan2"] in due and len(due) == 7
        assert "would expire 7 fact(s), skip 1 on hold" in text(app, "#summary")
        assert statuses(story.path) == before  # a preview writes nothing
        await pilot.press("s")
        await idle(pilot)
        assert isinstance(app.screen, ConfirmDialog)
        listed = str(app.screen.query_one("#list", Static).render())
        assert all(f in listed for f in due) and story["name"] not in listed
        await pilot.press("y")
        await idle(pilot, rounds=5)
        after = statuses(story.path)
        assert all(after[f] == "expired" for f in due)
        assert after[story["name"]] == "active"
        bar = app.screen.query_one("#progress", ProgressBar)
        assert bar.total == 2 and bar.progress == 2
        assert "Sweep done: expired 7 fact(s), skipped 1 on hold" in text(app, "#certificate")
        assert "complete" in text(app, "#certificate")
        with Ledger.open(story.path, readonly=True) as led:
            expire = [e for e in led.history(story["plan2"]).events if e.kind == "expire"]
            assert expire and expire[0].actor == "user:dpo"


async def test_explicit_cutoff_under_a_policy_without_windows(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await pilot.press("4")
        await idle(pilot)
        await pilot.press("p")
        await idle(pilot)
        assert "nothing to do" in text(app, "#summary")
        await pilot.press("c")
        assert app.screen.focused is app.screen.query_one("#before", Input)
        await pilot.press(*"2026-03-02T10:30:00Z", "enter")
        await idle(pilot)
        preview = app.screen.query_one("#preview", DataTable)
        assert keys(preview) == [story["plan"], story["region"], story["name"]]
        await pilot.press("c", "ctrl+a", "ctrl+k", *"soon", "enter")
        await idle(pilot)
        assert any("(invalid_time)" in n for n in notes(app))


async def test_integrity_verify_projection_checkpoint_and_policies(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await pilot.press("5")
        await idle(pilot)
        assert isinstance(app.screen, IntegrityScreen)
        status = text(app, "#status")
        assert "11 events" in status and "no pending scrubs" in status
        assert f"policy in force {app.access.policy.hash[:16]} (recorded)" in status
        policies = app.screen.query_one("#policies", DataTable)
        assert policies.row_count == 1 and "in force" in [str(c) for c in
                                                          policies.get_row_at(0)]
        await pilot.press("v")
        await idle(pilot)
        assert "chain verified: 11 events" in text(app, "#verify")
        bar = app.screen.query_one("#progress", ProgressBar)
        assert bar.total == 11 and bar.progress == 11
        await pilot.press("c")
        await idle(pilot)
        assert "projection matches the events (8 facts" in text(app, "#check")
        await pilot.press("k")
        await idle(pilot)
        with Ledger.open(story.path, readonly=True) as led:
            head = led.event_at(led.head_seq())
            assert head is not None and (head.kind, head.actor) == ("checkpoint", "user:dana")
        assert any("signed checkpoint of event #11" in n for n in notes(app))
        assert "12 events" in text(app, "#status")
        await pilot.press("o")
        await idle(pilot)
        assert "[retention.windows]" in text(app, "#policy_text")


async def test_integrity_shows_a_broken_chain(story: Story) -> None:
    import apsw

    conn = apsw.Connection(str(story.path))
    conn.execute("DROP TRIGGER events_append_only_update")
    conn.execute("UPDATE events SET actor = 'user:mallory' WHERE seq = 4")
    conn.close()
    app = app_on(story.path)
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await pilot.press("5")
        await idle(pilot)
        await pilot.press("v")
        await idle(pilot)
        assert "chain BROKEN at event 4" in text(app, "#verify")
        assert any("chain broken at event 4" in n for n in notes(app))
