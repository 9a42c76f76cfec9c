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


def rebuilt_actions(events: Iterable[EventRow]) -> list[tuple[object, ...]]:
    """The whole actions index recomputed from the events, in the order `dump()` returns it."""
    return [action_row(e.seq, json.loads(e.body), e.actor, e.tx_at)
            for e in events if e.kind == "acted"]


Rows = tuple[list[tuple[object, ...]], list[tuple[object, ...]], list[tuple[object, ...]]]


def rebuilt_index(events: Iterable[EventRow]) -> Rows:
    """The whole session index recomputed from the events, in the order `dump()` returns it."""
    served: set[tuple[object, ...]] = set()
    rows: list[tuple[object, ...]] = []
    summary: dict[str, list[Any]] = {}
    for e in events:
        if e.kind not in SESSION_KINDS:
            continue
        body = json.loads(e.body)
        session = session_of(e.kind, body)
        if session is None:
            continue
        rows.append((session, e.seq, e.kind, e.fact_id,
                     body.get("ref") if e.kind == "acted" else None))
        entry = summary.setdefault(session, [0, None])
        if e.kind == "served":
            entry[0] += 1
            served.update((f, session, e.seq) for f in body.get("fact_ids") or [])
        else:
            entry[1] = e.seq
    return list(served), rows, [(s, n, w) for s, (n, w) in summary.items()]
