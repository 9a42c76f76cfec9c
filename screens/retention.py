"""Retention and sweeps: the policy's windows per space, a preview of what a sweep would expire
(held facts shown as skipped), then the sweep itself after a confirmation, with progress."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import DataTable, Header, Input, ProgressBar, Static

from custody_app.domain.errors import LedgerError
from custody_app.domain.readmodels import FactRef
from custody_app.domain.timeutil import normalise
from custody_app.erasure.certificate import ExpiryReason, SweepResult
from custody_app.interfaces.tui.access import LedgerAccess
from screens.base import (
    Failed,
    LedgerScreen,
    Loaded,
    Table,
    box_key,
    fill,
    focus_now,
    pick_cells,
    reset_columns,
    show,
    turn_page,
)
from screens.confirm import ConfirmDialog
from screens.keybar import KeyBar

SHOWN = 500  # preview rows listed (the counts are always complete)
PAGE = 20  # spaces per page
PREVIEW_COLUMNS = ("fact", "subject", "predicate", "status", "why", "sweep")
# Below this many columns the preview shows what a sweep is judged by, each cut to fit 80
# columns (subject, predicate, status, why, what the sweep does), the fact id last.
NARROW = 120
NARROW_PICKS = ((1, 14), (2, 16), (3, 10), (4, 14), (5, 8), (0, 0))


class SweepProgress(Message):
    def __init__(self, done: int, total: int) -> None:
        super().__init__()
        self.done = done
        self.total = total


class SweepFinished(Message):
    def __init__(self, results: list[SweepResult]) -> None:
        super().__init__()
        self.results = results


class RetentionScreen(LedgerScreen):
    """Windows, preview, sweep, certificate."""

    CSS_PATH = "retention.tcss"
    BINDINGS = [
        Binding("p", "preview", "Preview sweep"),
        Binding("s", "sweep", "Run sweep"),
        box_key("c", "#before", "Cutoff"),
        Binding("pagedown", "page(1)", "Next spaces", priority=True),
        Binding("pageup", "page(-1)", "Prev spaces", priority=True),
    ]

    def __init__(self, access: LedgerAccess) -> None:
        super().__init__(access)
        self.before: str | None = None
        self.pages: list[str] = [""]  # the space each page of spaces starts after
        self.view: Any = None
        self.preview: tuple[SweepResult, list[FactRef], list[FactRef]] | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="bar"):
            yield Input(placeholder="cutoff (ISO) instead of the policy's windows; blank: windows",
                        id="before")
        yield Static(id="windows")
        spaces: DataTable[Any] = Table(id="spaces", cursor_type="row")
        spaces.add_columns("space", "window pattern", "window", "cutoff now")
        yield spaces
        yield Static("p: preview what a sweep would expire", id="summary")
        table: DataTable[Any] = Table(id="preview", cursor_type="row", zebra_stripes=True)
        self.narrow = self.app.size.width < NARROW
        table.add_columns(*self._columns())
        yield table
        yield ProgressBar(id="progress", show_eta=False)
        yield Static(id="certificate")
        yield KeyBar()

    def _columns(self) -> tuple[str, ...]:
        return tuple(PREVIEW_COLUMNS[i] for i, _ in NARROW_PICKS) if self.narrow \
            else PREVIEW_COLUMNS

    def on_resize(self) -> None:
        """The preview's column set follows the terminal's width."""
        narrow = self.app.size.width < NARROW
        if narrow != self.narrow:
            self.narrow = narrow
            table = self.query_one("#preview", DataTable)
            reset_columns(table, self._columns())
            if self.preview is not None:
                self._show_preview(self.preview)

    def on_mount(self) -> None:
        # No progress bar until a sweep runs: an idle bar animates as if work were going on.
        self.query_one("#progress", ProgressBar).display = False
        focus_now(self.query_one("#spaces", DataTable))

    def reload(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="read")
    def load(self) -> None:
        after = self.pages[-1]
        self.run_read("retention", lambda ledger: ledger.retention(after_space=after,
                                                                   limit=PAGE))

    def action_page(self, delta: int) -> None:
        if turn_page(self.pages, delta, self.view.next_after if self.view else None):
            self.reload()

    def on_loaded(self, message: Loaded) -> None:
        if message.what == "retention":
            self.view = view = message.data
            windows = " · ".join(f"{p} = {d} (cutoff now {view.cutoffs.get(p, '')[:19]})"
                                 for p, d in view.windows.items())
            more = " · PgDn: more spaces" if view.next_after is not None else ""
            show(self.query_one("#windows", Static),
                f"[b]windows[/b]: {windows or 'none: the policy keeps everything'} · spaces "
                f"page {len(self.pages)}{more}")
            fill(self.query_one("#spaces", DataTable), [
                (s.space, [s.space, s.pattern or "(none)", s.window or "keep forever",
                           (s.cutoff or "")[:19]]) for s in view.spaces])
        elif message.what == "preview":
            self._show_preview(message.data)

    # ---- preview -----------------------------------------------------------------------
    @on(Input.Submitted, "#before")
    def _cutoff(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        try:
            self.before = normalise(text, "cutoff") if text else None
        except LedgerError as exc:
            self.post_message(Failed(exc.code, exc.message))
            return
        focus_now(self.query_one("#spaces", DataTable))
        self.action_preview()

    def action_preview(self) -> None:
        self.run_preview(self.before)

    @work(thread=True, exclusive=True, exit_on_error=False, group="preview")
    def run_preview(self, before: str | None) -> None:
        def read(ledger: Any) -> Any:
            result = ledger.sweep(dry_run=True, before=before)
            return (result, ledger.facts_brief(result.expired[:SHOWN]),
                    ledger.facts_brief(result.held))

        self.run_read("preview", read)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # "Run sweep" is dimmed until a preview found something to expire.
        if action == "sweep":
            return True if self.preview is not None and self.preview[0].expired else None
        return True

    def _show_preview(self, data: tuple[SweepResult, list[FactRef], list[FactRef]]) -> None:
        self.preview = data
        self.refresh_bindings()
        result, expire, held = data
        rows: list[tuple[str, list[str | Text]]] = [(f.fact_id, [f.fact_id, f.subject, f.predicate, f.status,
                             _why(f.fact_id, result.reasons.get(f.fact_id)), "expire"])
                for f in expire]
        rows += [(f.fact_id, [f.fact_id, f.subject, f.predicate, f.status,
                              "on legal hold: skipped with the whole cascade it is in",
                              "skipped: on hold"]) for f in held]
        if self.narrow:
            rows = [(key, pick_cells(cells, NARROW_PICKS)) for key, cells in rows]
        fill(self.query_one("#preview", DataTable), rows)
        cutoffs = ", ".join(f"{k} < {v[:19]}" for k, v in result.cutoffs.items()) or "none"
        note = f" · {result.note}" if result.note else ""
        more = f" (first {SHOWN} listed)" if len(result.expired) > SHOWN else ""
        show(self.query_one("#summary", Static),
            f"preview: would expire [b]{len(result.expired)}[/b] fact(s){more}, skip "
            f"{len(result.held)} on hold · cutoffs {cutoffs}{note} · s: run it")

    # ---- sweep -------------------------------------------------------------------------
    def action_sweep(self) -> None:
        if self.preview is None:
            self.notify("preview the sweep first (p)", severity="warning")
            return
        result, expire, held = self.preview
        if not result.expired:
            self.notify("the preview found nothing to expire", severity="warning")
            return
        items = [f"{f.fact_id}  {f.subject} {f.predicate} [{f.status}]" for f in expire]
        if len(result.expired) > len(expire):
            items.append(f"… and {len(result.expired) - len(expire)} more")
        warning = (f"{len(held)} held fact(s) will be skipped. " if held else "") + \
            "Expired values are erased for good; the events stay."

        def done(code: str | None) -> None:
            if code is not None:
                self.run_sweep(dict(result.cutoffs), code)

        self.app.push_screen(ConfirmDialog(
            f"Sweep: expire {len(result.expired)} fact(s)? This erases exactly:", items,
            warning=warning, default_code="retention"), done)

    @work(thread=True, exclusive=True, exit_on_error=False, group="sweep")
    def run_sweep(self, cutoffs: dict[str, str], code: str) -> None:
        results: list[SweepResult] = []
        total = len(cutoffs)
        self.post_message(SweepProgress(0, total))
        try:
            with self.access.open() as ledger:
                for n, (space, cutoff) in enumerate(sorted(cutoffs.items()), start=1):
                    results.append(ledger.sweep(before=cutoff,
                                                space=None if space == "*" else space,
                                                actor=self.access.reviewer, reason=code))
                    self.post_message(SweepProgress(n, total))
        except LedgerError as exc:
            self.post_message(Failed(exc.code, exc.message))
        self.post_message(SweepFinished(results))

    def on_sweep_progress(self, message: SweepProgress) -> None:
        bar = self.query_one("#progress", ProgressBar)
        bar.display = True
        bar.update(total=message.total, progress=message.done)

    def on_sweep_finished(self, message: SweepFinished) -> None:
        expired = sum(len(r.expired) for r in message.results)
        held = sorted({h for r in message.results for h in r.held})
        certs = [r.certificate for r in message.results if r.certificate is not None]
        complete = all(c.complete for c in certs)
        lines = [f"[b]Sweep done[/b]: expired {expired} fact(s), skipped {len(held)} on hold; "
                 f"{len(certs)} certificate(s), "
                 + ("complete" if complete else "[red]NOT complete: see the places below[/red]")]
        for cert in certs:
            for place in cert.places:
                lines.append(f"  [{place.outcome}] {place.place}: {place.detail}")
        show(self.query_one("#certificate", Static), "\n".join(lines))
        self.notify(f"sweep expired {expired} fact(s)", title="Sweep")
        self.preview = None
        self.refresh_bindings()
        show(self.query_one("#summary", Static), "p: preview what a sweep would expire")
        fill(self.query_one("#preview", DataTable), [])
        self.reload()


def _why(fact_id: str, r: ExpiryReason | None) -> str:
    """Why the sweep expires it: its own age under the rule, or the root it derives from."""
    if r is None:
        return ""
    at = r.expires_at()
    due = (f"expires on {at[:16].replace('T', ' ')} under rule {r.rule}" if r.rule and at
           else f"was learned before the cutoff {r.cutoff[:19]}")
    if r.root != fact_id:
        return f"derived from {r.root}, which {due}"
    return f"learned {r.learned_at[:16].replace('T', ' ')}; {due}"

