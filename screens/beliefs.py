"""Beliefs, as of a moment: the facts believed at (valid time, transaction time), paged, with
status toggles, event-by-event time travel and a diff against now."""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.timer import Timer
from textual.widgets import DataTable, Header, Input, Static

from custody_app.domain.errors import LedgerError
from custody_app.domain.timeutil import normalise
from custody_app.interfaces.tui.access import LedgerAccess
from custody_app.ledger.readmodels import BeliefPage
from screens.base import (
    PAGE_KEYS,
    Failed,
    LedgerScreen,
    Loaded,
    Table,
    box_key,
    fill,
    focus_now,
    reset_columns,
    show,
    turn_page,
)
from screens.belief_rows import belief_cells, contested_of, narrow_cells
from screens.keybar import KeyBar

PAGE = 50
# Seconds after the last key in a filter box before the filter applies.
FILTER_PAUSE_S = 0.3
# Below this many columns the table shows the columns a reader needs first (the fact id and
# the rest are on the fact screen, one enter away).
NARROW = 120
PRIORITY = (0, 2, 3, 4, 6, 8)  # Δ, subject, predicate, value, status, prov (belief_rows)
COLUMNS = ("Δ", "fact", "subject", "predicate", "value", "space", "status", "now", "prov",
           "valid from", "valid to", "actor", "salience")


class BeliefsScreen(LedgerScreen):
    """What the agent believed at a moment, and how that differs from now."""

    CSS_PATH = "beliefs.tcss"
    BINDINGS = [
        Binding("left_square_bracket", "step(-1)", "Back 1 event", key_display="["),
        Binding("right_square_bracket", "step(1)", "Fwd 1 event", key_display="]"),
        box_key("g", "#jump", "Go to instant"),
        Binding("n", "now", "Now"),
        Binding("d", "diff", "Diff vs now"),
        # c: claims (quarantined); q is the app's quit everywhere.
        Binding("c", "show_status('quarantined')", "±quarantined"),
        Binding("r", "show_status('retracted')", "±retracted"),
        Binding("s", "show_status('superseded')", "±superseded"),
        Binding("f", "show_status('forgotten')", "±forgotten"),
        box_key("slash", "#subject", "Subject", key_display="/"),
        *PAGE_KEYS,
        Binding("enter", "open_fact", "Why", show=False),
    ]

    def __init__(self, access: LedgerAccess) -> None:
        super().__init__(access)
        self.at_seq: int | None = None  # None: follow the head (now)
        self.valid_at: str | None = None
        self.filters: dict[str, str | None] = {"space": None, "subject": None, "predicate": None}
        self.show: list[str] = []
        self.diff = False
        self.pages: list[int] = [0]  # after_seq of each page visited
        self.page: BeliefPage | None = None
        self._typing: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="filters"):
            yield Input(placeholder="space", id="space")
            yield Input(placeholder="subject", id="subject")
            yield Input(placeholder="predicate", id="predicate")
            yield Input(placeholder="valid at (ISO; blank: now)", id="valid")
            yield Input(placeholder="tx: ISO or #seq (blank: now)", id="jump")
        yield Static(id="timebar")
        table: DataTable[Any] = Table(id="facts", cursor_type="row", zebra_stripes=True)
        self.narrow = self.app.size.width < NARROW
        table.add_columns(*self._columns())
        yield table
        yield Static(id="pager")
        yield KeyBar()

    def on_mount(self) -> None:
        focus_now(self.query_one("#facts", DataTable))

    # ---- reading -----------------------------------------------------------------------
    def reload(self) -> None:
        self.load(self.pages[-1])

    @work(thread=True, exclusive=True, exit_on_error=False, group="read")
    def load(self, after: int) -> None:
        f = self.filters
        self.run_read("beliefs", lambda ledger: ledger.beliefs(
            self.valid_at, at_seq=self.at_seq, space=f["space"], subject=f["subject"],
            predicate=f["predicate"], show=self.show, diff=self.diff, after_seq=after,
            limit=PAGE))

    def on_loaded(self, message: Loaded) -> None:
        if message.what == "instant":
            self.at_seq = message.data
            focus_now(self.query_one("#facts", DataTable))
            self._restart()
            return
        page: BeliefPage = message.data
        self.page = page
        self._fill()
        show(self.query_one("#timebar", Static),
             _timebar(page, live=self.at_seq is None, live_valid=self.valid_at is None))
        first = (len(self.pages) - 1) * PAGE
        more = "PgDn: next page" if page.next_after is not None else "last page"
        back = " · PgUp: previous" if len(self.pages) > 1 else ""
        show(self.query_one("#pager", Static),
            f"page {len(self.pages)} · rows {first + 1 if page.facts else 0}–"
            f"{first + len(page.facts)} · {more}{back}")

    def _columns(self) -> tuple[str, ...]:
        return tuple(COLUMNS[i] for i in PRIORITY) if self.narrow else COLUMNS

    def _fill(self) -> None:
        if self.page is None:
            return
        contested = contested_of(self.page.facts, self.access.policy.policy.cardinality)
        labels = self.labels()
        rows = [(v.fact_id, belief_cells(v, labels, v.fact_id in contested, width=40))
                for v in self.page.facts]
        if self.narrow:
            rows = [(key, narrow_cells(cells, self.app.size.width)) for key, cells in rows]
        fill(self.query_one("#facts", DataTable), rows)

    def on_resize(self) -> None:
        narrow = self.app.size.width < NARROW
        if narrow != getattr(self, "narrow", narrow) or narrow:
            self.narrow = narrow
            table = self.query_one("#facts", DataTable)
            reset_columns(table, self._columns())
            self._fill()

    # ---- actions -----------------------------------------------------------------------
    def _restart(self) -> None:
        self.pages = [0]
        self._sync_time_boxes()
        self.reload()

    def action_step(self, delta: int) -> None:
        if self.page is None:
            return
        current = self.at_seq if self.at_seq is not None else self.page.head_seq
        self.at_seq = max(0, min(current + delta, self.page.head_seq))
        self._restart()

    def action_now(self) -> None:
        self.at_seq = None
        self._restart()

    def action_diff(self) -> None:
        self.diff = not self.diff
        self._restart()

    def action_show_status(self, status: str) -> None:
        self.show = [s for s in self.show if s != status] if status in self.show \
            else [*self.show, status]
        self._restart()

    def action_page(self, delta: int) -> None:
        if turn_page(self.pages, delta, self.page.next_after if self.page else None):
            self.reload()

    def action_open_fact(self) -> None:
        table = self.query_one("#facts", DataTable)
        if table.row_count:
            self._open(str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value))

    @on(DataTable.RowSelected, "#facts")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self._open(str(event.row_key.value))

    def _open(self, fact_id: str) -> None:
        from screens.fact import FactScreen

        self.app.push_screen(FactScreen(self.access, fact_id))

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        name = event.input.id or ""
        try:
            if name in self.filters:
                if self._typing is not None:
                    self._typing.stop()
                    self._typing = None
                self.filters[name] = text or None
            elif name == "valid":
                self.valid_at = normalise(text, "valid at") if text else None
            elif name == "jump" and text and not text.startswith("#"):
                self.resolve_instant(normalise(text, "transaction time"))
                return
            elif name == "jump":
                self.at_seq = _event_number(text)
        except LedgerError as exc:
            self.post_message(Failed(exc.code, exc.message))
            return
        focus_now(self.query_one("#facts", DataTable))
        self._restart()

    @work(thread=True, exclusive=True, exit_on_error=False, group="jump")
    def resolve_instant(self, moment: str) -> None:
        self.run_read("instant", lambda ledger: ledger.seq_at(moment))

    # ---- the boxes show what is applied -------------------------------------------------
    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        """A filter box applies as it is typed (after a short pause), so what it shows is what
        the table lists; a time box applies on enter and otherwise shows the applied time."""
        name = event.input.id or ""
        if name in self.filters:
            if self._typing is not None:
                self._typing.stop()
            self._typing = self.set_timer(FILTER_PAUSE_S, self._apply_filters)

    def _apply_filters(self) -> None:
        self._typing = None
        typed = {name: self.query_one(f"#{name}", Input).value.strip() or None
                 for name in self.filters}
        if typed != self.filters:
            self.filters = typed
            self._restart()

    @on(Input.Blurred)
    def _left(self, event: Input.Blurred) -> None:
        if (event.input.id or "") in self.filters:
            self._apply_filters()
        else:
            self._sync_time_boxes()

    def _sync_time_boxes(self) -> None:
        """The time boxes read as the instant shown: blank for now, `#seq` after travel."""
        jump = "" if self.at_seq is None else f"#{self.at_seq}"
        for box_id, text in (("jump", jump), ("valid", self.valid_at or "")):
            box = self.query_one(f"#{box_id}", Input)
            if box.value != text and not box.has_focus:
                box.value = text


def _event_number(text: str) -> int | None:
    if not text:
        return None
    if not text[1:].isdigit():
        raise LedgerError("bad_request", f"{text!r} is not an event number such as #120")
    return int(text[1:])


def _timebar(page: BeliefPage, *, live: bool, live_valid: bool) -> str:
    at = page.at_event
    where = (f"event #{page.seq}/{page.head_seq}" + (f" ({at.kind} by {at.actor})" if at else "")
             + f" at {page.tx_at[:19]}Z")
    mode = "now (live)" if live else "time travel"
    shown = "believed" + "".join(f" +{s}" for s in page.show)
    diff = " · diff vs now: + added, - ended, ~ changed" if page.diff else ""
    valid = "now" if live_valid else f"{page.valid_at[:19]}Z"
    return f"tx {where} · {mode} · valid at {valid} · showing {shown}{diff}"
