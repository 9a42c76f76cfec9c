"""A reviewer's day at 80x24: every screen's essential columns visible without scrolling (the
rest on a wide terminal, following a resize), dialogs that fit with their borders and buttons,
a footer that always shows help, palette and quit, a header that keeps the count waiting, and
the keys a newcomer expects (1-8 return to the list, / on Beliefs is the subject, q quits, F1
is help, space says it marked, keys that cannot apply are dimmed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.geometry import Region
from textual.widgets import Button, DataTable, Input

from custody_app.ledger.facade import Ledger
from screens.beliefs import BeliefsScreen
from screens.blast import BlastScreen
from screens.confirm import ConfirmDialog
from screens.fact import FactScreen
from screens.help import HelpScreen
from screens.keybar import KeyBar
from screens.reason import ReasonDialog
from screens.review import ReviewScreen
from tests.test_tui_keybar import key_states
from tests.tuikit import (
    Story,
    add_helper_claims,
    app_on,
    build_story,
    idle,
    keys,
    notes,
    open_screen,
    screen_text,
)

SMALL = (80, 24)


@pytest.fixture
def story(tmp_path: Path) -> Story:
    made = build_story(tmp_path / "story.db")
    with Ledger.open(made.path) as led:  # a pending retraction waits with the claims
        assert led.retract(made["plan2"], actor="agent:stray", reason="I think it is wrong",
                           provenance="claimed").pending
    return made


def labels(table: DataTable[Any]) -> list[str]:
    return [str(c.label) for c in table.columns.values()]


def fits(table: DataTable[Any]) -> bool:
    """Every column inside the table's width: nothing to scroll to sideways."""
    return table.virtual_size.width <= table.scrollable_content_region.width


async def test_review_at_80x24_shows_what_a_claim_is_judged_by(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await open_screen(pilot, "2")
        table = app.screen.query_one("#queue", DataTable)
        assert labels(table) == ["✓", "subject", "predicate", "value", "writer", "why it waits"]
        assert table.row_count == 3 and fits(table), (table.virtual_size, table.size)
        retraction = [str(c) for c in table.get_row_at(0)]
        assert retraction[1:3] == ["acct:1042", "plan"] and "retraction" in retraction[5]
        claim = [str(c) for c in table.get_row(story["claim2"])]
        assert claim[1:5] == ["acct:2077", "region", "eu-central", "agent:support…"]
        assert claim[5] == "would replace…"  # the belief it would replace: on the fact screen
        await pilot.resize_terminal(160, 48)
        await idle(pilot)
        assert "fact" in labels(table) and "cause" in labels(table)  # the rest, when wide
        assert [str(c) for c in table.get_row(story["claim2"])][3] == "agent:support-bot"
        await pilot.resize_terminal(*SMALL)
        await idle(pilot)
        assert labels(table)[-1] == "why it waits" and fits(table)


async def test_beliefs_at_80x24_shows_subject_predicate_value_and_status(story: Story) -> None:
    from custody_app.domain.timeutil import ManualClock
    from tests.tuikit import CAUSE, FROZEN

    with Ledger.open(story.path, clock=ManualClock(FROZEN)) as led:  # long names and values
        led.assert_fact("order:ORD-77812-EU-WEST", "max_refund_without_approval_eur",
                        {"amount_eur": 245, "invoice": "INV-2026-0099", "note": "x" * 80},
                        actor="agent:support-bot", cause=CAUSE, provenance="attested")
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await idle(pilot)
        table = app.screen.query_one("#facts", DataTable)
        assert labels(table) == ["Δ", "subject", "predicate", "value", "status", "prov"]
        assert table.row_count and fits(table), (table.virtual_size, table.size)
        row = [str(c) for c in table.get_row(story["summary"])]
        assert row[1:3] == ["acct:1042", "summary"] and row[3].startswith("business plan")
        assert row[4:] == ["active", "attested"]
        await pilot.resize_terminal(160, 48)
        await idle(pilot)
        assert {"fact", "space", "valid from", "actor"} <= set(labels(table))


@pytest.mark.parametrize("key", ["1", "2", "3", "4", "5", "6", "7", "8"])
async def test_the_footer_shows_help_palette_and_quit_on_every_screen(story: Story,
                                                                      key: str) -> None:
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await open_screen(pilot, key)
        bar = app.screen.query_one(KeyBar)
        first = str(bar.render()).split("\n")[0]
        assert bar.region.bottom == 24 and bar.region.width == 80
        for words in ("F1  help", "^p  palette", "q  quit"):
            assert words in first[:80], first


async def test_the_header_keeps_the_count_waiting_at_80_columns(story: Story) -> None:
    from textual.widgets._header import HeaderTitle

    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await idle(pilot)
        title = app.screen.query_one(HeaderTitle)
        shown = str(title.render())
        assert title.region.width < len(shown)  # the header is cut at 80 columns...
        cut = shown[:title.region.width]
        assert "3 waiting for review" in cut, cut  # ...after the count, never through it


async def _in_view(pilot: Any) -> None:
    """The open dialog and each of its buttons inside the 80x24 terminal, borders included."""
    await idle(pilot)
    screen = pilot.app.screen
    dialog = screen.query_one("#dialog")
    terminal = Region(0, 0, *SMALL)
    assert terminal.contains_region(dialog.region), dialog.region
    inner = dialog.region.shrink(dialog.styles.gutter)
    for button in screen.query(Button):
        assert inner.contains_region(button.region), (button.label, button.region, inner)
        assert button.region.height >= 1 and str(button.label)


async def test_dialogs_fit_80x24_with_their_borders_and_buttons(story: Story) -> None:
    add_helper_claims(story, 40)
    app = app_on(story.path, reviewer="user:counsel")
    async with app.run_test(size=SMALL) as pilot:
        await open_screen(pilot, "2")
        await pilot.press("M")  # mark the whole queue: a long list in the dialog
        await idle(pilot)
        await pilot.press("a")
        await _in_view(pilot)
        assert isinstance(app.screen, ReasonDialog)
        assert "(esc)" in str(app.screen.query_one("#cancel", Button).label)
        await pilot.press("escape")
        await idle(pilot)
        app.push_screen(FactScreen(app.access, story["plan2"]))
        await idle(pilot)
        await pilot.press("f")  # forget: the confirmation names what it erases
        await idle(pilot)
        assert isinstance(app.screen, ConfirmDialog)
        await _in_view(pilot)
        await pilot.press("escape")
        await idle(pilot)
        await pilot.press("4")
        await idle(pilot)
        await pilot.press("c", *"2026-03-06T00:00:00Z", "enter")
        await idle(pilot)
        await pilot.press("p")  # preview, then the sweep's confirmation: 50 facts listed
        await idle(pilot)
        await pilot.press("s")
        await idle(pilot)
        assert isinstance(app.screen, ConfirmDialog)
        await _in_view(pilot)
        await pilot.press("escape")
        await idle(pilot)
        await pilot.press("f1")
        await idle(pilot)
        assert isinstance(app.screen, HelpScreen)
        await _in_view(pilot)


async def test_number_keys_return_to_the_screens_list(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await idle(pilot)
        await pilot.press("enter")  # a fact from Beliefs
        await idle(pilot)
        assert isinstance(app.screen, FactScreen)
        await pilot.press("b")  # and its blast radius over it
        await idle(pilot)
        assert isinstance(app.screen, BlastScreen)
        await open_screen(pilot, "2")
        await pilot.press("down", "enter")  # a claim from Review
        await idle(pilot)
        assert isinstance(app.screen, FactScreen)
        await open_screen(pilot, "1")
        assert isinstance(app.screen, BeliefsScreen)  # the list, not the fact opened last
        await open_screen(pilot, "2")
        assert isinstance(app.screen, ReviewScreen)
        await open_screen(pilot, "2")  # pressed again on the list: stays
        assert isinstance(app.screen, ReviewScreen)


async def test_slash_on_beliefs_is_the_subject_filter(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await idle(pilot)
        await pilot.press("slash", *"acct:2077", "enter")
        await idle(pilot)
        assert app.screen.query_one("#subject", Input).value == "acct:2077"
        table = app.screen.query_one("#facts", DataTable)
        assert keys(table) == [story["region"]]


async def test_q_quits_and_c_toggles_the_quarantined_rows(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await idle(pilot)
        table = app.screen.query_one("#facts", DataTable)
        assert story["claim"] not in keys(table)
        await pilot.press("c")
        await idle(pilot)
        assert story["claim"] in keys(table)
        assert key_states(app)["±quarantined"] == "on"
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0 and not app.is_running


async def test_q_typed_in_a_box_is_a_letter_not_quit(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await idle(pilot)
        await pilot.press("slash", *"acq")
        await pilot.pause()
        assert app.is_running and app.screen.query_one("#subject", Input).value == "acq"


async def test_f1_opens_help_and_closes_it(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await idle(pilot)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, BeliefsScreen)


async def test_space_in_review_says_it_marked(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await open_screen(pilot, "2")
        await pilot.press("down", "space")
        await idle(pilot)
        assert screen_text(app, "#pager").startswith("✓ 1 marked"), screen_text(app, "#pager")
        assert f"marked {story['claim']} · 1 marked" in notes(app)
        await pilot.press("up", "space")
        await idle(pilot)
        assert screen_text(app, "#pager").startswith("✓ 0 marked")
        assert f"unmarked {story['claim']} · 0 marked" in notes(app)


async def test_blast_dims_the_keys_that_cannot_apply(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await open_screen(pilot, "6")
        states = key_states(app)
        assert states["Export pack"] == "off" and states["Expand all"] == "off"
        assert states["Back"] == "off"  # opened by its number: nothing under it
        await pilot.press("slash", *story["plan2"], "enter")
        await idle(pilot)
        states = key_states(app)
        assert states["Export pack"] == "on" and states["Expand all"] == "on"


async def test_a_hostile_value_cut_to_a_narrow_cell_stays_inert(tmp_path: Path) -> None:
    """A claim's value built to drive the terminal or the markup, cut to the narrow column:
    what shows is its escaped text (cutting never makes a tag or an escape sequence)."""
    from custody_app.domain.timeutil import ManualClock
    from tests.tuikit import CAUSE, FROZEN

    story = build_story(tmp_path / "t.db")
    hostile = "[link=https://evil.example]ok[/link]\x1b[2J\u202e[b]x[/b]\x07" * 3
    with Ledger.open(story.path, clock=ManualClock(FROZEN)) as led:
        fact = led.assert_fact("acct:666", "note", hostile, actor="agent:evil", cause=CAUSE,
                               provenance="claimed").fact_id
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await open_screen(pilot, "2")
        table = app.screen.query_one("#queue", DataTable)
        from rich.text import Text
        from textual.widgets._data_table import default_cell_formatter

        value = table.get_row(fact)[3]
        shown = default_cell_formatter(value)  # as the table renders the cell
        assert isinstance(shown, Text)
        assert shown.plain.endswith("…") and len(shown.plain) <= 14, shown.plain
        assert shown.plain.startswith("[link=https:")  # the tag shown as text...
        assert not any("link" in str(span.style) for span in shown.spans)  # ...never a link
        for raw in ("\x1b", "\u202e", "\x07"):
            assert raw not in shown.plain
        assert fits(table)


@pytest.mark.parametrize(("key", "table_id", "first"), [
    ("3", "#holds", ["subject", "predicate", "value", "status", "held by"]),
    ("7", "#actions", ["seq", "tool", "ref", "outcome", "actor"])])
async def test_holds_and_actions_lead_with_what_a_reader_needs_at_80x24(
        story: Story, key: str, table_id: str, first: list[str]) -> None:
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await open_screen(pilot, key)
        table = app.screen.query_one(table_id, DataTable)
        assert labels(table)[:len(first)] == first
        await pilot.resize_terminal(160, 48)
        await idle(pilot)
        assert labels(table)[0] in ("fact", "seq") and labels(table)[1] in ("subject", "time")


async def test_run_sweep_and_release_are_dimmed_until_they_can_apply(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await open_screen(pilot, "4")
        assert key_states(app)["Run sweep"] == "off"  # nothing previewed yet
        await pilot.press("c", *"2026-03-02T10:30:00Z", "enter")
        await idle(pilot)
        await pilot.press("p")
        await idle(pilot)
        assert key_states(app)["Run sweep"] == "on"
        await open_screen(pilot, "3")
        assert key_states(app)["Release"] == "on"  # the story's hold is listed
    empty = build_story(story.path.parent / "other.db")
    with Ledger.open(empty.path) as led:
        led.release(empty["name"], actor="user:counsel", reason="case closed")
    app = app_on(empty.path)
    async with app.run_test(size=SMALL) as pilot:
        await open_screen(pilot, "3")
        assert key_states(app)["Release"] == "off"


async def test_q_in_a_dialog_does_not_quit(story: Story) -> None:
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await idle(pilot)
        app.push_screen(FactScreen(app.access, story["region"]))
        await idle(pilot)
        await pilot.press("f")  # the forget confirmation: its focus is on Cancel
        await idle(pilot)
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("q")
        await pilot.pause()
        assert app.is_running and isinstance(app.screen, ConfirmDialog)


async def test_fact_history_at_80x24_shows_when_what_and_who_without_scrolling(
        story: Story) -> None:
    """The Fact screen's history table at 80 columns: when, what happened and who, inside the
    table's width (the column widths, padding included, sum within it); seq and detail come
    back on a wide terminal, and go again after a resize back."""
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await idle(pilot)
        app.push_screen(FactScreen(app.access, story["plan2"]))
        await idle(pilot)
        table = app.screen.query_one("#events", DataTable)

        def widths() -> int:
            return sum(c.get_render_width(table) for c in table.columns.values())

        assert labels(table) == ["tx at", "kind", "actor"]
        assert table.row_count >= 2
        assert widths() <= table.scrollable_content_region.width, (widths(), table.size)
        assert fits(table), (table.virtual_size, table.scrollable_content_region)
        first = [str(c) for c in table.get_row_at(0)]
        assert first == [story.tx["plan2"][:19], "assert", "agent:support-bot"]
        await pilot.resize_terminal(160, 48)
        await idle(pilot)
        assert labels(table) == ["seq", "kind", "tx at", "actor", "detail"]
        assert [str(c) for c in table.get_row_at(0)][1:4] == first[1:2] + first[:1] + first[2:]
        await pilot.resize_terminal(*SMALL)
        await idle(pilot)
        assert labels(table) == ["tx at", "kind", "actor"] and fits(table)
        assert widths() <= table.scrollable_content_region.width


async def test_integrity_policies_fit_80x24_and_show_the_whole_hash_when_wide(
        story: Story) -> None:
    """The policy history at 80 columns: the hash cut, its file and "in force" in view; the
    whole hash on a wide terminal, following a resize."""
    app = app_on(story.path)
    async with app.run_test(size=SMALL) as pilot:
        await open_screen(pilot, "5")
        table = app.screen.query_one("#policies", DataTable)
        assert table.row_count >= 1 and fits(table), (table.virtual_size, table.size)
        row = [str(c) for c in table.get_row_at(0)]
        assert row[2].endswith("…") and len(row[2]) == 13 and row[3] == "in force"
        await pilot.resize_terminal(160, 48)
        await idle(pilot)
        row = [str(c) for c in table.get_row_at(0)]
        assert len(row[2]) == 64 and row[4] == "in force"
