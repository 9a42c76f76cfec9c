"""SQL over the session index (PostgreSQL): served facts, each session's events, and
per-session summaries. Mirrors store.sqlite.sessions call for call and row for row."""

from __future__ import annotations

from typing import Any

import psycopg

from store.postgres.bulk import BATCH, copy_rows
from store.postgres.subjects import stored

# Written here: served_facts, session_events, sessions (SessionStore.record). Text compares
# bytewise (COLLATE "C"), as SQLite's BINARY does.
DDL: tuple[str, ...] = (
    """CREATE TABLE served_facts(
    fact_id text COLLATE "C" NOT NULL,
    session text COLLATE "C" NOT NULL,
    seq     bigint NOT NULL,
    PRIMARY KEY(fact_id, session, seq)
)""",
    "CREATE INDEX served_facts_by_session ON served_facts(session, seq)",
    """CREATE TABLE session_events(
    session text COLLATE "C" NOT NULL,
    seq     bigint NOT NULL,
    kind    text COLLATE "C" NOT NULL,
    fact_id text COLLATE "C",
    ref     text COLLATE "C",
    PRIMARY KEY(session, seq)
)""",
    "CREATE INDEX session_actions_by_ref ON session_events(ref, seq) WHERE kind = 'acted'",
    """CREATE TABLE sessions(
    session        text COLLATE "C" PRIMARY KEY,
    reads          bigint NOT NULL,
    last_write_seq bigint
)""",
    "CREATE INDEX sessions_unread ON sessions(last_write_seq) WHERE reads = 0",
)

# One statement (one round trip) for an event of a session: its row, the facts it served
# (a repeat ignored, as INSERT OR IGNORE does) and the session's summary.
RECORD = """
WITH event AS (
    INSERT INTO session_events(session, seq, kind, fact_id, ref)
    VALUES (%(session)s, %(seq)s, %(kind)s, %(fact_id)s, %(ref)s)
), served AS (
    INSERT INTO served_facts(fact_id, session, seq)
    SELECT f, %(session)s, %(seq)s FROM unnest(%(served)s::text[]) AS f
    ON CONFLICT DO NOTHING
)
INSERT INTO sessions AS s(session, reads, last_write_seq)
VALUES (%(session)s, %(reads)s, %(write)s)
ON CONFLICT(session) DO UPDATE SET reads = s.reads + excluded.reads,
    last_write_seq = coalesce(excluded.last_write_seq, s.last_write_seq)"""
# First serve of each of several facts to each session, after a given seq per fact; in
# (fact, session) order, the order of the B-tree SQLite groups them in.
FIRST_SERVES = """
SELECT s.fact_id, s.session, min(s.seq)
FROM unnest(%s::text[], %s::bigint[]) AS j(fact_id, after_seq)
JOIN served_facts s ON s.fact_id = j.fact_id
WHERE s.seq > j.after_seq
GROUP BY s.fact_id, s.session ORDER BY s.fact_id, s.session"""
EVENTS_AFTER = """
SELECT seq, kind, fact_id FROM session_events
WHERE session = %s AND seq > %s AND kind IN ('assert', 'acted') ORDER BY seq"""
# Sessions with no recorded read that wrote or acted after `after`: whether they wrote or
# acted in (after, before) (while a fact was believed), and whether one of those writes was
# about `subject` or in `space`.
UNREAD_IN_WINDOW = """
SELECT s.session,
    EXISTS(SELECT 1 FROM session_events e WHERE e.session = s.session AND e.seq > %(after)s
           AND e.seq < %(before)s AND e.kind IN ('assert', 'acted')),
    EXISTS(SELECT 1 FROM session_events e JOIN facts f ON f.fact_id = e.fact_id
           WHERE e.session = s.session AND e.seq > %(after)s AND e.seq < %(before)s
           AND e.kind = 'assert' AND (f.subject = %(subject)s OR f.space = %(space)s))
FROM sessions s WHERE s.reads = 0 AND s.last_write_seq > %(after)s ORDER BY s.session"""
ACTION_SUBJECTS = """
SELECT DISTINCT subject_ref FROM actions
WHERE session = %s AND seq > %s AND seq < %s AND subject_ref IS NOT NULL"""
SESSION_COUNTS = ("SELECT count(*) FILTER (WHERE reads > 0), count(*) FILTER (WHERE reads = 0) "
                  "FROM sessions")
ACTIONS_BY_REF = "SELECT seq FROM session_events WHERE ref = %s AND kind = 'acted' ORDER BY seq"
SERVED_BEFORE = """
SELECT fact_id, min(seq), count(*) FROM served_facts WHERE session = %s AND seq < %s
GROUP BY fact_id ORDER BY min(seq), fact_id"""
EVENTS_BY_SEQS = ("SELECT seq, kind, tx_at, actor, body, hash FROM events "
                  "WHERE seq = ANY(%s::bigint[]) ORDER BY seq")
ALL_SERVED = "SELECT fact_id, session, seq FROM served_facts ORDER BY fact_id, session, seq"
ALL_EVENTS = "SELECT session, seq, kind, fact_id, ref FROM session_events ORDER BY session, seq"
ALL_SESSIONS = "SELECT session, reads, last_write_seq FROM sessions ORDER BY session"
CLEAR = "DELETE FROM served_facts; DELETE FROM session_events; DELETE FROM sessions"
ADD_SERVED_MANY = ("INSERT INTO served_facts(fact_id, session, seq) "
                   "SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[]) "
                   "ON CONFLICT DO NOTHING")
COPY_EVENTS = "COPY session_events(session, seq, kind, fact_id, ref) FROM STDIN"
COPY_SESSIONS = "COPY sessions(session, reads, last_write_seq) FROM STDIN"

SessionEventRow = tuple[str, int, str, "str | None", "str | None"]


class SessionStore:
    """The session index beside the events, written in the event's own transaction."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def record(self, session: str, seq: int, kind: str, fact_id: str | None, ref: str | None,
               served: list[str] | None = None) -> None:
        """Index one event of a session: an assert made in it, a served read, an action."""
        is_read = kind == "served"
        self._conn.execute(RECORD, {
            "session": session, "seq": seq, "kind": kind, "fact_id": fact_id, "ref": ref,
            "served": list(served or ()), "reads": 1 if is_read else 0,
            "write": None if is_read else seq})

    def first_serves(self, after: dict[str, int]) -> list[tuple[str, str, int]]:
        """(fact id, session, first seq) of each session served each fact after its seq."""
        if not after:
            return []
        return [(str(f), str(s), int(q)) for f, s, q in
                self._conn.execute(FIRST_SERVES, (list(after), list(after.values())))]

    def events_after(self, session: str, seq: int) -> list[tuple[int, str, str | None]]:
        """The asserts and actions of a session after `seq`, oldest first."""
        return [(int(q), str(k), f) for q, k, f in
                self._conn.execute(EVENTS_AFTER, (session, seq))]

    def unread_in_window(self, after: int, before: int, subject: str,
                         space: str) -> list[tuple[str, bool, bool]]:
        """(session, active, touching) for each session without recorded reads that wrote or
        acted after `after`: active when it wrote or acted in (after, before), touching when one
        of those writes was about `subject` or in `space`."""
        params = {"after": after, "before": before, "subject": stored(self._conn, subject),
                  "space": space}
        return [(str(n), bool(a), bool(t)) for n, a, t in
                self._conn.execute(UNREAD_IN_WINDOW, params)]

    def action_subjects(self, session: str, after: int, before: int) -> set[str]:
        """The peppered subject hashes the session's actions in (after, before) name."""
        return {str(r[0]) for r in self._conn.execute(ACTION_SUBJECTS, (session, after, before))}

    def session_counts(self) -> tuple[int, int]:
        """(sessions with recorded reads, sessions without) in the whole ledger."""
        row = self._conn.execute(SESSION_COUNTS).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def actions_by_ref(self, ref: str) -> list[int]:
        return [int(r[0]) for r in self._conn.execute(ACTIONS_BY_REF, (ref,))]

    def served_before(self, session: str, seq: int) -> list[tuple[str, int, int]]:
        """(fact id, first served seq, times served) for facts served to a session before seq."""
        return [(str(f), int(q), int(n)) for f, q, n in
                self._conn.execute(SERVED_BEFORE, (session, seq))]

    def events_by_seq(self, seqs: list[int]) -> list[tuple[int, str, str, str, str, str]]:
        """(seq, kind, tx_at, actor, body, hash) of several events in one query."""
        if not seqs:
            return []
        return [(int(q), str(k), str(t), str(a), str(b), str(h)) for q, k, t, a, b, h in
                self._conn.execute(EVENTS_BY_SEQS, (sorted(set(seqs)),))]

    def dump(self) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]],
                            list[tuple[object, ...]]]:
        return ([tuple(r) for r in self._conn.execute(ALL_SERVED)],
                [tuple(r) for r in self._conn.execute(ALL_EVENTS)],
                [tuple(r) for r in self._conn.execute(ALL_SESSIONS)])

    def replace_all(self, served: list[tuple[object, ...]], events: list[tuple[object, ...]],
                    sessions: list[tuple[object, ...]]) -> None:
        """Swap the index for a rebuilt one (inside the caller's write transaction): served
        facts by arrays of BATCH rows (a repeat ignored, as SQLite's INSERT OR IGNORE does),
        the events and the summaries by COPY."""
        self._conn.execute(CLEAR)
        for at in range(0, len(served), BATCH):
            part = served[at:at + BATCH]
            self._conn.execute(ADD_SERVED_MANY, ([r[0] for r in part], [r[1] for r in part],
                                                 [r[2] for r in part]))
        copy_rows(self._conn, COPY_EVENTS, events)
        copy_rows(self._conn, COPY_SESSIONS, sessions)
