"""The terminal app shows stored strings escaped: a value, cause and reason holding terminal
escape sequences and bidirectional overrides reach no widget raw (the real app, run_test)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Static

from custody_app.ledger.facade import Ledger
from screens.fact import FactScreen
from tests.tuikit import app_on, idle

# Control characters and bidi overrides; markup tags are tested apart below.
ESC = "\x1b]0;pwned\x07\x1bc\x9b31m\u202e"


def _raw(text: str) -> bool:
    return any(c in text for c in ("\x1b", "\x07", "\x9b", "\u202e"))


async def test_the_fact_screen_escapes_what_an_agent_stored(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with Ledger.open(path) as ledger:
        fact = ledger.assert_fact("acct:1", "plan", f"pro {ESC}", actor="user:a",
                                  cause={"kind": "tool", "ref": "crm#1", "detail": f"d {ESC}"},
                                  provenance="attested")
        ledger.hold(fact.fact_id, actor="user:a", reason=f"hold {ESC}")
    app = app_on(path)
    async with app.run_test(size=(160, 50)) as pilot:
        await idle(pilot)
        app.push_screen(FactScreen(app.access, fact.fact_id))
        await idle(pilot)
        shown = [str(w.render()) for w in app.screen.query(Static)]
        for table in app.screen.query(DataTable):
            shown += [str(cell) for row in range(table.row_count) for cell in table.get_row_at(row)]
        assert shown and not any(_raw(s) for s in shown)
        assert any("\\x1b]0;pwned" in s for s in shown)  # shown, escaped, not dropped


# Markup an agent could store: an unmatched close (which crashed the app), a restyle, a link.
TAGS = "[/] [/b] [bold red]loud [link=https://evil.example]click[/link]"


async def test_stored_markup_tags_neither_crash_nor_restyle_any_screen(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with Ledger.open(path) as ledger:
        fact = ledger.assert_fact(f"acct:{TAGS}", f"plan{TAGS}", f"pro {TAGS}", actor="user:a",
                                  cause={"kind": "tool", "ref": f"crm{TAGS}", "detail": TAGS},
                                  provenance="attested")
        ledger.hold(fact.fact_id, actor="user:a", reason=f"hold {TAGS}")
        ledger.assert_fact("acct:2", f"note{TAGS}", "x", actor="agent:b",
                           cause={"kind": "tool", "ref": f"r{TAGS}"})  # quarantined: Review
    app = app_on(path)
    async with app.run_test(size=(160, 50)) as pilot:
        await idle(pilot)
        for key in ("1", "2", "3", "4", "5", "6", "7", "8"):  # every screen renders the rows
            await pilot.press(key)
            await idle(pilot)
        app.push_screen(FactScreen(app.access, fact.fact_id))
        await idle(pilot)
        shown = " ".join(str(w.render()) for w in app.screen.query(Static))
        assert f"acct:{TAGS}" in shown  # the subject shown as text, tags and all
