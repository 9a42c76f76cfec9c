"""The session index: which event of which session each event is, kept beside the events."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from store import LedgerFile
from store.rows import EventRow

SESSION_KINDS = ("assert", "served", "acted")


def session_of(kind: str, body: dict[str, Any]) -> str | None:
    """The session an event belongs to, if any."""
    if kind not in SESSION_KINDS:
        return None
    session = body.get("session")
    return session if isinstance(session, str) else None


def index_event(db: LedgerFile, kind: str, seq: int, fact_id: str | None,
                body: dict[str, Any]) -> None:
    """Index one just-appended event (inside its write transaction)."""
    session = session_of(kind, body)
    if session is None:
        return
    if kind == "acted":
        db.actions.record(action_row(seq, body, str(body.get("actor")), str(body.get("tx_at"))))
    db.sessions.record(session, seq, kind, fact_id, body.get("ref") if kind == "acted" else None,
                       list(body.get("fact_ids") or []) if kind == "served" else None)


def action_row(seq: int, body: dict[str, Any], actor: str, tx_at: str) -> tuple[
        int, str, str, str, str | None, str]:
    """The actions index row of an `acted` event."""
    return (seq, str(body["tool"]), actor, str(body["session"]), body.get("subject_ref"), tx_at)


Rows = tuple[list[tuple[object, ...]], list[tuple[object, ...]], list[tuple[object, ...]]]


class SessionFold:
    """The session and actions indexes folded from events fed one at a time, in seq order
    (the rebuild and verify's walk share it)."""

    def __init__(self) -> None:
        self.served: set[tuple[object, ...]] = set()
        self.rows: list[tuple[object, ...]] = []
        self.summary: dict[str, list[Any]] = {}
        self.actions: list[tuple[object, ...]] = []

    def feed(self, e: EventRow, body: dict[str, Any]) -> None:
        session = session_of(e.kind, body)
        if session is None:
            return
        self.rows.append((session, e.seq, e.kind, e.fact_id,
                          body.get("ref") if e.kind == "acted" else None))
        entry = self.summary.setdefault(session, [0, None])
        if e.kind == "served":
            entry[0] += 1
            self.served.update((f, session, e.seq) for f in body.get("fact_ids") or [])
        else:
            entry[1] = e.seq
        if e.kind == "acted":
            self.actions.append(action_row(e.seq, body, e.actor, e.tx_at))

    def index(self) -> Rows:
        """(served facts, session events, sessions) in the order `SessionStore.dump()` has."""
        return (sorted(self.served, key=_served_key), sorted(self.rows, key=_event_key),
                [(s, n, w) for s, (n, w) in sorted(self.summary.items())])


def _served_key(row: tuple[object, ...]) -> tuple[str, str, int]:
    return (str(row[0]), str(row[1]), int(row[2]))  # type: ignore[call-overload]


def _event_key(row: tuple[object, ...]) -> tuple[str, int]:
    return (str(row[0]), int(row[1]))  # type: ignore[call-overload]


def rebuilt_index(events: Iterable[EventRow]) -> Rows:
    """The whole session index recomputed from the events, in the order `dump()` returns it."""
    fold = SessionFold()
    for e in events:
        if e.kind in SESSION_KINDS:
            fold.feed(e, json.loads(e.body))
    return fold.index()
