"""Holds: facts on legal hold with who placed it and why; place and release holds."""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Header, Input, Static

from custody_app.interfaces.tui.access import LedgerAccess
from custody_app.ledger.readmodels import HoldPage
from screens.base import (
    PAGE_KEYS,
    ColumnSets,
    LedgerScreen,
    Loaded,
    Table,
    cursor_key,
    focus_now,
    short,
    show,
    turn_page,
)
from screens.keybar import KeyBar
from screens.reason import ReasonDialog

PAGE = 50


class HoldsScreen(LedgerScreen):
    """Legal holds block forget and sweeps (a held fact can still be retracted)."""

    CSS_PATH = "holds.tcss"
    BINDINGS = [
        Binding("h", "place", "Place hold"),
        Binding("u", "release", "Release"),
        *PAGE_KEYS,
        Binding("enter", "open_fact", "Why", show=False),
    ]

    def __init__(self, access: LedgerAccess) -> None:
        super().__init__(access)
        self.pages: list[int] = [0]
        self.page: HoldPage | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="fact id to place on hold, then enter (or h)", id="fact")
        table: DataTable[Any] = Table(id="holds", cursor_type="row", zebra_stripes=True)
        # At 80 columns: subject, predicate, value, status, who held it and why; the rest after.
        self.sets = ColumnSets(self, table, ("fact", "subject", "predicate", "value", "status",
                                             "held by", "since", "reason"),
                               ((1, 14), (2, 14), (3, 12), (4, 9), (5, 12), (7, 0), (6, 0),
                                (0, 0)))
        yield table
        yield Static(id="pager")
        yield KeyBar()

    def on_mount(self) -> None:
        focus_now(self.query_one("#holds", DataTable))

    def on_resize(self) -> None:
        self.sets.resized()

    def reload(self) -> None:
        self.load(self.pages[-1])

    @work(thread=True, exclusive=True, exit_on_error=False, group="read")
    def load(self, after: int) -> None:
        self.run_read("holds", lambda ledger: ledger.holds(after_seq=after, limit=PAGE))

    def on_loaded(self, message: Loaded) -> None:
        if message.what != "holds":
            return
        self.page = page = message.data
        self.call_after_refresh(self.refresh_bindings)  # release follows the rows
        self.sets.fill([
            (i.fact.fact_id, [i.fact.fact_id, i.fact.subject, i.fact.predicate,
                              "(erased)" if i.fact.erased else short(i.fact.value, 30),
                              i.fact.status, i.held_by or "", (i.held_at or "")[:19],
                              short(i.reason or "", 40)])
            for i in page.items])
        more = "PgDn: next page" if page.next_after is not None else "last page"
        show(self.query_one("#pager", Static),
            f"page {len(self.pages)} · {len(page.items)} on hold here · {more} · "
            f"acting as {self.access.reviewer}")

    def action_page(self, delta: int) -> None:
        if turn_page(self.pages, delta, self.page.next_after if self.page else None):
            self.reload()

    def action_place(self) -> None:
        box = self.query_one("#fact", Input)
        if box.value.strip():
            self._ask("hold", box.value.strip())
        else:
            focus_now(box)

    @on(Input.Submitted, "#fact")
    def _typed(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self._ask("hold", event.value.strip())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # "Release" is dimmed while no held fact is listed.
        if action == "release":
            return True if self.query_one("#holds", DataTable).row_count else None
        return True

    def action_release(self) -> None:
        key = cursor_key(self.query_one("#holds", DataTable))
        if key is None:
            self.notify("no held fact under the cursor", severity="warning")
            return
        self._ask("release", key)

    def _ask(self, op: str, fact_id: str) -> None:
        title = ("Place a legal hold on " if op == "hold" else "Release the hold on ") + fact_id

        def done(reason: str | None) -> None:
            if reason is not None:
                self.write(op, fact_id, reason)

        self.app.push_screen(ReasonDialog(title), done)

    @work(thread=True, exclusive=False, exit_on_error=False, group="write")
    def write(self, op: str, fact_id: str, reason: str) -> None:
        ok = self.run_write(
            lambda r: f"{'held' if op == 'hold' else 'released'} {fact_id} (event #{r.seq})",
            lambda ledger: getattr(ledger, op)(fact_id, actor=self.access.reviewer,
                                               reason=reason))
        if ok and op == "hold":
            self.app.call_from_thread(self._clear_input)

    def _clear_input(self) -> None:
        self.query_one("#fact", Input).value = ""
        focus_now(self.query_one("#holds", DataTable))

    def action_open_fact(self) -> None:
        key = cursor_key(self.query_one("#holds", DataTable))
        if key:
            self._open(key)

    @on(DataTable.RowSelected, "#holds")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self._open(str(event.row_key.value))

    def _open(self, fact_id: str) -> None:
        from screens.fact import FactScreen

        self.app.push_screen(FactScreen(self.access, fact_id))
