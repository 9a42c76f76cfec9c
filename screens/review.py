"""Quarantine review: claimed facts waiting, oldest first, with writer, cause and what each
would supersede; approve or reject one or a marked selection, with a reason."""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.timer import Timer
from textual.widgets import DataTable, Header, Input, Static
from textual.worker import get_current_worker

from custody_app.domain.errors import LedgerError
from custody_app.domain.escaping import escaped
from custody_app.interfaces.tui.access import LedgerAccess
from custody_app.ledger.readmodels import ReviewPage
from screens.base import (
    PAGE_KEYS,
    Failed,
    LedgerScreen,
    Loaded,
    Succeeded,
    Table,
    box_key,
    cursor_key,
    fill,
    focus_now,
    reset_columns,
    show,
    turn_page,
)
from screens.beliefs import FILTER_PAUSE_S
from screens.keybar import KeyBar
from screens.reason import ReasonDialog
from screens.review_rows import NARROW_COLUMNS, RETRACTION, details, queue_cells

PAGE = 50
# Below this many columns the queue shows what a reviewer judges a claim by (review_rows).
NARROW = 120
COLUMNS = ("✓", "fact", "learned", "writer", "cause", "subject", "predicate", "value", "state",
           "would supersede", "marks")
# Claims read per query when marking across the whole queue (all, same writer, same cause).
MARK_CHUNK = 500


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
        box_key("slash", "#filter", "Filter", key_display="/"),
        *PAGE_KEYS,
        Binding("enter", "open_fact", "Why", show=False),
    ]

    def __init__(self, access: LedgerAccess) -> None:
        super().__init__(access)
        self.marked: set[str] = set()
        self.pages: list[int] = [0]
        self.page: ReviewPage | None = None
        # (claims, pending retractions) waiting in the whole queue
        self.total: tuple[int, int] | None = None
        # The queue filter as applied, the one the page shown was read with, and the ids of
        # every claim it matches (None: no filter): marks act only on those.
        self.match: str | None = None
        self.generation = 0  # counts filter changes; `shown`: the one the page was read under
        self.shown = -1
        self.in_filter: set[str] | None = None
        self._typing: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="who")
        yield Input(placeholder="/ filter: writer, subject, predicate or cause", id="filter")
        table: DataTable[Any] = Table(id="queue", cursor_type="row", zebra_stripes=True)
        self.narrow = self.app.size.width < NARROW
        table.add_columns(*self._columns())
        yield table
        yield Static(id="pager")
        yield KeyBar()

    def on_mount(self) -> None:
        focus_now(self.query_one("#queue", DataTable))

    def _columns(self) -> tuple[str, ...]:
        return NARROW_COLUMNS if self.narrow else COLUMNS

    def on_resize(self) -> None:
        """Narrow and wide column sets follow the terminal's width (and the narrow cells'
        widths follow it too)."""
        narrow = self.app.size.width < NARROW
        if narrow != self.narrow:
            self.narrow = narrow
            table = self.query_one("#queue", DataTable)
            reset_columns(table, self._columns())
        self._show_rows()

    def reload(self) -> None:
        self.load(self.pages[-1])

    @work(thread=True, exclusive=True, exit_on_error=False, group="read")
    def load(self, after: int) -> None:
        match, generation = self.match, self.generation
        def read(ledger: Any) -> Any:
            # Waiting: the claims and the pending retractions (approve and reject act on both).
            retractions = ledger.review_queue(after_seq=0, limit=1, match=match).retractions
            total = (ledger.status().counts.get("quarantined", 0),
                     len(ledger.pending_retractions()))
            matching = ledger.review_matching(match) if match else None
            return (ledger.review_queue(after_seq=after, limit=PAGE, match=match), total,
                    None if matching is None else matching + [
                        RETRACTION + r.fact.fact_id for r in retractions], generation)

        self.run_read("queue", read)

    def on_loaded(self, message: Loaded) -> None:
        if message.what == "marks":
            self.marked |= set(message.data)
            self._show_rows()
            return
        if message.what != "queue":
            return
        page, total, ids, generation = message.data
        if generation != self.generation:
            return  # read under a filter since changed: the next read is on its way
        self.page, self.total, self.shown = page, total, generation
        self.in_filter = None if ids is None else set(ids)
        self._show_rows()
        show(self.query_one("#who", Static),
             f"reviewing as [b]{self.access.reviewer}[/b] · a/x: approve/reject the marked "
             "rows, or the one under the cursor · enter: why")

    def _acting(self) -> set[str]:
        """The marks an approve or reject acts on: under a filter, only the rows it matches."""
        if self.in_filter is None or self.page is None:
            return set(self.marked)
        view = self.in_filter | {RETRACTION + r.fact.fact_id for r in self.page.retractions}
        return self.marked & view

    def _show_rows(self) -> None:
        if self.page is None:
            return
        narrow = self.app.size.width if self.narrow else None
        fill(self.query_one("#queue", DataTable), queue_cells(self.page, self.marked,
                                                              self.labels(), narrow))
        more = "PgDn: next page" if self.page.next_after is not None else "end of the queue"
        first = (len(self.pages) - 1) * PAGE
        rows = f"{first + 1}–{first + len(self.page.items)}" if self.page.items else "none"
        acting = self._acting()
        outside = len(self.marked) - len(acting)
        count = (f"{len(self.in_filter)} shown of {self._waiting()} (filter "
                 f"{escaped(self.match, markup=True)})" if self.in_filter is not None
                 else f"{self._waiting()}")
        hidden = f" (+{outside} outside the filter, not acted on)" if outside else ""
        # The marks first: space marks and moves on, and this line is where that shows.
        show(self.query_one("#pager", Static),
             f"[b]✓ {len(acting)} marked[/b]{hidden} · {count} · page {len(self.pages)} "
             f"(claims {rows}) · {more}")
        self.refresh_bindings()  # approve, reject and the marks depend on what is shown

    def _waiting(self) -> str:
        """"123 waiting (121 claims, 2 retractions)": both wait for a reviewer."""
        if self.total is None:
            return "? waiting"
        claims, retractions = self.total
        if not retractions:
            return f"{claims:,} waiting"
        return (f"{claims + retractions:,} waiting ({claims:,} claim(s), {retractions:,} "
                "retraction(s))")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Shown disabled (and doing nothing) when there is nothing for them to act on.
        if action == "review":
            return True if self._targets() else None
        if action in ("mark", "mark_page", "mark_queue"):
            page = self.page if self.shown == self.generation else None
            return True if page is not None and (page.items or page.retractions) else None
        if action == "unmark":
            return True if self.marked else None
        return True

    # ---- actions -----------------------------------------------------------------------
    def action_mark(self) -> None:
        key = cursor_key(self.query_one("#queue", DataTable))
        if key is None:
            return
        self.marked.symmetric_difference_update({key})
        self._show_rows()
        what = "marked" if key in self.marked else "unmarked"
        self.notify(f"{what} {key.removeprefix(RETRACTION)} · {len(self._acting())} marked",
                    title="Mark", timeout=2)
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
        self.mark_matching(how, writer, cause, self.match)

    @work(thread=True, exclusive=True, exit_on_error=False, group="marks")
    def mark_matching(self, how: str, writer: str | None, cause: str | None,
                      match: str | None) -> None:
        """Reads the queue (under the filter) in chunks of MARK_CHUNK claims."""
        def matching(ledger: Any) -> list[str]:
            found: list[str] = []
            after: int | None = 0
            while after is not None and not get_current_worker().is_cancelled:
                page = ledger.review_queue(after_seq=after, limit=MARK_CHUNK, match=match)
                # `writer` is as the row showed it (escaped, a lookalike's invisible character
                # too), so each claim's writer is compared as it would be shown.
                found += [i.fact.fact_id for i in page.items if how == "all"
                          or (how == "writer"
                              and escaped(i.writer, markup=True, field="writer") == writer)
                          or (how == "cause" and i.cause.kind == cause)]
                after = page.next_after
            return found

        self.run_read("marks", matching)

    def action_page(self, delta: int) -> None:
        if turn_page(self.pages, delta, self.page.next_after if self.page else None):
            self.reload()

    def _targets(self) -> list[str]:
        if self.shown != self.generation:
            return []  # the filter changed and its rows are not read yet: act on nothing
        acting = self._acting()
        if acting:
            # Marks may span pages (mark all, by writer or cause): the rows on screen first, in
            # the order shown (the dialog names the first few), then the others by id.
            shown = ([RETRACTION + r.fact.fact_id for r in self.page.retractions]
                     + [i.fact.fact_id for i in self.page.items]) if self.page else []
            first = [key for key in shown if key in acting]
            return first + sorted(acting.difference(first))
        key = cursor_key(self.query_one("#queue", DataTable))
        return [key] if key else []

    # ---- the queue filter: what the box shows is what is applied --------------------------
    @on(Input.Changed, "#filter")
    def _typed(self, event: Input.Changed) -> None:
        if self._typing is not None:
            self._typing.stop()
        self._typing = self.set_timer(FILTER_PAUSE_S, self._apply_filter)

    @on(Input.Submitted, "#filter")
    def _submitted(self, event: Input.Submitted) -> None:
        focus_now(self.query_one("#queue", DataTable))  # leaving the box applies it (below)

    @on(Input.Blurred, "#filter")
    def _left(self, event: Input.Blurred) -> None:
        self._apply_filter()

    def _apply_filter(self) -> None:
        if self._typing is not None:
            self._typing.stop()
            self._typing = None
        typed = self.query_one("#filter", Input).value.strip() or None
        if typed != self.match:
            self.match = typed
            self.generation += 1
            self.pages = [0]
            self.refresh_bindings()
            self.reload()

    def action_review(self, op: str) -> None:
        targets = self._targets()
        if not targets:
            self.notify("nothing to review here", severity="warning")
            return
        verb = "Approve" if op == "confirm" else "Reject"
        what = targets[0] if len(targets) == 1 else f"{len(targets)} marked rows"
        if len(targets) == 1 and what.startswith(RETRACTION):
            what = f"the retraction of {what.removeprefix(RETRACTION)}"

        # What the reviewer saw: each pending retraction's own event (DESIGN 14), so the
        # decision applies to that retraction and never to a newer one.
        seen = {RETRACTION + r.fact.fact_id: r.event_id
                for r in (self.page.retractions if self.page is not None else [])}

        def done(reason: str | None) -> None:
            if reason is not None:
                self.review(op, targets, reason or None, seen)

        self.app.push_screen(ReasonDialog(f"{verb} {what} as {self.access.reviewer}",
                                          required=op == "reject",
                                          details=details(self.page, op, targets)), done)

    @work(thread=True, exclusive=False, exit_on_error=False, group="write")
    def review(self, op: str, fact_ids: list[str], reason: str | None,
               seen: dict[str, str]) -> None:
        done, refused = 0, 0
        try:
            with self.access.open() as ledger:
                for fact_id in fact_ids:
                    if get_current_worker().is_cancelled:
                        break
                    # A pending retraction's row: approve/reject act on the retraction the
                    # reviewer saw, named by its event.
                    retraction = fact_id.startswith(RETRACTION)
                    try:
                        getattr(ledger, op)(fact_id.removeprefix(RETRACTION),
                                            actor=self.access.reviewer, reason=reason,
                                            retraction=retraction,
                                            retraction_event=seen.get(fact_id) or None)
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
