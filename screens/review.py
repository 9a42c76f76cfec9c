"""Quarantine review: claimed facts waiting, oldest first, with writer, cause and what each
would supersede; approve or reject one or a marked selection, with a reason."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Header, Static
from textual.worker import get_current_worker

from custody_app.domain.errors import LedgerError
from custody_app.interfaces.tui.access import LedgerAccess
from custody_app.ledger.readmodels import PendingRetraction, ReviewItem, ReviewPage
from screens.base import (
    PAGE_KEYS,
    Failed,
    LedgerScreen,
    Loaded,
    Succeeded,
    Table,
    cursor_key,
    fill,
    short,
    show,
    turn_page,
)
from screens.keybar import KeyBar
from screens.reason import ReasonDialog

PAGE = 50
# Row key prefix of a pending retraction (the rest of the key is its fact id).
RETRACTION = "retraction:"


class ReviewScreen(LedgerScreen):
    """The quarantine queue; the reviewer is the app's identity, never the writer."""

    CSS_PATH = "review.tcss"
    BINDINGS = [
        Binding("space", "mark", "Mark"),
        Binding("m", "mark_page", "Mark page"),
        Binding("M", "mark_queue('all')", "Mark all", key_display="shift+m"),
        Binding("w", "mark_queue('writer')", "Mark writer"),
        Binding("c", "mark_queue('cause')", "Mark cause"),
        Binding("u", "unmark", "Unmark all"),
        Binding("a", "review('confirm')", "Approve"),
        Binding("x", "review('reject')", "Reject"),
        *PAGE_KEYS,
        Binding("enter", "open_fact", "Why", show=False),
    ]

    def __init__(self, access: LedgerAccess) -> None:
        super().__init__(access)
        self.marked: set[str] = set()
        self.pages: list[int] = [0]
        self.page: ReviewPage | None = None
        self.total: int | None = None  # claims waiting in the whole queue

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="who")
        table: DataTable[Any] = Table(id="queue", cursor_type="row", zebra_stripes=True)
        table.add_columns("✓", "fact", "learned", "writer", "cause", "subject", "predicate",
                          "value", "would supersede", "marks")
        yield table
        yield Static(id="pager")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#queue", DataTable).focus()

    def reload(self) -> None:
        self.load(self.pages[-1])

    @work(thread=True, exclusive=True, exit_on_error=False, group="read")
    def load(self, after: int) -> None:
        self.run_read("queue", lambda ledger: (
            ledger.review_queue(after_seq=after, limit=PAGE),
            ledger.status().counts.get("quarantined", 0)))

    def on_loaded(self, message: Loaded) -> None:
        if message.what == "marks":
            self.marked |= set(message.data)
            self._show_rows()
            return
        if message.what != "queue":
            return
        self.page, self.total = message.data
        assert self.page is not None
        self._show_rows()
        show(self.query_one("#who", Static),
             f"reviewing as [b]{self.access.reviewer}[/b] · space: mark · a: approve · "
             "x: reject (the marked facts, or the one under the cursor)")

    def _show_rows(self) -> None:
        if self.page is None:
            return
        waiting = [(RETRACTION + r.fact.fact_id, _retraction_cells(
            r, RETRACTION + r.fact.fact_id in self.marked)) for r in self.page.retractions]
        fill(self.query_one("#queue", DataTable), waiting + [
            (i.fact.fact_id, _cells(i, i.fact.fact_id in self.marked)) for i in self.page.items])
        more = "PgDn: next page" if self.page.next_after is not None else "end of the queue"
        first = (len(self.pages) - 1) * PAGE
        rows = f"{first + 1}–{first + len(self.page.items)}" if self.page.items else "none"
        show(self.query_one("#pager", Static),
             f"{self.total if self.total is not None else '?'} waiting in all · page "
             f"{len(self.pages)} (rows {rows}) · {len(self.marked)} marked · {more} · "
             "m: mark page, shift+m: all, w: same writer, c: same cause, u: unmark")

    # ---- actions -----------------------------------------------------------------------
    def action_mark(self) -> None:
        key = cursor_key(self.query_one("#queue", DataTable))
        if key is None:
            return
        self.marked.symmetric_difference_update({key})
        self._show_rows()
        table = self.query_one("#queue", DataTable)
        if table.cursor_row < table.row_count - 1:
            table.move_cursor(row=table.cursor_row + 1)

    def action_mark_page(self) -> None:
        if self.page is not None:
            self.marked |= {i.fact.fact_id for i in self.page.items}
            self._show_rows()

    def action_unmark(self) -> None:
        self.marked.clear()
        self._show_rows()

    def action_mark_queue(self, how: str) -> None:
        """Mark across the whole queue (every page): all, or those sharing the writer or the
        cause kind of the claim under the cursor."""
        key = cursor_key(self.query_one("#queue", DataTable))
        item = next((i for i in (self.page.items if self.page else []) if i.fact.fact_id == key),
                    None)
        if how != "all" and item is None:
            self.notify("put the cursor on a claim first", severity="warning")
            return
        writer = item.writer if item else None
        cause = item.cause.kind if item else None
        self.mark_matching(how, writer, cause)

    @work(thread=True, exclusive=True, exit_on_error=False, group="marks")
    def mark_matching(self, how: str, writer: str | None, cause: str | None) -> None:
        def matching(ledger: Any) -> list[str]:
            found: list[str] = []
            after: int | None = 0
            while after is not None and not get_current_worker().is_cancelled:
                page = ledger.review_queue(after_seq=after, limit=500)
                found += [i.fact.fact_id for i in page.items if how == "all"
                          or (how == "writer" and i.writer == writer)
                          or (how == "cause" and i.cause.kind == cause)]
                after = page.next_after
            return found

        self.run_read("marks", matching)

    def action_page(self, delta: int) -> None:
        if turn_page(self.pages, delta, self.page.next_after if self.page else None):
            self.reload()

    def _targets(self) -> list[str]:
        if self.marked:
            return sorted(self.marked)  # marks may span pages (mark all, by writer or cause)
        key = cursor_key(self.query_one("#queue", DataTable))
        return [key] if key else []

    def _details(self, op: str, targets: list[str]) -> str:
        """What the reviewer is about to approve or reject, and what follows from it."""
        shown = {i.fact.fact_id: i for i in (self.page.items if self.page else [])}
        lines = []
        for fact_id in targets[:5]:
            i = shown.get(fact_id)
            lines.append(f"{fact_id}  {i.fact.subject} {i.fact.predicate} = "
                         f"{'(erased)' if i.fact.erased else short(i.fact.value, 60)}  by "
                         f"{i.writer}" if i else f"{fact_id}  (on another page)")
        if len(targets) > 5:
            lines.append(f"… and {len(targets) - 5} more")
        lines.append("Reads and recall return them from now on." if op == "confirm" else
                     "They are never believed; what they would replace stays believed.")
        return "\n".join(lines)

    def action_review(self, op: str) -> None:
        targets = self._targets()
        if not targets:
            self.notify("nothing to review here", severity="warning")
            return
        verb = "Approve" if op == "confirm" else "Reject"
        what = targets[0] if len(targets) == 1 else f"{len(targets)} marked facts"

        def done(reason: str | None) -> None:
            if reason is not None:
                self.review(op, targets, reason or None)

        self.app.push_screen(ReasonDialog(f"{verb} {what} as {self.access.reviewer}",
                                          required=op == "reject",
                                          details=self._details(op, targets)), done)

    @work(thread=True, exclusive=False, exit_on_error=False, group="write")
    def review(self, op: str, fact_ids: list[str], reason: str | None) -> None:
        done, refused = 0, 0
        try:
            with self.access.open() as ledger:
                for fact_id in fact_ids:
                    if get_current_worker().is_cancelled:
                        break
                    # A pending retraction's row: approve/reject act on the retraction.
                    retraction = fact_id.startswith(RETRACTION)
                    try:
                        getattr(ledger, op)(fact_id.removeprefix(RETRACTION),
                                            actor=self.access.reviewer, reason=reason,
                                            retraction=retraction)
                        done += 1
                        self.marked.discard(fact_id)
                    except LedgerError as exc:
                        refused += 1
                        self.post_message(Failed(exc.code, exc.message))
        except LedgerError as exc:
            self.post_message(Failed(exc.code, exc.message))
            return
        word = "approved" if op == "confirm" else "rejected"
        if done:
            self.post_message(Succeeded(f"{word} {done} fact(s)"
                                        + (f", {refused} refused" if refused else "")))

    def action_open_fact(self) -> None:
        key = cursor_key(self.query_one("#queue", DataTable))
        if key:
            self._open(key)

    @on(DataTable.RowSelected, "#queue")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self._open(str(event.row_key.value))

    def _open(self, fact_id: str) -> None:
        from screens.fact import FactScreen

        self.app.push_screen(FactScreen(self.access, fact_id.removeprefix(RETRACTION)))


def _cells(i: ReviewItem, marked: bool) -> list[str | Text]:
    f = i.fact
    old = (f"{i.supersedes.fact_id} ({i.supersedes.status})" if i.supersedes else "")
    cause = f"{i.cause.kind}:{i.cause.ref}"
    cells: list[str | Text] = [
        "✓" if marked else " ", f.fact_id, i.tx_at[:19], i.writer, short(cause, 30), f.subject,
        f.predicate, "(erased)" if f.erased else short(f.value, 30), old, ",".join(i.marks)]
    # Plain cells unless marked: styled Text costs more to lay out on every repaint.
    return [Text(str(c), style="bold reverse") for c in cells] if marked else cells


def _retraction_cells(r: PendingRetraction, marked: bool) -> list[str | Text]:
    f = r.fact
    cells: list[str | Text] = [
        "✓" if marked else " ", f.fact_id, r.tx_at[:19], r.retractor,
        short(f"retract: {r.reason or ''}", 30), f.subject, f.predicate,
        "(erased)" if f.erased else short(f.value, 30), "", "pending retraction"]
    return [Text(str(c), style="bold reverse") for c in cells] if marked else cells
