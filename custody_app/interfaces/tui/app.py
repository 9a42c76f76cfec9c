"""The Textual terminal app: screens as modes, live refresh (a watchdog observer on a file
ledger's files; on a server ledger, the server's notifications, and a slow poll while they
cannot be heard), and the `make_app` factory the CLI and the tests use. The only custody_app
module that imports textual."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from textual import events, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.worker import get_current_worker
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from custody_app.domain.errors import LedgerError, PolicyError
from custody_app.domain.timeutil import Clock
from custody_app.interfaces.tui.access import LedgerAccess
from screens import SCREEN_CLASSES, SCREENS
from store.address import address_of

# How long the app waits after a file change before refreshing (changes come in bursts).
SETTLE_S = 0.15
# How often the app reads the head of a ledger whose changes no local file shows (on a
# server) while it cannot listen for them (the listening connection dropped or was refused),
# and how often it tries to listen again meanwhile. While it listens, it does not poll.
POLL_S = 5.0
# How long one wait for a notification lasts: the listener checks between waits whether the
# app is closing.
LISTEN_WAIT_S = 0.25


class LedgerFilesChanged(Message):
    """The ledger file, its WAL or the policy file changed (posted from the observer thread)."""

    def __init__(self, policy: bool) -> None:
        super().__init__()
        self.policy = policy


class HeadMoved(Message):
    """Another writer appended: the chain head is now `seq`."""

    def __init__(self, seq: int) -> None:
        super().__init__()
        self.seq = seq


class ChangeNotified(Message):
    """The server notified a commit by some process on some host (head `seq`; 0: unknown)."""

    def __init__(self, seq: int) -> None:
        super().__init__()
        self.seq = seq


class Listening(Message):
    """The listener to the server's notifications is connected (`why` None) or lost (`why`
    says why: the app polls meanwhile)."""

    def __init__(self, why: str | None) -> None:
        super().__init__()
        self.why = why


class WaitingCounted(Message):
    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count


class PolicyAdopted(Message):
    def __init__(self, policy_hash: str, recorded_seq: int | None) -> None:
        super().__init__()
        self.policy_hash = policy_hash
        self.recorded_seq = recorded_seq


class PolicyRefused(Message):
    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message


class _Watcher(FileSystemEventHandler):
    def __init__(self, app: CustodyApp, files: list[str], policy_file: str | None) -> None:
        self.app = app
        self.files = set(files)
        self.policy_file = policy_file

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        paths = {os.fsdecode(event.src_path), os.fsdecode(getattr(event, "dest_path", "") or "")}
        hit = paths & self.files
        if hit:
            self.app.post_message(LedgerFilesChanged(policy=self.policy_file in hit))


class _Listener(threading.Thread):
    """Hears a server ledger's commits (any process, any host) and tells the app of each; while
    the listening connection cannot be made or is lost, says so and tries again every POLL_S
    seconds (the app polls meanwhile). A thread of its own, like the file observer: it runs
    as long as the app, so no worker waits on it."""

    def __init__(self, app: CustodyApp) -> None:
        super().__init__(name="custody-listener", daemon=True)
        self.app = app
        self.stopping = threading.Event()

    def run(self) -> None:
        lost: str | None = None
        while not self.stopping.is_set():
            try:
                changes = self.app.access.listen()
            except LedgerError as exc:
                if exc.message != lost:
                    lost = exc.message
                    self.app.post_message(Listening(exc.message))
                self.stopping.wait(POLL_S)
                continue
            if changes is None:
                return
            lost = None
            self.app.post_message(Listening(None))
            try:
                while not self.stopping.is_set():
                    seq = changes.wait(LISTEN_WAIT_S)
                    if seq is not None:
                        self.app.post_message(ChangeNotified(seq))
            except LedgerError as exc:
                lost = exc.message
                self.app.post_message(Listening(exc.message))
                self.stopping.wait(POLL_S)
            finally:
                changes.close()


class CustodyApp(App[None]):
    """custody-app: browse beliefs through time, review quarantine, holds, sweeps, integrity."""

    CSS_PATH = "app.tcss"
    TITLE = "custody-app"
    BINDINGS = [
        Binding("1", "show('beliefs')", "Beliefs"),
        Binding("2", "show('review')", "Review"),
        Binding("3", "show('holds')", "Holds"),
        Binding("4", "show('retention')", "Retention"),
        Binding("5", "show('integrity')", "Integrity"),
        Binding("6", "show('blast')", "Blast radius"),
        Binding("7", "show('actions')", "Actions"),
        Binding("8", "show('timeline')", "Timeline"),
        Binding("f1,question_mark", "help", "Help", key_display="F1"),
        # q quits as in lazygit and most terminal tools (not while typing in a box: a box
        # takes its letters first); ctrl+q quits from anywhere.
        Binding("q", "quit_app", "Quit"),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(self, access: LedgerAccess, *, watch: bool = True) -> None:
        super().__init__()
        self.access = access
        self.live = watch
        self.head_seq = 0
        self.waiting: int | None = None  # claims in the review queue, shown in the header
        self._observer: Any = None
        self._settle: Any = None
        self._policy_dirty = False
        # On a server ledger: whether the app hears its changes (None: not tried yet), the
        # slow poll running while it does not, and how many notifications it took.
        self.listening: bool | None = None
        self.notifications = 0
        self._poll: Any = None
        self._listener: _Listener | None = None
        self.screen_names = list(SCREENS)
        for name, factory in SCREENS.items():
            self.add_mode(name, _bind(factory, access))

    async def on_event(self, event: events.Event) -> None:
        # Keys typed ahead ("/" and an id sent at once by tmux, a paste, a fast typist on a
        # loaded machine): Textual hands each key to what has the focus when the key arrives,
        # and runs a screen's bindings only later, so the id went to the table or tree and its
        # "4" switched screens. A key that opens a text box moves the focus here, in arrival
        # order, so every key after it goes into the box.
        if isinstance(event, events.Key) and not event.is_forwarded:
            opens = getattr(self.screen, "open_box_for", None)
            if callable(opens) and opens(event.key):
                return
        await super().on_event(event)

    # ---- lifecycle ---------------------------------------------------------------------
    def on_mount(self) -> None:
        self._show_policy()
        self.count_waiting()
        self.switch_mode("beliefs")
        if self.live:
            self._start_observer()
            if not self.access.ledger_files_watched:
                self._listener = _Listener(self)
                self._listener.start()

    def _start_observer(self) -> None:
        files = self.access.watched_files
        policy_file = os.path.abspath(self.access.policy_path) if self.access.policy_path else None
        handler = _Watcher(self, files, policy_file)
        observer = Observer()
        for folder in sorted({os.path.dirname(f) for f in files}):
            if os.path.isdir(folder):
                observer.schedule(handler, folder, recursive=False)
        observer.daemon = True
        observer.start()
        self._observer = observer

    def on_unmount(self) -> None:
        if self._listener is not None:
            self._listener.stopping.set()
            self._listener.join(timeout=2)
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2)

    def _show_policy(self) -> None:
        # The count waiting for review comes first: a narrow header cuts its end, never it.
        name = address_of(self.access.path).name
        waiting = "" if self.waiting is None else f"{self.waiting:,} waiting for review · "
        if self.listening is False:
            waiting += f"not live: polling every {POLL_S:g} s · "
        self.sub_title = (f"{waiting}{name} · {self.access.reviewer} · "
                          f"policy {self.access.policy.hash[:12]}")

    @work(thread=True, exclusive=True, exit_on_error=False, group="waiting")
    def count_waiting(self) -> None:
        """The review count in the header, read afresh whenever the ledger moved."""
        try:
            with self.access.open(readonly=True) as ledger:
                # Claims and pending retractions: both wait for a reviewer.
                count = ledger.status().counts.get("quarantined", 0) + \
                    len(ledger.pending_retractions())
        except LedgerError:
            return
        if not get_current_worker().is_cancelled:
            self.post_message(WaitingCounted(count))

    def on_waiting_counted(self, message: WaitingCounted) -> None:
        if message.count != self.waiting:
            self.waiting = message.count
            self._show_policy()

    # ---- live refresh ------------------------------------------------------------------
    def on_ledger_files_changed(self, message: LedgerFilesChanged) -> None:
        self._policy_dirty = self._policy_dirty or message.policy
        if self._settle is not None:
            self._settle.stop()
        self._settle = self.set_timer(SETTLE_S, self._settled)

    def _settled(self) -> None:
        self._settle = None
        if self._policy_dirty:
            self._policy_dirty = False
            self.reload_policy()
        self.check_head()

    @work(thread=True, exclusive=True, exit_on_error=False, group="head")
    def check_head(self) -> None:
        try:
            with self.access.open(readonly=True) as ledger:
                seq = ledger.head_seq()
        except LedgerError:
            return
        if not get_current_worker().is_cancelled:
            self.post_message(HeadMoved(seq))

    def on_head_moved(self, message: HeadMoved) -> None:
        if message.seq != self.head_seq:
            self.head_seq = message.seq
            self.refresh_screen()
            self.count_waiting()

    def on_listening(self, message: Listening) -> None:
        was = self.listening
        self.listening = message.why is None
        if self.listening:
            if self._poll is not None:
                self._poll.stop()
                self._poll = None
            if was is False:
                self.notify("Live refresh is back: the server's notifications are heard again",
                            title="Live refresh")
        else:
            if self._poll is None:
                self._poll = self.set_interval(POLL_S, self.check_head)
            self.notify(f"Live refresh lost ({message.why}); reading the ledger every "
                        f"{POLL_S:g} s until the server can be heard again",
                        title="Live refresh", severity="warning", timeout=10)
        self._show_policy()
        # What committed while the app was not listening (or before it first listened).
        self.check_head()

    def on_change_notified(self, message: ChangeNotified) -> None:
        # The head is read, not taken from the payload: anyone who may connect can NOTIFY
        # the channel, and a forged seq must not make the app skip the real ones.
        self.notifications += 1
        self.check_head()

    def refresh_screen(self) -> None:
        """Reload what the open screen (and the screen under a dialog) shows."""
        for screen in self.screen_stack:
            reload = getattr(screen, "reload", None)
            if callable(reload):
                reload()

    @work(thread=True, exclusive=True, exit_on_error=False, group="policy")
    def reload_policy(self) -> None:
        try:
            loaded = self.access.reload_policy()
        except PolicyError as exc:
            self.post_message(PolicyRefused(exc.message))
            return
        if loaded.hash == self.access.policy.hash:
            return
        self.access.policy = loaded
        try:
            with self.access.open() as ledger:
                change = ledger.adopt_policy()
        except LedgerError as exc:
            self.post_message(PolicyRefused(exc.message))
            return
        self.post_message(PolicyAdopted(loaded.hash, change.seq if change else None))

    def on_policy_adopted(self, message: PolicyAdopted) -> None:
        self._show_policy()
        where = f" (policy event #{message.recorded_seq})" if message.recorded_seq else ""
        self.notify(f"Policy {message.policy_hash[:12]} adopted{where}", title="Policy")
        self.refresh_screen()

    def on_policy_refused(self, message: PolicyRefused) -> None:
        self.notify(f"{message.message}; policy {self.access.policy.hash[:12]} stays in force",
                    title="Policy refused", severity="error", timeout=10)

    # ---- actions -----------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # q does not quit from inside a dialog (a q pressed there meant something else);
        # ctrl+q still does.
        if action == "quit_app" and isinstance(self.screen, ModalScreen):
            return None
        return True

    async def action_quit_app(self) -> None:
        if not isinstance(self.screen, ModalScreen):
            await self.action_quit()

    def action_show(self, name: str) -> None:
        """Open a screen's list: the screen itself, never the fact last opened over it (a
        fact or blast screen pushed in that mode is closed)."""
        if self.current_mode != name:
            self.switch_mode(name)
        stack = self._screen_stacks.get(name, [])
        if len(stack) > 1 and not isinstance(self.screen, ModalScreen):
            # The mode's first screen is its list; the screens over it were opened from it.
            while len(self._screen_stacks[name]) > 1:
                self.pop_screen()

    def action_help(self) -> None:
        from screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self._all_bindings(self.screen)))

    def _all_bindings(self, screen: Screen[Any]) -> list[tuple[str, str, str]]:
        """(where, key, description) of every binding: the open screen's first, then the
        app's (everywhere), then every other screen's, with human key names."""
        others = [c for c in SCREEN_CLASSES if not isinstance(screen, c)]
        rows = []
        for where, bindings in ((_screen_name(type(screen)), screen.BINDINGS),
                                ("everywhere", self.BINDINGS),
                                *((_screen_name(c), c.BINDINGS) for c in others)):
            for b in bindings:
                if isinstance(b, Binding) and b.description:
                    keys = ", ".join(self.get_key_display(Binding(k.strip(), b.action))
                                     for k in b.key.split(","))
                    shown = keys if "," in b.key else (b.key_display or keys)  # F1 and ?
                    rows.append((where, shown, b.description))
        return rows

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        # Each action once (Textual's own first), the app's global actions from any screen.
        seen_titles: set[str] = set()
        for command in super().get_system_commands(screen):
            seen_titles.add(command.title)
            yield command
        seen = set()
        for owner, bindings in ((screen, screen.BINDINGS), (self, self.BINDINGS)):
            for b in bindings:
                if (not isinstance(b, Binding) or not b.description or b.action in seen
                        or b.description in seen_titles):
                    continue
                seen.add(b.action)
                seen_titles.add(b.description)
                key = b.key_display or self.get_key_display(b)
                yield SystemCommand(b.description, f"{b.description} (key {key})",
                                    lambda owner=owner, action=b.action:
                                    self.run_action(action, owner))


def _screen_name(cls: type[Any]) -> str:
    """`BeliefsScreen` -> `Beliefs`, `BlastScreen` -> `Blast radius`: how the user knows it."""
    name = cls.__name__.removesuffix("Screen")
    return {"Blast": "Blast radius", "Fact": "Fact detail"}.get(name, name)


def _bind(factory: Callable[[LedgerAccess], Screen[None]],
          access: LedgerAccess) -> Callable[[], Screen[None]]:
    return lambda: factory(access)


def make_app(ledger_path: str | Path, policy_path: str | Path | None = None, *,
             reviewer: str | None = None, clock: Clock | None = None,
             keystore: str | Path | None = None, watch: bool = True) -> CustodyApp:
    """The app on a ledger (created if missing) under a policy (the shipped default if none).
    Raises LedgerError or PolicyError when either cannot be opened."""
    return CustodyApp(LedgerAccess.create(ledger_path, policy_path, reviewer=reviewer,
                                          clock=clock, keystore=keystore), watch=watch)
