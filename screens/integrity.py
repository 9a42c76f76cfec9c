"""Integrity: chain verification with progress, the projection check, pending scrubs, the WAL,
and the policy in force with its history."""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Header, ProgressBar, Static
from textual.worker import get_current_worker

from custody_app.domain.errors import LedgerError
from custody_app.domain.escaping import MultilineText, escaped
from custody_app.domain.readmodels import RebuildResult, VerifyResult
from custody_app.interfaces.tui.access import LedgerAccess
from custody_app.ledger.readmodels import LedgerStatus
from screens.base import (
    ColumnSets,
    Failed,
    LedgerScreen,
    Loaded,
    Table,
    cursor_key,
    focus_now,
    show,
)
from screens.keybar import KeyBar


class VerifyProgress(Message):
    def __init__(self, done: int, total: int) -> None:
        super().__init__()
        self.done = done
        self.total = total


class IntegrityScreen(LedgerScreen):
    """Is the ledger whole, and which rules were in force when."""

    CSS_PATH = "integrity.tcss"
    BINDINGS = [
        Binding("v", "verify", "Verify chain"),
        Binding("c", "check", "Check projection"),
        Binding("k", "checkpoint", "Sign checkpoint"),
        Binding("o", "policy_text", "Policy text"),
    ]

    def __init__(self, access: LedgerAccess) -> None:
        super().__init__(access)
        self.state: LedgerStatus | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="status")
        yield Static("v: verify the chain · c: check the projection", id="verify")
        yield ProgressBar(id="progress", show_eta=False)
        yield Static(id="check")
        table: DataTable[Any] = Table(id="policies", cursor_type="row")
        # Under 120 columns the hash is cut (the file and "in force" stay in view at 80).
        self.sets = ColumnSets(self, table, ("since event", "tx at", "policy hash", "file", ""),
                               ((0, 0), (1, 0), (2, 13), (4, 0), (3, 0)))
        yield table
        yield Static(id="policy_text")
        yield KeyBar()

    def on_mount(self) -> None:
        focus_now(self.query_one("#policies", DataTable))

    def on_resize(self) -> None:
        self.sets.resized()
        self._fill_policies()

    def _fill_policies(self) -> None:
        s = self.state
        if s is None:
            return
        # A narrow terminal keeps the end of the policy file's path (its name), cut in front.
        cut = PATH_NARROW if self.sets.narrow else 0
        self.sets.fill([
            (p.hash + str(p.seq), [str(p.seq), p.tx_at[:19], p.hash, _tail(p.path or "", cut),
                                   "in force" if p.hash == s.policy_in_force else ""])
            for p in reversed(s.policy_history)])

    def reload(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="read")
    def load(self) -> None:
        self.run_read("status", lambda ledger: ledger.status())

    def on_loaded(self, message: Loaded) -> None:
        if message.what == "status":
            self.state = s = message.data
            show(self.query_one("#status", Static), _status(s))
            self._fill_policies()
        elif message.what == "policy_text":
            show(self.query_one("#policy_text", Static), message.data or "(text not stored)")

    # ---- verify ------------------------------------------------------------------------
    def action_verify(self) -> None:
        show(self.query_one("#verify", Static), "verifying the chain…")
        self.verify()

    @work(thread=True, exclusive=True, exit_on_error=False, group="verify")
    def verify(self) -> None:
        worker = get_current_worker()
        try:
            with self.access.open(readonly=True) as ledger:
                total = ledger.head_seq()
                self.post_message(VerifyProgress(0, total))

                def step(done: int) -> None:
                    if not worker.is_cancelled:
                        self.post_message(VerifyProgress(done, total))

                report = ledger.verify(step)
        except LedgerError as exc:
            self.post_message(Failed(exc.code, exc.message))
            return
        self.post_message(VerifyProgress(total, total))
        self.post_message(Loaded("verified", escaped(report, markup=True)))

    def on_verify_progress(self, message: VerifyProgress) -> None:
        self.query_one("#progress", ProgressBar).update(total=max(message.total, 1),
                                                        progress=message.done)

    @on(Loaded)
    def _verified(self, message: Loaded) -> None:
        if message.what == "verified":
            r: VerifyResult = message.data
            show(self.query_one("#verify", Static), _verified(r))
            if not r.valid:
                self.notify(f"chain broken at event {r.first_bad_seq}: {r.problem}",
                            title="Verify", severity="error", timeout=10)
        elif message.what == "checked":
            c: RebuildResult = message.data
            text = (f"[green]projection matches the events[/green] ({c.facts} facts, "
                    f"{c.states} states)" if not c.differences else
                    "[red]projection differs from the events[/red]: " + "; ".join(c.differences[:5]))
            show(self.query_one("#check", Static), text)

    def action_check(self) -> None:
        show(self.query_one("#check", Static), "recomputing the projection from the events…")
        self.check()

    @work(thread=True, exclusive=True, exit_on_error=False, group="check")
    def check(self) -> None:
        self.run_read("checked", lambda ledger: ledger.rebuild(repair=False))

    @work(thread=True, exclusive=False, exit_on_error=False, group="write")
    def action_checkpoint(self) -> None:
        self.run_write(lambda r: f"signed checkpoint of event #{r.checkpoint_seq} "
                       f"(key {r.key_fingerprint[:16]}) as event #{r.seq}",
                       lambda ledger: ledger.checkpoint(actor=self.access.reviewer))

    def action_policy_text(self) -> None:
        key = cursor_key(self.query_one("#policies", DataTable))
        if key is None or self.state is None:
            return
        wanted = next((p.hash for p in self.state.policy_history if p.hash + str(p.seq) == key),
                      None)
        if wanted is not None:
            self.policy_text(wanted)

    @work(thread=True, exclusive=True, exit_on_error=False, group="policy")
    def policy_text(self, policy_hash: str) -> None:
        def read(ledger: Any) -> MultilineText | None:
            text = ledger.policy_text(policy_hash)
            return None if text is None else MultilineText(text)  # its lines kept

        self.run_read("policy_text", read)


# Characters of the policy file's path shown under 120 columns (its end).
PATH_NARROW = 16


def _tail(path: str, width: int) -> str:
    return "…" + path[len(path) - width + 1:] if width and len(path) > width else path


def _status(s: LedgerStatus) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in sorted(s.counts.items())) or "no facts"
    pending = (f"[yellow]{len(s.pending_scrubs)} pending scrub(s)[/yellow]: "
               + ", ".join(f for f, _ in s.pending_scrubs[:5])) if s.pending_scrubs \
        else "no pending scrubs"
    recorded = ("recorded" if s.policy_recorded == s.policy_in_force
                else f"[yellow]recorded at the next write[/yellow] (last recorded "
                     f"{(s.policy_recorded or 'none')[:12]})")
    return (f"[b]{s.path}[/b] · {s.events} events · head {(s.head_hash or '-')[:16]} at "
            f"{(s.head_tx_at or '-')[:19]}\n"
            f"file {s.db_bytes:,} bytes · WAL {s.wal_bytes:,} bytes · {pending}\n"
            f"facts: {counts}\n"
            f"policy in force [b]{s.policy_in_force[:16]}[/b] ({recorded})")


def _verified(r: VerifyResult) -> str:
    if r.valid:
        last = (f", last at #{r.last_checkpoint_seq}" if r.last_checkpoint_seq is not None
                else "")
        return (f"[green]chain verified[/green]: {r.events} events, {r.checkpoints} signed "
                f"checkpoint(s){last}; {r.values_unchecked} value(s) unchecked (erased)")
    return f"[red]chain BROKEN at event {r.first_bad_seq}[/red]: {r.problem}"
