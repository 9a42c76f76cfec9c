"""The Actions screen on the refund incident: search by filter, enter shows the ten explain
answers, `p` writes the signed action pack, which verifies offline."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Static

from custody_app.evidence.actionpack import verify_action_pack
from screens.actions import ActionsScreen
from tests.test_tui_blast import incident  # noqa: F401  (the fixture)
from tests.tuikit import app_on, idle, keys, notes, open_screen


async def test_search_explain_and_pack_from_the_actions_screen(
        incident: tuple[Path, dict[str, str]]) -> None:  # noqa: F811
    path, ids = incident
    app = app_on(path)
    async with app.run_test(size=(170, 50), notifications=True) as pilot:
        await open_screen(pilot, "7")
        assert isinstance(app.screen, ActionsScreen)
        table = app.screen.query_one("#actions", DataTable)
        assert len(keys(table)) == 2
        await pilot.press("slash", *"tool=billing.issue_refund", "enter")
        await idle(pilot)
        [only] = keys(table)
        await pilot.press("enter")
        await idle(pilot)
        answers = str(app.screen.query_one("#answers", Static).render())
        assert answers.splitlines()[0].startswith("who acted: agent:support-bot")
        assert "who authorised it: user:ops-lead" in answers
        assert "what needs reversal:" in answers and ids["wrong-plan"] in answers
        await pilot.press("p")
        await idle(pilot)
        written = path.parent / f"actionpack-{only.replace(':', '-')}.json"
        assert written.exists(), notes(app)
        pem = Path(f"{path}.pub").read_text()
        assert verify_action_pack(written.read_text(), pem).valid
        await pilot.press("p")
        await idle(pilot)
        assert any("output_exists" in n for n in notes(app))
        await pilot.press("slash", *"colour=red", "enter")
        await idle(pilot)
        assert any("unknown filter" in n for n in notes(app))
