"""SQL over the projection (PostgreSQL): facts now, their transaction-time states, sources,
as-of queries. Mirrors store.sqlite.projection call for call and row for row."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

import psycopg

from store.errors import StoreIntegrityError
from store.postgres.bulk import BATCH, copy_rows, lazy_rows, no_limit
from store.postgres.failures import later, queues
from store.postgres.subjects import named_rows, named_stream, stored, stored_values
from store.rows import (
    FACT_COLUMNS,
    STATE_COLUMNS,
    AsOfRow,
    FactRow,
    StateRow,
    fact_update_values,
    fact_values,
    state_values,
)

# Written here: facts, fact_states, fact_sources (browse.py and sessions.py read facts and
# fact_states). Every text column compares bytewise (COLLATE "C"), as SQLite's BINARY does.
DDL: tuple[str, ...] = (
    """CREATE TABLE facts(
    assert_seq    bigint PRIMARY KEY,
    fact_id       text COLLATE "C" NOT NULL UNIQUE,
    subject       text COLLATE "C" NOT NULL, -- its ref, or erased:<ref16> (store.postgres.subjects)
    predicate     text COLLATE "C" NOT NULL,
    space         text COLLATE "C" NOT NULL,
    valid_from    text COLLATE "C" NOT NULL,
    valid_to      text COLLATE "C",
    provenance    text COLLATE "C" NOT NULL,
    confirmed_seq bigint,
    ended         text COLLATE "C",
    ended_seq     bigint,
    supersedes    text COLLATE "C",
    superseded_by text COLLATE "C",
    held          bigint NOT NULL DEFAULT 0,
    actor         text COLLATE "C" NOT NULL,
    session       text COLLATE "C",
    status        text COLLATE "C" NOT NULL,
    marks         text COLLATE "C"
)""",
    "CREATE INDEX facts_by_subject ON facts(subject, predicate)",
    "CREATE INDEX facts_by_space ON facts(space)",
    "CREATE INDEX facts_by_status ON facts(status, assert_seq)",
    "CREATE INDEX facts_by_supersedes ON facts(supersedes) WHERE supersedes IS NOT NULL",
    "CREATE INDEX facts_by_superseder ON facts(superseded_by) WHERE superseded_by IS NOT NULL",
    # browse.held_page walks the held facts in assert order.
    "CREATE INDEX facts_held ON facts(assert_seq) WHERE held = 1",
    """CREATE TABLE fact_states(
    fact_seq       bigint NOT NULL,
    from_seq       bigint NOT NULL,
    tx_from        text COLLATE "C" NOT NULL,
    live           bigint NOT NULL,
    prov_rank      bigint NOT NULL,
    status_all     text COLLATE "C" NOT NULL,
    status_trusted text COLLATE "C" NOT NULL,
    vto_all        text COLLATE "C",
    vto_trusted    text COLLATE "C",
    PRIMARY KEY(fact_seq, from_seq)
)""",
    """CREATE TABLE fact_sources(
    fact_id   text COLLATE "C" NOT NULL,
    source_id text COLLATE "C" NOT NULL,
    PRIMARY KEY(fact_id, source_id)
)""",
    "CREATE INDEX fact_sources_by_source ON fact_sources(source_id, fact_id)",
)

_FCOLS = ", ".join(FACT_COLUMNS)
# FactRow.subject's column, in a row and in an update's values; AsOfRow's.
SUBJECT = FACT_COLUMNS.index("subject")
_UPDATE_SUBJECT = SUBJECT - 1
_AS_OF_SUBJECT = 1
_SCOLS = ", ".join(STATE_COLUMNS)
FACT_BY_ID = f"SELECT {_FCOLS} FROM facts WHERE fact_id = %s"
FACT_BY_SEQ = f"SELECT {_FCOLS} FROM facts WHERE assert_seq = %s"
# A duplicate fact_id or assert_seq inserts nothing (and the caller gets StoreIntegrityError)
# instead of an error: a failed statement would abort the whole PostgreSQL transaction, where
# SQLite refuses the one statement and the transaction goes on.
INSERT_FACT = (f"INSERT INTO facts({_FCOLS}) VALUES ({', '.join(['%s'] * len(FACT_COLUMNS))}) "
               "ON CONFLICT DO NOTHING RETURNING assert_seq")
# Inside a ledger write transaction the row goes with the next statement (`later`): a taken
# fact_id or assert_seq is then the unique index's refusal of that statement, and the
# savepoint or transaction is rolled back whole (nothing of it is stored).
INSERT_FACT_QUEUED = (f"INSERT INTO facts({_FCOLS}) "
                      f"VALUES ({', '.join(['%s'] * len(FACT_COLUMNS))})")
UPDATE_FACT = (
    "UPDATE facts SET "
    + ", ".join(f"{c} = %s" for c in FACT_COLUMNS if c != "assert_seq")
    + " WHERE assert_seq = %s"
)
INSERT_STATE = (f"INSERT INTO fact_states({_SCOLS}) "
                f"VALUES ({', '.join(['%s'] * len(STATE_COLUMNS))})")
LATEST_STATE = (
    f"SELECT {_SCOLS} FROM fact_states WHERE fact_seq = %s ORDER BY from_seq DESC LIMIT 1"
)
# In fact_seq order: the order SQLite hands them (its IN list is a sorted set).
LATEST_STATES = (
    f"SELECT DISTINCT ON (fact_seq) {_SCOLS} FROM fact_states "
    "WHERE fact_seq = ANY(%s::bigint[]) ORDER BY fact_seq, from_seq DESC"
)
INSERT_SOURCES = ("INSERT INTO fact_sources(fact_id, source_id) "
                  "SELECT * FROM unnest(%s::text[], %s::text[]) ON CONFLICT DO NOTHING")
SOURCES_OF = "SELECT source_id FROM fact_sources WHERE fact_id = %s ORDER BY source_id"
DERIVED_FROM = "SELECT fact_id FROM fact_sources WHERE source_id = %s ORDER BY fact_id"
REPLACEMENTS = f"SELECT {_FCOLS} FROM facts WHERE supersedes = %s ORDER BY assert_seq"
SUPERSEDED_BY = f"SELECT {_FCOLS} FROM facts WHERE superseded_by = %s ORDER BY assert_seq"
ALL_FACTS = f"SELECT {_FCOLS} FROM facts ORDER BY assert_seq"
ALL_STATES = f"SELECT {_SCOLS} FROM fact_states ORDER BY fact_seq, from_seq"
ALL_SOURCES = "SELECT fact_id, source_id FROM fact_sources ORDER BY fact_id, source_id"
CLEAR = "DELETE FROM fact_sources; DELETE FROM fact_states; DELETE FROM facts"
COPY_FACTS = f"COPY facts({_FCOLS}) FROM STDIN"
COPY_STATES = f"COPY fact_states({_SCOLS}) FROM STDIN"
FACTS_BY_IDS = f"SELECT {_FCOLS} FROM facts WHERE fact_id = ANY(%s::text[]) ORDER BY assert_seq"
# In fact_id order, as SQLite hands them (the dict's order).
ENDS_BY_IDS = ("SELECT fact_id, assert_seq, ended FROM facts WHERE fact_id = ANY(%s::text[]) "
               "ORDER BY fact_id")
# SQLite walks its sorted IN list (source order) and sorts that by fact_id keeping the order
# of ties: (fact_id, source_id) is the order it gives, here spelled out.
DERIVED_FROM_MANY = ("SELECT fact_id, source_id FROM fact_sources "
                     "WHERE source_id = ANY(%s::text[]) ORDER BY fact_id, source_id")
COUNT_BY_STATUS = "SELECT status, count(*) FROM facts GROUP BY status ORDER BY status"
WITH_STATUS = f"SELECT {_FCOLS} FROM facts WHERE status = %s ORDER BY assert_seq"
SEQS_WITH_STATUS = "SELECT assert_seq FROM facts WHERE status = %s ORDER BY assert_seq"
ACTIVE_OF_KEY = ("SELECT fact_id FROM facts WHERE subject = %s AND predicate = %s "
                 "AND status = 'active' ORDER BY assert_seq")
# Facts of one subject and predicate written in a session and not ended: the candidates that
# can corroborate one another.
IN_SESSIONS = (f"SELECT {_FCOLS} FROM facts WHERE subject = %s AND predicate = %s "
               "AND session IS NOT NULL AND status IN ('quarantined', 'active') ORDER BY assert_seq")
OF_SUBJECT_PREDICATE = (f"SELECT {_FCOLS} FROM facts WHERE subject = %s AND predicate = %s "
                        "ORDER BY assert_seq")
# Whether any fact (in any status) has this subject (stored form), predicate or space.
HOLDS = {field: f"SELECT 1 FROM facts WHERE {field} = %s LIMIT 1"
         for field in ("subject", "predicate", "space")}
@cache
def _as_of_sql(subject: bool, predicate: bool, space: bool, include_pending: bool) -> str:
    """The as-of query for one combination of filters; every value is bound, never spliced.
    Each fact's state as of T is its newest state row learned by T, as SQLite's `from_seq =
    (SELECT max(from_seq) ...)` join gives it, but spelled as a LATERAL subquery: PostgreSQL
    cannot estimate that join, hash-joins every state row and sorts, where this walks the
    facts in assert order and stops at the page's end."""
    sfx = "all" if include_pending else "trusted"
    where = ["s.live = 1", "s.prov_rank >= %(inc)s", "f.valid_from <= %(v)s",
             f"(s.vto_{sfx} IS NULL OR s.vto_{sfx} > %(v)s)", "f.assert_seq > %(after)s"]
    if subject:
        where.append("f.subject = %(subject)s")
    if predicate:
        where.append("f.predicate = %(predicate)s")
    if space:
        where.append("f.space = %(space)s")
    return f"""
SELECT f.fact_id, f.subject, f.predicate, f.space, e.value, s.status_{sfx}, s.prov_rank,
       f.valid_from, s.vto_{sfx}, f.actor, f.assert_seq
FROM facts f
CROSS JOIN LATERAL (
    SELECT * FROM fact_states s2 WHERE s2.fact_seq = f.assert_seq AND s2.tx_from <= %(t)s
    ORDER BY s2.from_seq DESC LIMIT 1) s
JOIN events e ON e.seq = f.assert_seq
WHERE {' AND '.join(where)}
ORDER BY f.assert_seq
LIMIT %(limit)s"""


def fact_rows(conn: Any, rows: Any) -> list[FactRow]:
    """FactRows of `rows` (facts columns), each subject by its id (store.postgres.subjects)."""
    return named_rows(conn, list(rows), SUBJECT, FactRow)


class FactStore:
    """Reads and writes the facts projection and its state history."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def _facts(self, sql: str, params: Any = None) -> list[FactRow]:
        return fact_rows(self._conn, self._conn.execute(sql, params).fetchall())

    def _values(self, fact: FactRow) -> tuple[Any, ...]:
        return stored_values(self._conn, fact_values(fact), SUBJECT)

    def _update_values(self, fact: FactRow) -> tuple[Any, ...]:
        return stored_values(self._conn, fact_update_values(fact), _UPDATE_SUBJECT)

    def get(self, fact_id: str) -> FactRow | None:
        found = self._facts(FACT_BY_ID, (fact_id,))
        return found[0] if found else None

    def get_by_seq(self, assert_seq: int) -> FactRow | None:
        found = self._facts(FACT_BY_SEQ, (assert_seq,))
        return found[0] if found else None

    def insert(self, fact: FactRow) -> None:
        if queues(self._conn):
            # The row read back by its id is the row written (no trigger or default changes
            # a column): the transaction's next read of it needs no round trip.
            values = self._values(fact)
            later(self._conn, INSERT_FACT_QUEUED, values,
                  known={(FACT_BY_ID, (fact.fact_id,)): [tuple(values)]})
            return
        try:
            row = self._conn.execute(INSERT_FACT, self._values(fact)).fetchone()
        except psycopg.IntegrityError as exc:
            raise StoreIntegrityError(f"fact {fact.fact_id} refused: {exc}") from exc
        if row is None:
            raise StoreIntegrityError(
                f"fact {fact.fact_id} refused: its fact_id or assert_seq is taken")

    def update(self, fact: FactRow) -> None:
        self._conn.execute(UPDATE_FACT, self._update_values(fact))

    def latest_state(self, fact_seq: int) -> StateRow | None:
        row = self._conn.execute(LATEST_STATE, (fact_seq,)).fetchone()
        return None if row is None else StateRow(*row)

    def push_state(self, state: StateRow) -> None:
        later(self._conn, INSERT_STATE, state_values(state))

    def latest_states(self, fact_seqs: list[int], chunk: int = 5000) -> dict[int, StateRow]:
        """`latest_state` of several facts, a query per `chunk` of them (none: left out)."""
        out: dict[int, StateRow] = {}
        for at in range(0, len(fact_seqs), chunk):
            for r in self._conn.execute(LATEST_STATES, (fact_seqs[at:at + chunk],)):
                state = StateRow(*r)
                out[state.fact_seq] = state
        return out

    def update_many(self, facts: list[FactRow]) -> None:
        """`update` for each fact, in order (one pipelined batch)."""
        with self._conn.cursor() as cur:
            cur.executemany(UPDATE_FACT, [self._update_values(f) for f in facts])

    def push_states(self, states: list[StateRow]) -> None:
        """`push_state` for each state, in order (one pipelined batch)."""
        with self._conn.cursor() as cur:
            cur.executemany(INSERT_STATE, [state_values(s) for s in states])

    def add_sources(self, fact_id: str, sources: list[str]) -> None:
        if sources:
            self._conn.execute(INSERT_SOURCES, ([fact_id] * len(sources), sources))

    def sources_of(self, fact_id: str) -> list[str]:
        return [str(r[0]) for r in self._conn.execute(SOURCES_OF, (fact_id,))]

    def derived_from(self, fact_id: str) -> list[str]:
        return [str(r[0]) for r in self._conn.execute(DERIVED_FROM, (fact_id,))]

    def get_many(self, fact_ids: list[str]) -> list[FactRow]:
        """Several facts in one query, in assert order (unknown ids are left out)."""
        if not fact_ids:
            return []
        return self._facts(FACTS_BY_IDS, (fact_ids,))

    def ends_of(self, fact_ids: list[str]) -> dict[str, tuple[int, str | None]]:
        """fact_id -> (assert seq, how it ended or None) for those of `fact_ids` that exist."""
        return {str(f): (int(s), None if e is None else str(e))
                for f, s, e in self._conn.execute(ENDS_BY_IDS, (fact_ids,))}

    def derived_from_many(self, fact_ids: list[str]) -> list[tuple[str, str]]:
        """(derived fact, its source) for every fact naming one of `fact_ids` in its sources."""
        if not fact_ids:
            return []
        return [(str(a), str(b)) for a, b in self._conn.execute(DERIVED_FROM_MANY, (fact_ids,))]

    def replacements(self, fact_id: str) -> list[FactRow]:
        return self._facts(REPLACEMENTS, (fact_id,))

    def superseded_by(self, fact_id: str) -> list[FactRow]:
        """Facts whose live replacement is `fact_id`."""
        return self._facts(SUPERSEDED_BY, (fact_id,))

    def as_of(
        self,
        *,
        valid_at: str,
        tx_at: str,
        min_rank: int,
        include_pending: bool,
        subject: str | None = None,
        predicate: str | None = None,
        space: str | None = None,
        after_seq: int = 0,
        limit: int = -1,
    ) -> list[AsOfRow]:
        sql = _as_of_sql(subject is not None, predicate is not None, space is not None,
                         include_pending)
        params = {"v": valid_at, "t": tx_at, "inc": min_rank, "after": after_seq,
                  "limit": no_limit(limit), "subject": stored(self._conn, subject),
                  "predicate": predicate, "space": space}
        return named_rows(self._conn, self._conn.execute(sql, params).fetchall(),
                          _AS_OF_SUBJECT, AsOfRow)

    def active_of(self, subject: str, predicate: str) -> list[str]:
        """Ids of the active facts of one subject and predicate, oldest first."""
        return [r[0] for r in self._conn.execute(ACTIVE_OF_KEY,
                                                 (stored(self._conn, subject), predicate))]

    def in_sessions(self, subject: str, predicate: str) -> list[FactRow]:
        """Quarantined or active facts of a subject and predicate that were written in a session."""
        return self._facts(IN_SESSIONS, (stored(self._conn, subject), predicate))

    def of_subject_predicate(self, subject: str, predicate: str) -> list[FactRow]:
        """Every fact of a subject and predicate, in any status, oldest first."""
        return self._facts(OF_SUBJECT_PREDICATE, (stored(self._conn, subject), predicate))

    def holds(self, field: str, value: str) -> bool:
        """Whether a fact (in any status) has `value` as its subject, predicate or space."""
        found = stored(self._conn, value) if field == "subject" else value
        return self._conn.execute(HOLDS[field], (found,)).fetchone() is not None

    def with_status(self, status: str) -> list[FactRow]:
        return self._facts(WITH_STATUS, (status,))

    def seqs_with_status(self, status: str) -> list[int]:
        """The assert seqs of the facts in `status`, no subject opened (verify's index check)."""
        return [int(r[0]) for r in self._conn.execute(SEQS_WITH_STATUS, (status,))]

    def counts_by_status(self) -> dict[str, int]:
        return {str(s): int(n) for s, n in self._conn.execute(COUNT_BY_STATUS)}

    def dump(self) -> tuple[list[FactRow], list[StateRow], list[tuple[str, str]]]:
        """The whole projection, for comparison with a rebuild."""
        facts = self._facts(ALL_FACTS)
        states = [StateRow(*r) for r in self._conn.execute(ALL_STATES)]
        sources = [(str(a), str(b)) for a, b in self._conn.execute(ALL_SOURCES)]
        return facts, states, sources

    def dump_rows(self) -> tuple[Iterator[tuple[Any, ...]], ...]:
        """The same rows in the same order as `dump`, as plain tuples read lazily (verify
        compares them one by one and never holds the stored projection whole): each through a
        server-side cursor of its own, opened on its first row."""
        facts = named_stream(self._conn, lazy_rows(self._conn, ALL_FACTS), SUBJECT)
        return (facts, *(lazy_rows(self._conn, sql) for sql in (ALL_STATES, ALL_SOURCES)))

    def replace_all(
        self, facts: list[FactRow], states: list[StateRow], sources: list[tuple[str, str]]
    ) -> None:
        """Swap the projection for a rebuilt one (inside the caller's write transaction): the
        facts and states by COPY, the sources (duplicates ignored, as SQLite's INSERT OR
        IGNORE does) by arrays of BATCH rows."""
        self._conn.execute(CLEAR)
        copy_rows(self._conn, COPY_FACTS, map(self._values, facts))
        copy_rows(self._conn, COPY_STATES, map(state_values, states))
        for at in range(0, len(sources), BATCH):
            part = sources[at:at + BATCH]
            self._conn.execute(INSERT_SOURCES, ([a for a, _ in part], [b for _, b in part]))
