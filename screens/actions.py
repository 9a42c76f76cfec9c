"""Actions: recorded agent actions, searchable by tool, actor, session, subject and time; enter
shows the ten explain answers for the one under the cursor, `p` writes its signed action pack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Header, Input, Static

from custody_app.domain.errors import LedgerError
from custody_app.evidence.actionpack import action_pack_text
from custody_app.evidence.readmodels import ActionAccount, ActionsResult
from custody_app.files.output import write_output
from custody_app.interfaces.tui.access import LedgerAccess
from screens.base import (
    PAGE_KEYS,
    ColumnSets,
    LedgerScreen,
    Loaded,
    Table,
    box_key,
    cursor_key,
    focus_now,
    short,
    show,
    turn_page,
)
from screens.keybar import KeyBar

PAGE = 50
FILTERS = ("tool", "actor", "session", "subject", "since", "until")


def parse_query(text: str) -> dict[str, str]:
    """`tool=billing.issue_refund actor=agent:bot since=2026-04-01T00:00:00Z`; a bare word is a
    tool. Raises LedgerError naming an unknown filter."""
    filters: dict[str, str] = {}
    for word in text.split():
        name, sep, value = word.partition("=")
        if not sep:
            name, value = "tool", word
        if name not in FILTERS or not value:
            raise LedgerError("bad_request", f"unknown filter {word!r}: use "
                              + ", ".join(f"{f}=..." for f in FILTERS))
        filters[name] = value
    return filters


class ActionsScreen(LedgerScreen):
    """What agents did: every recorded action, newest first, and each one explained in full."""

    CSS_PATH = "actions.tcss"
    BINDINGS = [
        box_key("slash", "#query", "Search", key_display="/"),
        Binding("enter", "explain", "Explain", show=False),
        Binding("p", "pack", "Action pack"),
        *PAGE_KEYS,
    ]

    def __init__(self, access: LedgerAccess) -> None:
        super().__init__(access)
        self.filters: dict[str, str] = {}
        self.pages: list[int | None] = [None]
        self.page: ActionsResult | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="filter: tool=T actor=A session=S subject=X since=ISO until=ISO "
                    "(enter)", id="query")
        table: DataTable[Any] = Table(id="actions", cursor_type="row", zebra_stripes=True)
        # At 80 columns: what was done, to what, with what outcome, by whom; the rest after.
        self.sets = ColumnSets(self, table, ("seq", "time", "tool", "ref", "outcome", "actor",
                                             "session", "receipt"),
                               ((0, 5), (2, 16), (3, 12), (4, 16), (5, 14), (1, 0), (6, 0),
                                (7, 0)))
        yield table
        yield Static(id="pager")
        yield Static(id="answers")
        yield KeyBar()

    def on_mount(self) -> None:
        focus_now(self.query_one("#actions", DataTable))

    def on_resize(self) -> None:
        self.sets.resized()

    def reload(self) -> None:
        self.load(dict(self.filters), self.pages[-1])

    @work(thread=True, exclusive=True, exit_on_error=False, group="read")
    def load(self, filters: dict[str, str], before: int | None) -> None:
        self.run_read("actions", lambda ledger: ledger.actions(**filters, before_seq=before,
                                                               limit=PAGE))

    def on_loaded(self, message: Loaded) -> None:
        if message.what == "actions":
            self.page = page = message.data
            self.sets.fill([
                (f"seq:{a.seq}", [str(a.seq), a.tx_at[:19], a.tool, short(a.ref, 24),
                                  short(a.outcome, 30), a.actor, short(a.session, 24),
                                  a.receipt_id or ""]) for a in page.actions])
            more = "PgDn: next page" if page.next_before_seq is not None else "last page"
            where = " ".join(f"{k}={v}" for k, v in self.filters.items()) or "all actions"
            show(self.query_one("#pager", Static),
                 f"page {len(self.pages)} · {len(page.actions)} here · {where} · {more}")
        elif message.what == "explain":
            full: ActionAccount = message.data
            show(self.query_one("#answers", Static), "\n".join(
                f"{a.question}: {a.answer}" for a in full.answers))
        elif message.what == "action_pack":
            self.notify(f"action pack written to {message.data}", title="Done")

    def action_page(self, delta: int) -> None:
        if turn_page(self.pages, delta, self.page.next_before_seq if self.page else None):
            self.reload()

    @on(Input.Submitted, "#query")
    def _typed(self, event: Input.Submitted) -> None:
        try:
            self.filters = parse_query(event.value)
        except LedgerError as exc:
            self.notify(f"{exc.message} ({exc.code})", title="Refused", severity="error")
            return
        self.pages = [None]
        focus_now(self.query_one("#actions", DataTable))
        self.reload()

    def action_explain(self) -> None:
        key = cursor_key(self.query_one("#actions", DataTable))
        if key is None:
            self.notify("no action under the cursor", severity="warning")
            return
        self.explain(key)

    @on(DataTable.RowSelected, "#actions")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self.explain(str(event.row_key.value))

    @work(thread=True, exclusive=True, exit_on_error=False, group="explain")
    def explain(self, ref: str) -> None:
        # The whole-chain walk is verify's job (Integrity screen): a big ledger takes seconds.
        self.run_read("explain", lambda ledger: ledger.explain_full(ref, walk_chain=False))

    def action_pack(self) -> None:
        key = cursor_key(self.query_one("#actions", DataTable))
        if key is None:
            self.notify("no action under the cursor", severity="warning")
            return
        self.pack(key)

    @work(thread=True, exclusive=True, exit_on_error=False, group="write")
    def pack(self, ref: str) -> None:
        target = self.access.folder / f"actionpack-{ref.replace(':', '-')}.json"

        def write(ledger: Any) -> Path:
            write_output(target, action_pack_text(ledger.action_pack(ref)), force=False,
                         protected=ledger.own_files())
            return target

        self.run_read("action_pack", write)
