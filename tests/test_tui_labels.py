"""Status and provenance in colour, never colour alone: on Beliefs, Review, Fact, Blast radius
and Timeline each status and provenance is its word, styled by its class in app.tcss."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.widgets import DataTable, Static, Tree

from screens.blast import BlastScreen
from screens.fact import FactScreen
from tests.tuikit import app_on, build_story, idle


def cell(table: DataTable[Any], key: str, column: int) -> Any:
    return table.get_row(key)[column]


def style_of(app: Any, name: str) -> Style:
    return app.screen.get_component_rich_style(name, partial=True)


def word_in_style(text: Text, word: str, style: Style) -> bool:
    """`word` is in `text` and every character of it carries `style`'s colour and weight."""
    start = text.plain.find(word)
    if start < 0:
        return False
    whole = [(0, len(text.plain), text.style)] if text.style else []
    for begin, end, given in [*whole, *((s.start, s.end, s.style) for s in text.spans)]:
        if begin <= start and end >= start + len(word):
            got = Style.parse(given) if isinstance(given, str) else given
            if got.color == style.color and got.bold == style.bold:
                return True
    return False


async def test_each_status_and_provenance_is_its_word_in_its_own_style(tmp_path: Path) -> None:
    story = build_story(tmp_path / "t.db")
    app = app_on(story.path)
    async with app.run_test(size=(200, 50)) as pilot:
        await idle(pilot)
        active, retracted = style_of(app, "status--active"), style_of(app, "status--retracted")
        quarantined, claimed = (style_of(app, "status--quarantined"),
                                style_of(app, "prov--claimed"))
        # The classes of app.tcss give each a colour of its own.
        assert len({s.color for s in (active, retracted, quarantined, claimed)}) >= 3
        assert active.color is not None and active.bold

        beliefs = app.screen.query_one("#facts", DataTable)
        status = cell(beliefs, story["plan2"], 6)
        assert status.plain == "active" and word_in_style(status, "active", active)
        assert word_in_style(cell(beliefs, story["plan2"], 8), "attested",
                             style_of(app, "prov--attested"))
        held = cell(beliefs, story["name"], 7)
        assert word_in_style(held, "held", style_of(app, "status--held"))
        await pilot.press("r")  # show retracted facts too
        await idle(pilot)
        assert word_in_style(cell(beliefs, story["mistake"], 6), "retracted", retracted)

        await pilot.press("2")
        await idle(pilot)
        queue = app.screen.query_one("#queue", DataTable)
        state = cell(queue, story["claim"], 8)
        assert state.plain == "quarantined claimed"
        assert word_in_style(state, "quarantined", quarantined)
        assert word_in_style(state, "claimed", claimed)
        supersedes = cell(queue, story["claim2"], 9)
        assert word_in_style(supersedes, "active", active)

        await pilot.press("8")
        await idle(pilot)
        events = app.screen.query_one("#events", DataTable)
        assert word_in_style(cell(events, "7", 6), "retracted", retracted)

        app.push_screen(FactScreen(app.access, story["claim"]))
        await idle(pilot)
        summary: Any = app.screen.query_one("#summary", Static).render()  # Textual Content
        assert "status quarantined" in summary.plain and "claimed" in summary.plain
        styles = {summary.plain[s.start:s.end]: Style.parse(str(s.style)) for s in summary.spans}
        assert styles["quarantined"].color == quarantined.color
        assert styles["claimed"].color == claimed.color

        app.push_screen(BlastScreen(app.access, story["plan2"], fact_screen=FactScreen))
        await idle(pilot)
        tree = app.screen.query_one("#tree", Tree)
        root = tree.root.label
        assert isinstance(root, Text)
        assert word_in_style(root, "STILL BELIEVED (active)", style_of(app, "status--believed"))
