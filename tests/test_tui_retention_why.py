"""The Retention preview says why each fact expires: its own age under the window rule, or,
for a fact the cascade reaches, the fact it was derived from and when that one expires."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from textual.widgets import DataTable

from custody_app.domain.timeutil import ManualClock
from custody_app.ledger.facade import Ledger
from screens.retention import RetentionScreen
from tests.tuikit import CAUSE, FROZEN, T0, app_on, cell_texts, idle

POLICY = '[retention.windows]\n"team:*" = "P1D"\norg = "P30D"\n'


def ledger_with_a_derived_fact(path: Path) -> tuple[str, str, str]:
    """A root in team:support (1-day window) and, a day later, a fact derived from it in org
    (30-day window: too young to expire on its own), and an unrelated young org fact."""
    clock = ManualClock(T0)
    with Ledger.open(path, clock=clock) as led:
        root = led.assert_fact("acct:1", "refund", "approved", space="team:support",
                               actor="user:a", cause=CAUSE, provenance="attested").fact_id
        clock.set(T0 + timedelta(days=1))
        derived = led.assert_fact("acct:1", "summary", "refund approved", space="org",
                                  actor="user:a", cause=CAUSE, provenance="attested",
                                  sources=[root]).fact_id
        young = led.assert_fact("acct:2", "plan", "team", space="org", actor="user:a",
                                cause=CAUSE, provenance="attested").fact_id
    return root, derived, young


def test_the_sweep_result_names_the_root_of_a_cascaded_fact(tmp_path: Path) -> None:
    root, derived, young = ledger_with_a_derived_fact(tmp_path / "r.db")
    policy = tmp_path / "p.toml"
    policy.write_text(POLICY)
    with Ledger.open(tmp_path / "r.db", policy=policy, clock=ManualClock(FROZEN)) as led:
        result = led.sweep(dry_run=True)
    assert result.expired == [root, derived]
    own, cascaded = result.reasons[root], result.reasons[derived]
    assert own.root == root and cascaded.root == root
    assert cascaded.rule == "team:* = P1D" and cascaded.learned_at.startswith("2026-03-02T09:00")
    assert (cascaded.expires_at() or "").startswith("2026-03-03T09:00")
    assert young not in result.reasons


async def test_the_preview_says_why_a_cascaded_fact_expires(tmp_path: Path) -> None:
    root, derived, young = ledger_with_a_derived_fact(tmp_path / "r.db")
    policy = tmp_path / "p.toml"
    policy.write_text(POLICY)
    app = app_on(tmp_path / "r.db", policy=policy)
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press("4")
        await idle(pilot)
        assert isinstance(app.screen, RetentionScreen)
        await pilot.press("p")
        await idle(pilot)
        preview = app.screen.query_one("#preview", DataTable)
        assert cell_texts(preview, derived)[4] == (
            f"derived from {root}, which expires on 2026-03-03 09:00 under rule team:* = P1D")
        assert cell_texts(preview, root)[4] == (
            "learned 2026-03-02 09:00; expires on 2026-03-03 09:00 under rule team:* = P1D")
        assert young not in [str(k.value) for k in preview.rows]
