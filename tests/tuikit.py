"""Helpers for the terminal-app tests: a small story ledger on disk, the app on it, and waiting
for thread workers and their messages to land."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import DataTable
from textual.worker import WorkerCancelled, WorkerState

from custody_app.domain.timeutil import ManualClock
from custody_app.interfaces.tui.app import CustodyApp, make_app
from custody_app.ledger.facade import Ledger

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
WRITER = "agent:support-bot"
REVIEWER = "user:dana"
CAUSE = {"kind": "tool", "ref": "crm.lookup#1"}
# The app's clock in tests: frozen a little after the story, so salience and "now" are fixed.
FROZEN = T0 + timedelta(days=3)


class Story:
    """Fact ids of the story ledger by name."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ids: dict[str, str] = {}
        self.tx: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        return self.ids[name]


STORY_LEDGER_ID = "5107" * 8


def build_story(path: Path, *, extra_facts: int = 0, policy: Path | None = None) -> Story:
    """A support agent's memory: plans (one superseded), a retracted mistake, two claims in
    quarantine (one would supersede), a derived fact, a hold; deterministic ids and times."""
    story = Story(path)
    clock = ManualClock(T0)
    with Ledger.open(path, clock=clock, id_seed=7, policy=policy) as led:
        # A fixed ledger id: it is chained into the first event, so the head hash the
        # Integrity screen shows is the same on every run (snapshots).
        if led.db.events.head() is None:
            led.db.put_meta("ledger_id", STORY_LEDGER_ID)

        def at(hours: float) -> None:
            clock.set(T0 + timedelta(hours=hours))

        def put(name: str, subject: str, predicate: str, value: Any, **kw: Any) -> str:
            kw.setdefault("provenance", "attested")
            kw.setdefault("actor", WRITER)
            r = led.assert_fact(subject, predicate, value, cause=CAUSE, **kw)
            story.ids[name] = r.fact_id
            story.tx[name] = r.tx_at
            return r.fact_id

        at(0)
        put("plan", "acct:1042", "plan", "team")
        put("name", "acct:1042", "legal_name", "Acme Logistics GmbH", space="org")
        at(1)
        put("region", "acct:2077", "region", "eu-west")
        at(2)
        put("plan2", "acct:1042", "plan", "business", supersedes=story["plan"])
        at(3)
        put("mistake", "acct:2077", "refund", "approved", space="team:support")
        at(4)
        led.retract(story["mistake"], actor="user:maria", reason="poisoned tool result")
        at(5)
        put("claim", "acct:2077", "timezone", "Europe/Amsterdam", provenance="claimed")
        at(6)
        put("claim2", "acct:2077", "region", "eu-central", provenance="claimed",
            supersedes=story["region"])
        at(7)
        put("summary", "acct:1042", "summary", "business plan, Hamburg",
            sources=[story["plan2"], story["name"]], actor="llm:haiku",
            llm={"model": "haiku", "prompt_hash": "p" * 8, "input_hash": "i" * 8,
                 "output_hash": "o" * 8, "tokens": 15})
        at(8)
        led.hold(story["name"], actor="user:counsel", reason="case 2026-114")
        for n in range(extra_facts):
            at(9 + n / 1000)
            put(f"bulk{n}", f"acct:{5000 + n}", "seats", n)
    return story


def app_on(path: Path, *, reviewer: str = REVIEWER, policy: Path | None = None,
           watch: bool = False, clock: ManualClock | None = None) -> CustodyApp:
    return make_app(path, policy, reviewer=reviewer, clock=clock or ManualClock(FROZEN),
                    watch=watch)


async def idle(pilot: Pilot[Any], rounds: int = 3) -> None:
    """Let thread workers finish and the messages they posted be handled: at least `rounds`
    rounds, then more while a worker a handler started is still pending or running (on a loaded
    machine a chain of worker, message, worker can outlast a fixed count; capped)."""
    for n in range(rounds + 40):
        busy = [w for w in pilot.app.workers
                if w.state in (WorkerState.PENDING, WorkerState.RUNNING)]
        if n >= rounds and not busy:
            return
        try:
            await pilot.app.workers.wait_for_complete()
        except WorkerCancelled:
            pass  # an exclusive worker was replaced by a newer one: wait for that next round
        await pilot.pause()


def add_helper_claims(story: Story, count: int) -> Story:
    """`count` more claims in quarantine, by another writer, from messages (acct:7000 on)."""
    with Ledger.open(story.path, clock=ManualClock(FROZEN)) as led, led.transaction():
        for n in range(count):
            led.assert_fact(f"acct:{7000 + n}", "tier", "gold", actor="agent:helper",
                            cause={"kind": "message", "ref": f"m{n}"})
    return story


def queue_items(path: Path) -> list[Any]:
    """Every claim waiting for review, read through the API a page at a time."""
    with Ledger.open(path, readonly=True) as led:
        items: list[Any] = []
        after: int | None = 0
        while after is not None:
            page = led.review_queue(after_seq=after, limit=500)
            items += page.items
            after = page.next_after
    return items


async def open_screen(pilot: Pilot[Any], key: str) -> None:
    """Let the app settle, press a screen's number key, and let that screen load."""
    await idle(pilot)
    await pilot.press(key)
    await idle(pilot)


def keys(table: DataTable[Any]) -> list[str]:
    return [str(k.value) for k in table.rows]


def cell_texts(table: DataTable[Any], key: str) -> list[str]:
    return [str(c) for c in table.get_row(key)]


def notes(app: CustodyApp) -> list[str]:
    return [n.message for n in app._notifications]


def screen_text(app: CustodyApp, selector: str) -> str:
    from textual.widgets import Static

    return str(app.screen.query_one(selector, Static).render())


def cursor_of(table: DataTable[Any]) -> str | None:
    from screens.base import cursor_key

    return cursor_key(table)
