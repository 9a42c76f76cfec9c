"""SQL for browsing a big ledger page by page (PostgreSQL): beliefs at an event, the review
queue, holds. Mirrors store.sqlite.browse; declares no table (it reads events, facts,
fact_states and policies, declared by events.py, projection.py and policies.py)."""

from __future__ import annotations

from functools import cache
from typing import Any

import psycopg

from store.postgres.bulk import no_limit
from store.postgres.projection import fact_rows
from store.postgres.subjects import named_rows, stored
from store.rows import FACT_COLUMNS, BeliefRow, FactRow

DDL: tuple[str, ...] = ()

_FCOLS = ", ".join(f"f.{c}" for c in FACT_COLUMNS)
EVENT_TX_AT = "SELECT tx_at FROM events WHERE seq = %s"
EVENT_BRIEF = "SELECT seq, kind, tx_at, actor, fact_id FROM events WHERE seq = %s"
HEAD_SEQ = "SELECT max(seq) FROM events"
# Facts whose status is `%s`, oldest first, one page after a cursor (facts_by_status index).
WITH_STATUS_PAGE = (f"SELECT {_FCOLS} FROM facts f WHERE f.status = %s AND f.assert_seq > %s "
                    "ORDER BY f.assert_seq LIMIT %s")
# The newest events first, one page before a cursor, with the subject and predicate of the
# fact each is about (events carry no subject once it is erased; the fact row keeps its own).
EVENTS_NEWEST = ("SELECT e.seq, e.kind, e.tx_at, e.actor, e.fact_id, f.subject, f.predicate, "
                 "e.body, e.value, f.status FROM events e "
                 "LEFT JOIN facts f ON f.fact_id = e.fact_id "
                 "WHERE e.seq < %s ORDER BY e.seq DESC LIMIT %s")
HELD_PAGE = (f"SELECT {_FCOLS} FROM facts f WHERE f.held = 1 AND f.assert_seq > %s "
             "ORDER BY f.assert_seq LIMIT %s")
LAST_EVENT_OF_KIND = ("SELECT seq, tx_at, actor, body FROM events WHERE fact_id = %s "
                      "AND kind = %s ORDER BY seq DESC LIMIT 1")
POLICY_HISTORY = ("SELECT e.seq, e.tx_at, e.policy_hash, p.source, p.path FROM events e "
                  "LEFT JOIN policies p ON p.hash = e.policy_hash "
                  "WHERE e.kind = 'policy' ORDER BY e.seq")
# Distinct spaces after a name, one page, by a loose index scan (facts_by_space). The limit
# is compared, not a LIMIT: a page of 0 (or less) still holds the first space, as in SQLite.
# The last event learned at or before a moment: the binary search over seq of SQLite's
# `seq_at` (transaction time never decreases along the chain and has no index of its own),
# run by the server in one statement instead of a round trip per step. A missing seq counts
# as "after", as there; tx_at compares bytewise, as Python's str comparison there does.
SEQ_AT = """
WITH RECURSIVE b(lo, hi) AS (
    SELECT 0::bigint, (SELECT coalesce(max(seq), 0)::bigint FROM events)
    UNION ALL
    SELECT CASE WHEN ok THEN mid ELSE lo END, CASE WHEN ok THEN hi ELSE mid - 1 END
    FROM (SELECT lo, hi, (lo + hi + 1) / 2 AS mid,
                 coalesce((SELECT e.tx_at COLLATE "C" <= %(t)s FROM events e
                           WHERE e.seq = (lo + hi + 1) / 2), false) AS ok
          FROM b WHERE lo < hi) step
)
SELECT lo FROM b WHERE lo >= hi"""
SPACES_PAGE = """
WITH RECURSIVE s(space, n) AS (
    SELECT (SELECT min(space) FROM facts WHERE space > %(after)s), 1
    UNION ALL
    SELECT (SELECT min(space) FROM facts WHERE space > s.space), s.n + 1 FROM s
    WHERE s.space IS NOT NULL AND s.n < %(limit)s
)
SELECT space FROM s WHERE space IS NOT NULL ORDER BY n"""


def _state(alias: str, bound: str) -> str:
    """Join the state row of fact f as of event `bound` (the newest from_seq at or before it;
    none: NULLs), as SQLite's `from_seq = (SELECT max(...))` join does; a LATERAL subquery,
    so the planner walks the facts in order and stops at the page's end instead of
    hash-joining every state row."""
    return (f"LEFT JOIN LATERAL (SELECT * FROM fact_states x WHERE x.fact_seq = f.assert_seq "
            f"AND x.from_seq <= {bound} ORDER BY x.from_seq DESC LIMIT 1) {alias} ON true")


def _believed(alias: str, sfx: str) -> str:
    return (f"({alias}.live = 1 AND {alias}.prov_rank >= %(inc)s AND f.valid_from <= %(v)s AND "
            f"({alias}.vto_{sfx} IS NULL OR {alias}.vto_{sfx} > %(v)s))")


@cache
def beliefs_sql(subject: bool, predicate: bool, space: bool, pending: bool, diff: bool) -> str:
    """Facts believed at (valid time v, event seq), or in one of the statuses s0..s3 then;
    with `diff`, also those believed at event `head` (now) and not then. Values are bound."""
    sfx = "all" if pending else "trusted"
    then = (f"({_believed('t', sfx)} OR "
            f"t.status_{sfx} IN (%(s0)s, %(s1)s, %(s2)s, %(s3)s))")
    shown = f"({then} OR {_believed('n', sfx)})" if diff else then
    where = ["f.assert_seq > %(after)s", "f.assert_seq <= %(bound)s", shown]
    if subject:
        where.append("f.subject = %(subject)s")
    if predicate:
        where.append("f.predicate = %(predicate)s")
    if space:
        where.append("f.space = %(space)s")
    believed_then = f"CASE WHEN {_believed('t', sfx)} THEN 1 ELSE 0 END"
    believed_now = f"CASE WHEN {_believed('n', sfx)} THEN 1 ELSE 0 END"
    return f"""
SELECT f.assert_seq, f.fact_id, f.subject, f.predicate, f.space, e.value, f.actor, f.valid_from,
       t.status_{sfx}, {believed_then}, t.prov_rank, t.vto_{sfx},
       n.status_{sfx}, {believed_now}, n.prov_rank, n.vto_{sfx}, f.held
FROM facts f
{_state('t', '%(seq)s')}
{_state('n', '%(head)s')}
JOIN events e ON e.seq = f.assert_seq
WHERE {' AND '.join(where)}
ORDER BY f.assert_seq
LIMIT %(limit)s"""


class BrowseStore:
    """Paged reads for the terminal app; every query is bounded by a LIMIT and a cursor."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def head_seq(self) -> int:
        row = self._conn.execute(HEAD_SEQ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def tx_at_of(self, seq: int) -> str | None:
        row = self._conn.execute(EVENT_TX_AT, (seq,)).fetchone()
        return None if row is None else str(row[0])

    def event_brief(self, seq: int) -> tuple[int, str, str, str, str | None] | None:
        row = self._conn.execute(EVENT_BRIEF, (seq,)).fetchone()
        return None if row is None else (int(row[0]), str(row[1]), str(row[2]), str(row[3]),
                                         None if row[4] is None else str(row[4]))

    def seq_at(self, tx_at: str) -> int:
        """The last event learned at or before `tx_at` (0 if none): a binary search over seq,
        since transaction time never decreases along the chain and has no index of its own."""
        row = self._conn.execute(SEQ_AT, {"t": tx_at}).fetchone()
        return int(row[0]) if row else 0

    def beliefs(self, *, valid_at: str, seq: int, head: int, min_rank: int, pending: bool,
                statuses: tuple[str, ...], diff: bool, subject: str | None = None,
                predicate: str | None = None, space: str | None = None, after_seq: int = 0,
                limit: int = 50) -> list[BeliefRow]:
        sql = beliefs_sql(subject is not None, predicate is not None, space is not None,
                          pending, diff)
        padded = (tuple(statuses) + (None,) * 4)[:4]
        params = {"v": valid_at, "seq": seq, "head": head, "inc": min_rank,
                  "after": after_seq, "bound": head if diff else seq, "limit": no_limit(limit),
                  "subject": stored(self._conn, subject), "predicate": predicate,
                  "space": space,
                  "s0": padded[0], "s1": padded[1], "s2": padded[2], "s3": padded[3]}
        return named_rows(self._conn, self._conn.execute(sql, params).fetchall(), 2, BeliefRow)

    def with_status_page(self, status: str, after_seq: int, limit: int) -> list[FactRow]:
        return fact_rows(self._conn, self._conn.execute(
            WITH_STATUS_PAGE, (status, after_seq, no_limit(limit))).fetchall())

    def events_newest(self, before_seq: int, limit: int) -> list[tuple[object, ...]]:
        """(seq, kind, tx_at, actor, fact_id, subject, predicate, body, value, fact status now),
        newest first."""
        return named_rows(self._conn, self._conn.execute(
            EVENTS_NEWEST, (before_seq, no_limit(limit))).fetchall(), 5)

    def held_page(self, after_seq: int, limit: int) -> list[FactRow]:
        return fact_rows(self._conn, self._conn.execute(
            HELD_PAGE, (after_seq, no_limit(limit))).fetchall())

    def last_event_of_kind(self, fact_id: str, kind: str) -> tuple[int, str, str, str] | None:
        row = self._conn.execute(LAST_EVENT_OF_KIND, (fact_id, kind)).fetchone()
        return None if row is None else (int(row[0]), str(row[1]), str(row[2]), str(row[3]))

    def spaces_page(self, after: str, limit: int) -> list[str]:
        return [str(r[0]) for r in self._conn.execute(SPACES_PAGE, {"after": after,
                                                                    "limit": limit})]

    def policy_history(self) -> list[tuple[int, str, str, str | None, str | None]]:
        return [(int(s), str(t), str(h), src, path) for s, t, h, src, path in
                self._conn.execute(POLICY_HISTORY)]
