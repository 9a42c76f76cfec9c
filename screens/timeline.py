"""Timeline: the ledger's events newest first (seq, time, kind, actor, the fact's subject and
predicate, its status now, a short summary), following the ledger live; enter opens the fact."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Header, Static

from custody_app.domain.escaping import escape_markup, escape_text
from custody_app.interfaces.tui.access import LedgerAccess
from custody_app.ledger.readmodels import TimelineEvent, TimelinePage
from screens.base import (
    PAGE_KEYS,
    Failed,
    LedgerScreen,
    Loaded,
    Table,
    cursor_key,
    fill,
    focus_now,
    forget_rows,
    reset_columns,
    short,
    show,
    turn_page,
)
from screens.keybar import KeyBar
from screens.labels import Labels

PAGE = 50
COLUMNS = ("seq", "time", "kind", "actor", "subject", "predicate", "status", "summary")
# Below this many columns the table keeps what a reader scans by (the time and actor of the
# row under the cursor are in the line below the table).
NARROW = 120
PRIORITY = (0, 2, 4, 5, 7)  # seq, kind, subject, predicate, summary


class TimelineScreen(LedgerScreen):
    """Every event as it is appended, here or by another process (the app's live watcher
    reloads the open screen whenever the chain head moves)."""

    CSS_PATH = "timeline.tcss"
    BINDINGS = [
        *PAGE_KEYS,
        Binding("enter", "open_fact", "Open fact"),
    ]

    def __init__(self, access: LedgerAccess) -> None:
        super().__init__(access)
        self.pages: list[int | None] = [None]  # None: the newest page, following the head
        self.page: TimelinePage | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        table: DataTable[Any] = Table(id="events", cursor_type="row", zebra_stripes=True)
        self.narrow = self.app.size.width < NARROW
        table.add_columns(*self._columns())
        yield table
        yield Static(id="detail")
        yield Static(id="pager")
        yield KeyBar()

    def on_mount(self) -> None:
        focus_now(self.query_one("#events", DataTable))

    def reload(self) -> None:
        self.load(self.pages[-1])

    @work(thread=True, exclusive=True, exit_on_error=False, group="read")
    def load(self, before: int | None) -> None:
        self.run_read("timeline", lambda ledger: ledger.timeline(before_seq=before, limit=PAGE))

    def _columns(self) -> tuple[str, ...]:
        return tuple(COLUMNS[i] for i in PRIORITY) if self.narrow else COLUMNS

    def on_resize(self) -> None:
        """The column set follows the terminal's width, not the width it was first drawn at."""
        narrow = self.app.size.width < NARROW
        if narrow != self.narrow or narrow:
            self.narrow = narrow
            table = self.query_one("#events", DataTable)
            reset_columns(table, self._columns())
            self._fill()

    def on_failed(self, message: Failed) -> None:
        """A read that fails says so on the screen, not only in a passing notice: the table
        is emptied (it would show a stale page as if live) and the line under it names the
        error; the next change of the ledger reads again."""
        super().on_failed(message)
        if message.what != "timeline":
            return
        self.page = None
        table = self.query_one("#events", DataTable)
        table.clear()
        forget_rows(table)
        words = escape_markup(escape_text(message.message))
        show(self.query_one("#detail", Static),
             f"[b $error]cannot read the timeline:[/] {words} ({message.code})")
        show(self.query_one("#pager", Static), "the timeline is not live: the read failed; "
             "it is read again when the ledger changes")
        self.refresh_bindings()

    def on_loaded(self, message: Loaded) -> None:
        if message.what != "timeline":
            return
        self.page = message.data
        self._fill()

    def _fill(self) -> None:
        page = self.page
        if page is None:
            return
        labels = self.labels()
        width = 14 if self.narrow else 40
        rows = [(str(e.seq), _cells(e, labels, width)) for e in page.events]
        if self.narrow:
            # The summary takes what is left of the width (79 inside the scrollbar at 80,
            # 2 of padding per cell, seq 5, kind 10, subject and predicate 14 each).
            rest = max(12, self.app.size.width - 1 - 10 - 5 - 10 - 14 - 14)
            rows = [(key, [*(cells[i] for i in PRIORITY[:-1]), short(str(cells[7]), rest)])
                    for key, cells in rows]
        fill(self.query_one("#events", DataTable), rows)
        self._detail()
        live = "live: newest first" if len(self.pages) == 1 else "older events (PgUp: newer)"
        more = " · PgDn: older" if page.next_before is not None else " · the first event"
        show(self.query_one("#pager", Static),
             f"{page.head_seq:,} events · page {len(self.pages)} · {live}{more} · "
             "enter: open the fact")
        self.refresh_bindings()

    def action_page(self, delta: int) -> None:
        if turn_page(self.pages, delta, self.page.next_before if self.page else None):
            self.reload()

    def _event(self, key: str | None) -> TimelineEvent | None:
        return next((e for e in (self.page.events if self.page else []) if str(e.seq) == key),
                    None)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # An event about no fact (policy, checkpoint, served, acted) has nothing to open.
        if action == "open_fact":
            event = self._event(cursor_key(self.query_one("#events", DataTable)))
            return True if event is not None and event.fact_id else None
        return True

    def action_open_fact(self) -> None:
        self._open(cursor_key(self.query_one("#events", DataTable)))

    @on(DataTable.RowSelected, "#events")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self._open(str(event.row_key.value))

    @on(DataTable.RowHighlighted, "#events")
    def _moved(self, event: DataTable.RowHighlighted) -> None:
        self.refresh_bindings()  # "open fact" follows the row under the cursor
        self._detail()

    def _detail(self) -> None:
        """The event under the cursor in full, wrapped (a table cell is cut at its edge)."""
        e = self._event(cursor_key(self.query_one("#events", DataTable)))
        about = f" · {e.fact_id} {e.subject} {e.predicate}" if e and e.fact_id else ""
        show(self.query_one("#detail", Static), "" if e is None else
             f"[b]#{e.seq}[/b] {e.kind} by {e.actor} at {e.tx_at[:19]}Z{about}: {e.summary}")

    def _open(self, key: str | None) -> None:
        from screens.fact import FactScreen

        event = self._event(key)
        if event is not None and event.fact_id:
            self.app.push_screen(FactScreen(self.access, event.fact_id))


def _cells(e: TimelineEvent, labels: Labels, width: int) -> list[str | Text]:
    status: str | Text = labels.status(e.status) if e.status else ""
    if e.provenance and e.kind in ("assert", "retract"):
        status = Text.assemble(status, " ", labels.provenance(e.provenance))
    return [str(e.seq), e.tx_at[:19].replace("T", " "), e.kind, e.actor,
            short(e.subject or "", width), short(e.predicate or "", width), status, e.summary]
