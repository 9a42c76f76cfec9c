"""Readable long lines at 80x24: the fact screen shows a long value whole (wrapped in its own
pane, which the screen scrolls to), and the blast radius shows the node under the cursor in
full below the tree (a tree line is cut at the screen's edge)."""

from __future__ import annotations

from pathlib import Path

from textual.containers import VerticalScroll
from textual.widgets import Static, Tree

from custody_app import Ledger
from custody_app.domain.timeutil import ManualClock
from screens.blast import BlastScreen
from screens.fact import FactScreen
from tests.tuikit import CAUSE, FROZEN, app_on, idle

LONG = " ".join(f"word{n:03d}" for n in range(80)) + " END"  # 640 characters


def ledger_with_long_lines(path: Path) -> tuple[str, str]:
    with Ledger.open(path, clock=ManualClock(FROZEN)) as led:
        root = led.assert_fact("acct:1", "call_summary", LONG, actor="user:a", cause=CAUSE,
                               provenance="attested").fact_id
        child = led.assert_fact("acct:1", "a_rather_long_predicate_name_for_a_derived_fact_x",
                                "y", actor="user:a", cause=CAUSE, provenance="attested",
                                sources=[root]).fact_id
    return root, child


async def test_a_long_value_is_shown_whole_and_wrapped_at_80x24(tmp_path: Path) -> None:
    root, _ = ledger_with_long_lines(tmp_path / "l.db")
    app = app_on(tmp_path / "l.db")
    async with app.run_test(size=(80, 24)) as pilot:
        await idle(pilot)
        app.push_screen(FactScreen(app.access, root))
        await idle(pilot)
        pane = app.screen.query_one("#value", Static)
        assert pane.display
        shown = str(pane.render())
        assert shown.replace("\n", " ").strip('"') == LONG  # whole: nothing cut
        assert pane.size.width <= 80 and pane.size.height >= len(LONG) // 80 + 1  # wrapped
        body = app.screen.query_one("#body", VerticalScroll)
        assert body.max_scroll_y > 0  # more than 24 lines: the screen scrolls to the rest
        body.scroll_end(animate=False)
        await pilot.pause()
        assert body.scroll_y == body.max_scroll_y


async def test_the_blast_node_under_the_cursor_is_shown_in_full(tmp_path: Path) -> None:
    root, child = ledger_with_long_lines(tmp_path / "l.db")
    app = app_on(tmp_path / "l.db")
    async with app.run_test(size=(80, 24)) as pilot:
        await idle(pilot)
        app.push_screen(BlastScreen(app.access, root, fact_screen=FactScreen))
        await idle(pilot)
        await pilot.press("down")
        await idle(pilot)
        tree = app.screen.query_one("#tree", Tree)
        assert tree.cursor_node is not None and tree.cursor_node.data == child
        line = str(tree.cursor_node.label)
        assert len(line) > 80  # longer than the screen: the tree cuts it
        detail = app.screen.query_one("#detail", Static)
        assert str(detail.render()).replace("\n", " ") == line
        assert detail.size.height >= 2  # wrapped onto more lines, not cut


async def test_a_structured_value_is_laid_out_on_lines_not_escaped(tmp_path: Path) -> None:
    value = {"plan": "business", "note": "a long note " * 8, "tags": "[/] [b]x"}
    with Ledger.open(tmp_path / "s.db", clock=ManualClock(FROZEN)) as led:
        fact = led.assert_fact("acct:1", "plan", value, actor="user:a", cause=CAUSE,
                               provenance="attested").fact_id
    app = app_on(tmp_path / "s.db")
    async with app.run_test(size=(80, 24)) as pilot:
        await idle(pilot)
        app.push_screen(FactScreen(app.access, fact))
        await idle(pilot)
        shown = str(app.screen.query_one("#value", Static).render())
        assert shown.startswith('{\n  "note": ') and '\n  "plan": "business",' in shown
        assert "\\x0a" not in shown and '"tags": "[/] [b]x"' in shown  # tags shown as text
