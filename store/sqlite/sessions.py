"""SQL over the session index: served facts, each session's events, and per-session summaries."""

from __future__ import annotations

import json

import apsw

ADD_SERVED = "INSERT OR IGNORE INTO served_facts(fact_id, session, seq) VALUES (?, ?, ?)"
ADD_EVENT = "INSERT INTO session_events(session, seq, kind, fact_id, ref) VALUES (?, ?, ?, ?, ?)"
TOUCH = """
INSERT INTO sessions(session, reads, last_write_seq) VALUES (?1, ?2, ?3)
ON CONFLICT(session) DO UPDATE SET reads = reads + ?2,
    last_write_seq = coalesce(?3, last_write_seq)"""
# First serve of each of several facts to each session, after a given seq per fact.
FIRST_SERVES = """
SELECT s.fact_id, s.session, min(s.seq)
FROM json_each(?1) j JOIN served_facts s ON s.fact_id = json_extract(j.value, '$[0]')
WHERE s.seq > json_extract(j.value, '$[1]')
GROUP BY s.fact_id, s.session"""
EVENTS_AFTER = """
SELECT seq, kind, fact_id FROM session_events
WHERE session = ? AND seq > ? AND kind IN ('assert', 'acted') ORDER BY seq"""
# Sessions with no recorded read that wrote or acted after `?1`: whether they wrote or acted in
# (?1, ?2) (while a fact was believed), and whether one of those writes was about subject ?3 or
# in space ?4.
UNREAD_IN_WINDOW = """
SELECT s.session,
    EXISTS(SELECT 1 FROM session_events e WHERE e.session = s.session AND e.seq > ?1
           AND e.seq < ?2 AND e.kind IN ('assert', 'acted')),
    EXISTS(SELECT 1 FROM session_events e JOIN facts f ON f.fact_id = e.fact_id
           WHERE e.session = s.session AND e.seq > ?1 AND e.seq < ?2 AND e.kind = 'assert'
           AND (f.subject = ?3 OR f.space = ?4))
FROM sessions s WHERE s.reads = 0 AND s.last_write_seq > ?1 ORDER BY s.session"""
ACTION_SUBJECTS = """
SELECT DISTINCT subject_ref FROM actions
WHERE session = ? AND seq > ? AND seq < ? AND subject_ref IS NOT NULL"""
SESSION_COUNTS = "SELECT coalesce(sum(reads > 0), 0), coalesce(sum(reads = 0), 0) FROM sessions"
ACTIONS_BY_REF = "SELECT seq FROM session_events WHERE ref = ? AND kind = 'acted' ORDER BY seq"
SERVED_BEFORE = """
SELECT fact_id, min(seq), count(*) FROM served_facts WHERE session = ? AND seq < ?
GROUP BY fact_id ORDER BY min(seq), fact_id"""
EVENTS_BY_SEQS = ("SELECT seq, kind, tx_at, actor, body, hash FROM events "
                  "WHERE seq IN (SELECT value FROM json_each(?)) ORDER BY seq")
ALL_SERVED = "SELECT fact_id, session, seq FROM served_facts ORDER BY fact_id, session, seq"
ALL_EVENTS = "SELECT session, seq, kind, fact_id, ref FROM session_events ORDER BY session, seq"
ALL_SESSIONS = "SELECT session, reads, last_write_seq FROM sessions ORDER BY session"
CLEAR = "DELETE FROM served_facts; DELETE FROM session_events; DELETE FROM sessions;"

SessionEventRow = tuple[str, int, str, "str | None", "str | None"]


class SessionStore:
    """The session index beside the events, written in the event's own transaction."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn

    def record(self, session: str, seq: int, kind: str, fact_id: str | None, ref: str | None,
               served: list[str] | None = None) -> None:
        """Index one event of a session: an assert made in it, a served read, an action."""
        self._conn.execute(ADD_EVENT, (session, seq, kind, fact_id, ref))
        if served:
            self._conn.executemany(ADD_SERVED, [(f, session, seq) for f in served])
        is_read = kind == "served"
        self._conn.execute(TOUCH, (session, 1 if is_read else 0, None if is_read else seq))

    def first_serves(self, after: dict[str, int]) -> list[tuple[str, str, int]]:
        """(fact id, session, first seq) of each session served each fact after its seq."""
        if not after:
            return []
        arg = json.dumps([[f, s] for f, s in after.items()])
        return [(str(f), str(s), int(q)) for f, s, q in self._conn.execute(FIRST_SERVES, (arg,))]

    def events_after(self, session: str, seq: int) -> list[tuple[int, str, str | None]]:
        """The asserts and actions of a session after `seq`, oldest first."""
        return [(int(q), str(k), f) for q, k, f in
                self._conn.execute(EVENTS_AFTER, (session, seq))]

    def unread_in_window(self, after: int, before: int, subject: str,
                         space: str) -> list[tuple[str, bool, bool]]:
        """(session, active, touching) for each session without recorded reads that wrote or
        acted after `after`: active when it wrote or acted in (after, before), touching when one
        of those writes was about `subject` or in `space`."""
        return [(str(n), bool(a), bool(t)) for n, a, t in
                self._conn.execute(UNREAD_IN_WINDOW, (after, before, subject, space))]

    def action_subjects(self, session: str, after: int, before: int) -> set[str]:
        """The peppered subject hashes the session's actions in (after, before) name."""
        return {str(r[0]) for r in self._conn.execute(ACTION_SUBJECTS, (session, after, before))}

    def session_counts(self) -> tuple[int, int]:
        """(sessions with recorded reads, sessions without) in the whole ledger."""
        row = next(iter(self._conn.execute(SESSION_COUNTS)))
        return int(row[0]), int(row[1])

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
                self._conn.execute(EVENTS_BY_SEQS, (json.dumps(sorted(set(seqs))),))]

    def dump(self) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]],
                            list[tuple[object, ...]]]:
        return ([tuple(r) for r in self._conn.execute(ALL_SERVED)],
                [tuple(r) for r in self._conn.execute(ALL_EVENTS)],
                [tuple(r) for r in self._conn.execute(ALL_SESSIONS)])

    def replace_all(self, served: list[tuple[object, ...]], events: list[tuple[object, ...]],
                    sessions: list[tuple[object, ...]]) -> None:
        """Swap the index for a rebuilt one (inside the caller's write transaction)."""
        self._conn.execute(CLEAR)
        self._conn.executemany(ADD_SERVED, served)
        self._conn.executemany(ADD_EVENT, events)
        self._conn.executemany(
            "INSERT INTO sessions(session, reads, last_write_seq) VALUES (?, ?, ?)", sessions)
