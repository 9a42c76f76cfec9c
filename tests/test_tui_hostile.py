"""The terminal app shows stored strings escaped: a value, cause and reason holding terminal
escape sequences and bidirectional overrides reach no widget raw (the real app, run_test)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Static

from custody_app.ledger.facade import Ledger
from screens.fact import FactScreen
from tests.tuikit import app_on, idle

# No "[" here: stored text is interpolated into Textual markup by the screens, and markup
# injection ("[/b]" in a value) is a separate defect, not covered by this escaping.
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
