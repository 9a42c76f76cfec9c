"""Fact: why the agent believes it (creating event, actor, cause, session, sources, dependents,
supersession, reviews, holds, policy in force, chain check) and what can be done to it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Header, Static

from custody_app.domain.escaping import MultilineText, json_text
from custody_app.domain.readmodels import FactRef, HistoryResult, WhyResult
from custody_app.interfaces.tui.access import LedgerAccess
from screens.base import (
    NARROW,
    LedgerScreen,
    Loaded,
    Table,
    fill,
    forget_rows,
    pick_cells,
    short,
    show,
)
from screens.confirm import ConfirmDialog
from screens.keybar import KeyBar
from screens.labels import Labels
from screens.reason import ReasonDialog

# Characters of the value the summary line shows; a longer value has its own pane.
SUMMARY_VALUE = 60

# The history table's columns and widths; below NARROW columns only when, what happened and
# who (pick_cells: index, width), so an 80-column terminal shows them without scrolling.
HISTORY = ("seq", "kind", "tx at", "actor", "detail")
HISTORY_WIDTHS = (6, 10, 19, 24, 60)
HISTORY_NARROW = ((2, 19), (1, 10), (3, 30))


class FactScreen(LedgerScreen):
    """One fact, why it is believed, and its actions."""

    CSS_PATH = "fact.tcss"
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("t", "retract", "Retract"),
        Binding("a", "approve", "Approve"),
        Binding("x", "reject", "Reject"),
        Binding("h", "hold", "Hold"),
        Binding("u", "release", "Release"),
        Binding("f", "forget", "Forget"),
        Binding("b", "blast", "Blast radius"),
        Binding("p", "pack", "Evidence pack"),
        Binding("o", "policy", "Policy text"),
    ]

    def __init__(self, access: LedgerAccess, fact_id: str) -> None:
        super().__init__(access)
        self.fact_id = fact_id
        self.why: WhyResult | None = None
        self.show_policy = False
        self.policy_lines = ""  # the policy file, escaped line by line
        self.history_rows: list[tuple[str, list[Any]]] = []  # wide cells, kept for a resize
        self.narrow = False

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="body"):
            yield Static(id="summary")
            yield Static(id="value")
            yield Static(id="why")
            table: DataTable[Any] = Table(id="events", cursor_type="row")
            self.narrow = self.app.size.width < NARROW
            self._add_columns(table)
            yield table
            yield Static(id="policy")
        yield KeyBar()

    def _add_columns(self, table: DataTable[Any]) -> None:
        # Fixed widths: the layout does not move when the rows arrive (and a snapshot taken
        # at any moment after they did is the same).
        for index, width in HISTORY_NARROW if self.narrow else enumerate(HISTORY_WIDTHS):
            table.add_column(HISTORY[index], width=width or HISTORY_WIDTHS[index])

    def on_resize(self) -> None:
        narrow = self.app.size.width < NARROW
        if narrow != getattr(self, "narrow", narrow):
            self.narrow = narrow
            table = self.query_one("#events", DataTable)
            table.clear(columns=True)
            forget_rows(table)
            self._add_columns(table)
            self._fill_history()

    def _fill_history(self) -> None:
        rows = self.history_rows
        fill(self.query_one("#events", DataTable),
             [(key, pick_cells(cells, HISTORY_NARROW)) for key, cells in rows]
             if self.narrow else rows)

    def reload(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="read")
    def load(self) -> None:
        def read(ledger: Any) -> Any:
            why = ledger.why(self.fact_id)
            # The whole value as JSON lines, made here so the escape applies to each once (a
            # line break between them is layout, not stored text).
            whole = None if why.fact.erased else json_text(why.fact.value, indent=2).split("\n")
            # The policy file keeps its lines (`o`); everything else in it is escaped.
            policy = MultilineText(why.policy.source or why.policy.canonical or "")
            return why, ledger.history(self.fact_id), whole, policy

        self.run_read("fact", read)

    def on_loaded(self, message: Loaded) -> None:
        if message.what == "forget-preview":
            self._confirm_forget(message.data)
            return
        if message.what == "pack":
            self.notify(f"evidence pack written to {message.data}", title="Evidence pack")
            return
        why, history, lines, self.policy_lines = message.data
        whole = None if lines is None else "\n".join(lines)
        self.why = why
        self.refresh_bindings()  # approve / reject depend on the fact's status
        show(self.query_one("#summary", Static), _summary(why, self.labels()))
        # A value longer than the summary shows gets a pane of its own: wrapped, whole, and
        # scrolled with the screen, never cut.
        pane = self.query_one("#value", Static)
        pane.display = whole is not None and len(whole) > SUMMARY_VALUE
        pane.border_title = "value (whole)"
        show(pane, whole or "")
        show(self.query_one("#why", Static), _why(why))
        self.history_rows = _events(history)
        self._fill_history()
        self._policy_text()

    def _policy_text(self) -> None:
        if self.why is None:
            return
        p = self.why.policy
        text = f"[b]Policy in force when written[/b]: {p.hash}"
        text += f"  ({Path(p.path).name})" if p.path else ""
        if self.show_policy:
            text += "\n" + self.policy_lines
        else:
            text += "  · o: show its text"
        show(self.query_one("#policy", Static), text)

    # ---- actions -----------------------------------------------------------------------
    def action_back(self) -> None:
        self.app.pop_screen()

    def action_blast(self) -> None:
        from screens.blast import BlastScreen

        self.app.push_screen(BlastScreen(self.access, self.fact_id, fact_screen=FactScreen))

    @work(thread=True, exclusive=True, exit_on_error=False, group="pack")
    def action_pack(self) -> None:
        self.run_read("pack", lambda ledger: ledger.pack_beside(self.fact_id)[0])

    def action_policy(self) -> None:
        self.show_policy = not self.show_policy
        self._policy_text()

    def _ask(self, title: str, op: str, consequence: str = "", required: bool = True) -> None:
        def done(reason: str | None) -> None:
            if reason is not None:
                self.write(op, reason or None)

        about = ""
        if self.why is not None:
            f = self.why.fact
            value = "(erased)" if f.erased else json.dumps(f.value, ensure_ascii=False)
            about = f"{f.subject} {f.predicate} = {value}\n{f.status}, {f.provenance}"
        details = "\n".join(x for x in (about, consequence) if x)
        self.app.push_screen(ReasonDialog(f"{title} {self.fact_id}", details=details,
                                          required=required), done)

    def action_retract(self) -> None:
        back = [r for r in (self.why.supersedes if self.why else []) if r.status == "superseded"]
        consequence = ("Reads stop returning it; believed again: "
                       + "; ".join(_ref(r) for r in back) if back else
                       "Reads stop returning it; nothing it replaced comes back.")
        self._ask("Retract", "retract", consequence)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Shown disabled (and doing nothing) where they cannot apply: approve and reject only
        # for a claim waiting for review, forget and hold not on a held fact, release only on
        # one; an erased fact cannot be forgotten or held again.
        why = self.why
        if why is None:
            return None if action in ("approve", "reject", "forget", "hold", "release") else True
        erased = why.fact.status in ("forgotten", "expired")
        if action in ("approve", "reject"):
            return True if why.fact.status == "quarantined" else None
        if action in ("forget", "hold"):
            return None if _held(why) or erased else True
        if action == "release":
            return True if _held(why) else None
        return True

    def action_approve(self) -> None:
        self._ask(f"Approve as {self.access.reviewer}", "confirm",
                  "Reads and recall return it from now on.", required=False)

    def action_reject(self) -> None:
        self._ask(f"Reject as {self.access.reviewer}", "reject",
                  "It is never believed; what it would replace stays believed.")

    def action_hold(self) -> None:
        self._ask("Place a legal hold on", "hold")

    def action_release(self) -> None:
        self._ask("Release the hold on", "release")

    def action_forget(self) -> None:
        self.preview_forget()

    @work(thread=True, exclusive=True, exit_on_error=False, group="preview")
    def preview_forget(self) -> None:
        self.run_read("forget-preview", lambda ledger: ledger.erasure_preview(self.fact_id))

    def _confirm_forget(self, preview: Any) -> None:
        items = [f"{f.fact_id}  {f.subject} {f.predicate} [{f.status}]"
                 + ("  (derived)" if f.fact_id != preview.root else "") for f in preview.facts]
        warning = (f"On legal hold: {', '.join(preview.held)}. Release the hold (u) before "
                   "forgetting." if preview.held else
                   "The values are erased for good; the events stay.")

        def done(code: str | None) -> None:
            if code is not None:
                self.write("forget", code)

        self.app.push_screen(ConfirmDialog(
            f"Forget {len(preview.facts)} fact(s)? This erases exactly:", items,
            warning=warning, blocked=bool(preview.held)), done)

    @work(thread=True, exclusive=False, exit_on_error=False, group="write")
    def write(self, op: str, reason: str | None) -> None:
        actor = self.access.reviewer

        def run(ledger: Any) -> Any:
            return getattr(ledger, op)(self.fact_id, actor=actor, reason=reason)

        def describe(result: Any) -> str:
            if op == "forget":
                cert = result.certificate
                return (f"forgot {len(cert.erased)} fact(s), certificate "
                        f"{'complete' if cert.complete else 'pending'} (event #{result.seq})")
            return f"{op} {self.fact_id}: now {result.status} (event #{result.seq})"

        self.run_write(describe, run)


def _held(why: WhyResult) -> bool:
    """On legal hold now: its last hold or release event was a hold."""
    last = [r.kind for r in why.reviews if r.kind in ("hold", "release")]
    return bool(last) and last[-1] == "hold"


def _ref(r: FactRef) -> str:
    return f"{r.fact_id} ({r.subject} {r.predicate}, {r.status})"


def _summary(why: WhyResult, labels: Labels) -> str:
    f = why.fact
    value = "(erased)" if f.erased else json.dumps(f.value, ensure_ascii=False, indent=None)
    sal = (f" · salience {why.salience_class} ({why.salience})" if why.salience_class else "")
    held = " · " + labels.markup("status", "held", "⚑ on legal hold") if _held(why) else ""
    return (f"[b]{f.fact_id}[/b]  {f.subject} · {f.predicate} = {short(value, SUMMARY_VALUE)}\n"
            f"status {labels.markup('status', f.status)}{held} · "
            f"{labels.markup('prov', f.provenance)} · space {f.space} · valid "
            f"{f.valid_from[:19]} → {(f.valid_to or '∞')[:19]}{sal}")


def _why(why: WhyResult) -> str:
    c = why.created_by
    lines = [
        f"[b]Created by[/b] event #{c.seq} ({c.kind}) at {c.tx_at} by {why.actor}",
        f"[b]Cause[/b] {why.cause.kind} {why.cause.ref}"
        + (f" — {why.cause.detail}" if why.cause.detail else ""),
        f"[b]Session[/b] {why.session or '(none)'}",
        f"[b]Sources[/b] {', '.join(map(_ref, why.sources)) or '(none)'}",
        f"[b]Dependents[/b] {', '.join(map(_ref, why.dependents)) or '(none)'}",
        f"[b]Supersedes[/b] {' ← '.join(map(_ref, why.supersedes)) or '(nothing)'}",
        f"[b]Superseded by[/b] {' → '.join(map(_ref, why.superseded_by)) or '(nothing)'}",
    ]
    if why.llm is not None:
        lines.append(f"[b]LLM[/b] {why.llm.model}")
    reviews = [f"{r.kind} by {r.actor} at {r.tx_at[:19]}" + (f" ({r.reason})" if r.reason else "")
               for r in why.reviews]
    lines.append(f"[b]Reviews, holds, erasure[/b] {'; '.join(reviews) or '(none)'}")
    ok = "[green]verified[/green]" if why.events_verified else "[red]FAILED[/red]"
    lines.append(f"[b]Chain check of its events[/b] {ok}")
    lines.append("[b]Actions[/b] t retract · h hold · u release · f forget · b blast radius · "
                 "p evidence pack")
    return "\n".join(lines)


def _events(history: HistoryResult) -> list[tuple[str, list[Any]]]:
    rows: list[tuple[str, list[Any]]] = []
    for e in history.events:
        extra = e.model_extra or {}
        detail = extra.get("reason") or extra.get("supersedes") or ""
        if e.kind == "assert" and extra.get("fact_id") != history.fact_id:
            detail = f"replacement {extra.get('fact_id')}"
        rows.append((str(e.seq), [str(e.seq), e.kind, e.tx_at[:19], e.actor, short(detail, 60)]))
    return rows
