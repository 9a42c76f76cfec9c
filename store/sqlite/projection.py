"""SQL over the projection: facts now, their transaction-time states, sources, as-of queries."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from typing import Any

import apsw

from store.errors import StoreIntegrityError
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

_FCOLS = ", ".join(FACT_COLUMNS)
_SCOLS = ", ".join(STATE_COLUMNS)
FACT_BY_ID = f"SELECT {_FCOLS} FROM facts WHERE fact_id = ?"
FACT_BY_SEQ = f"SELECT {_FCOLS} FROM facts WHERE assert_seq = ?"
INSERT_FACT = f"INSERT INTO facts({_FCOLS}) VALUES ({', '.join('?' * len(FACT_COLUMNS))})"
UPDATE_FACT = (
    "UPDATE facts SET "
    + ", ".join(f"{c} = ?" for c in FACT_COLUMNS if c != "assert_seq")
    + " WHERE assert_seq = ?"
)
INSERT_STATE = f"INSERT INTO fact_states({_SCOLS}) VALUES ({', '.join('?' * len(STATE_COLUMNS))})"
LATEST_STATE = (
    f"SELECT {_SCOLS} FROM fact_states WHERE fact_seq = ? ORDER BY from_seq DESC LIMIT 1"
)
LATEST_STATES = (
    f"SELECT {_SCOLS} FROM fact_states s WHERE s.fact_seq IN (SELECT value FROM json_each(?)) "
    "AND s.from_seq = (SELECT max(from_seq) FROM fact_states WHERE fact_seq = s.fact_seq)"
)
INSERT_SOURCE = "INSERT OR IGNORE INTO fact_sources(fact_id, source_id) VALUES (?, ?)"
SOURCES_OF = "SELECT source_id FROM fact_sources WHERE fact_id = ? ORDER BY source_id"
DERIVED_FROM = "SELECT fact_id FROM fact_sources WHERE source_id = ? ORDER BY fact_id"
REPLACEMENTS = f"SELECT {_FCOLS} FROM facts WHERE supersedes = ? ORDER BY assert_seq"
SUPERSEDED_BY = f"SELECT {_FCOLS} FROM facts WHERE superseded_by = ? ORDER BY assert_seq"
ALL_FACTS = f"SELECT {_FCOLS} FROM facts ORDER BY assert_seq"
ALL_STATES = f"SELECT {_SCOLS} FROM fact_states ORDER BY fact_seq, from_seq"
ALL_SOURCES = "SELECT fact_id, source_id FROM fact_sources ORDER BY fact_id, source_id"
CLEAR = "DELETE FROM fact_sources; DELETE FROM fact_states; DELETE FROM facts;"
FACTS_BY_IDS = (f"SELECT {_FCOLS} FROM facts WHERE fact_id IN (SELECT value FROM json_each(?)) "
                "ORDER BY assert_seq")
ENDS_BY_IDS = ("SELECT fact_id, assert_seq, ended FROM facts "
               "WHERE fact_id IN (SELECT value FROM json_each(?))")
DERIVED_FROM_MANY = ("SELECT fact_id, source_id FROM fact_sources "
                     "WHERE source_id IN (SELECT value FROM json_each(?)) ORDER BY fact_id")
COUNT_BY_STATUS = "SELECT status, count(*) FROM facts GROUP BY status"
WITH_STATUS = f"SELECT {_FCOLS} FROM facts WHERE status = ? ORDER BY assert_seq"
SEQS_WITH_STATUS = "SELECT assert_seq FROM facts WHERE status = ? ORDER BY assert_seq"
ACTIVE_OF_KEY = ("SELECT fact_id FROM facts WHERE subject = ? AND predicate = ? "
                 "AND status = 'active' ORDER BY assert_seq")
# Facts of one subject and predicate written in a session and not ended: the candidates that
# can corroborate one another.
IN_SESSIONS = (f"SELECT {_FCOLS} FROM facts WHERE subject = ? AND predicate = ? "
               "AND session IS NOT NULL AND status IN ('quarantined', 'active') ORDER BY assert_seq")
OF_SUBJECT_PREDICATE = (f"SELECT {_FCOLS} FROM facts WHERE subject = ? AND predicate = ? "
                        "ORDER BY assert_seq")
# Whether any fact (in any status) has this subject, predicate or space.
HOLDS = {field: f"SELECT 1 FROM facts WHERE {field} = ? LIMIT 1"
         for field in ("subject", "predicate", "space")}


@cache
def _as_of_sql(subject: bool, predicate: bool, space: bool, include_pending: bool) -> str:
    """The as-of query for one combination of filters; every value is bound, never spliced."""
    sfx = "all" if include_pending else "trusted"
    where = ["s.live = 1", "s.prov_rank >= :inc", "f.valid_from <= :v",
             f"(s.vto_{sfx} IS NULL OR s.vto_{sfx} > :v)", "f.assert_seq > :after"]
    if subject:
        where.append("f.subject = :subject")
    if predicate:
        where.append("f.predicate = :predicate")
    if space:
        where.append("f.space = :space")
    return f"""
SELECT f.fact_id, f.subject, f.predicate, f.space, e.value, s.status_{sfx}, s.prov_rank,
       f.valid_from, s.vto_{sfx}, f.actor, f.assert_seq
FROM facts f
JOIN fact_states s ON s.fact_seq = f.assert_seq AND s.from_seq = (
    SELECT max(s2.from_seq) FROM fact_states s2
    WHERE s2.fact_seq = f.assert_seq AND s2.tx_from <= :t)
JOIN events e ON e.seq = f.assert_seq
WHERE {' AND '.join(where)}
ORDER BY f.assert_seq
LIMIT :limit"""


class FactStore:
    """Reads and writes the facts projection and its state history."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn

    def get(self, fact_id: str) -> FactRow | None:
        row = self._conn.execute(FACT_BY_ID, (fact_id,)).fetchone()
        return None if row is None else FactRow(*row)

    def get_by_seq(self, assert_seq: int) -> FactRow | None:
        row = self._conn.execute(FACT_BY_SEQ, (assert_seq,)).fetchone()
        return None if row is None else FactRow(*row)

    def insert(self, fact: FactRow) -> None:
        try:
            self._conn.execute(INSERT_FACT, fact_values(fact))
        except apsw.ConstraintError as exc:
            raise StoreIntegrityError(f"fact {fact.fact_id} refused: {exc}") from exc

    def update(self, fact: FactRow) -> None:
        self._conn.execute(UPDATE_FACT, fact_update_values(fact))

    def latest_state(self, fact_seq: int) -> StateRow | None:
        row = self._conn.execute(LATEST_STATE, (fact_seq,)).fetchone()
        return None if row is None else StateRow(*row)

    def push_state(self, state: StateRow) -> None:
        self._conn.execute(INSERT_STATE, state_values(state))

    def latest_states(self, fact_seqs: list[int], chunk: int = 5000) -> dict[int, StateRow]:
        """`latest_state` of several facts, a query per `chunk` of them (none: left out)."""
        out: dict[int, StateRow] = {}
        for at in range(0, len(fact_seqs), chunk):
            for r in self._conn.execute(LATEST_STATES, (json.dumps(fact_seqs[at:at + chunk]),)):
                state = StateRow(*r)
                out[state.fact_seq] = state
        return out

    def update_many(self, facts: list[FactRow]) -> None:
        """`update` for each fact, in order."""
        self._conn.executemany(UPDATE_FACT, [fact_update_values(f) for f in facts])

    def push_states(self, states: list[StateRow]) -> None:
        """`push_state` for each state, in order."""
        self._conn.executemany(INSERT_STATE, [state_values(s) for s in states])

    def add_sources(self, fact_id: str, sources: list[str]) -> None:
        self._conn.executemany(INSERT_SOURCE, [(fact_id, s) for s in sources])

    def sources_of(self, fact_id: str) -> list[str]:
        return [str(r[0]) for r in self._conn.execute(SOURCES_OF, (fact_id,))]

    def derived_from(self, fact_id: str) -> list[str]:
        return [str(r[0]) for r in self._conn.execute(DERIVED_FROM, (fact_id,))]

    def get_many(self, fact_ids: list[str]) -> list[FactRow]:
        """Several facts in one query, in assert order (unknown ids are left out)."""
        if not fact_ids:
            return []
        return [FactRow(*r) for r in self._conn.execute(FACTS_BY_IDS, (json.dumps(fact_ids),))]

    def ends_of(self, fact_ids: list[str]) -> dict[str, tuple[int, str | None]]:
        """fact_id -> (assert seq, how it ended or None) for those of `fact_ids` that exist."""
        return {str(f): (int(s), None if e is None else str(e))
                for f, s, e in self._conn.execute(ENDS_BY_IDS, (json.dumps(fact_ids),))}

    def derived_from_many(self, fact_ids: list[str]) -> list[tuple[str, str]]:
        """(derived fact, its source) for every fact naming one of `fact_ids` in its sources."""
        if not fact_ids:
            return []
        return [(str(a), str(b)) for a, b in
                self._conn.execute(DERIVED_FROM_MANY, (json.dumps(fact_ids),))]

    def replacements(self, fact_id: str) -> list[FactRow]:
        return [FactRow(*r) for r in self._conn.execute(REPLACEMENTS, (fact_id,))]

    def superseded_by(self, fact_id: str) -> list[FactRow]:
        """Facts whose live replacement is `fact_id`."""
        return [FactRow(*r) for r in self._conn.execute(SUPERSEDED_BY, (fact_id,))]

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
                  "limit": limit, "subject": subject, "predicate": predicate, "space": space}
        return [AsOfRow(*r) for r in self._conn.execute(sql, params)]

    def active_of(self, subject: str, predicate: str) -> list[str]:
        """Ids of the active facts of one subject and predicate, oldest first."""
        return [r[0] for r in self._conn.execute(ACTIVE_OF_KEY, (subject, predicate))]

    def in_sessions(self, subject: str, predicate: str) -> list[FactRow]:
        """Quarantined or active facts of a subject and predicate that were written in a session."""
        return [FactRow(*r) for r in self._conn.execute(IN_SESSIONS, (subject, predicate))]

    def of_subject_predicate(self, subject: str, predicate: str) -> list[FactRow]:
        """Every fact of a subject and predicate, in any status, oldest first."""
        return [FactRow(*r) for r in self._conn.execute(OF_SUBJECT_PREDICATE, (subject, predicate))]

    def holds(self, field: str, value: str) -> bool:
        """Whether a fact (in any status) has `value` as its subject, predicate or space."""
        return self._conn.execute(HOLDS[field], (value,)).fetchone() is not None

    def with_status(self, status: str) -> list[FactRow]:
        return [FactRow(*r) for r in self._conn.execute(WITH_STATUS, (status,))]

    def seqs_with_status(self, status: str) -> list[int]:
        """The assert seqs of the facts in `status` (what verify's index check compares: no
        row objects built for them)."""
        return [r[0] for r in self._conn.execute(SEQS_WITH_STATUS, (status,))]

    def counts_by_status(self) -> dict[str, int]:
        return {str(s): int(n) for s, n in self._conn.execute(COUNT_BY_STATUS)}

    def dump(self) -> tuple[list[FactRow], list[StateRow], list[tuple[str, str]]]:
        """The whole projection, for comparison with a rebuild."""
        facts = [FactRow(*r) for r in self._conn.execute(ALL_FACTS)]
        states = [StateRow(*r) for r in self._conn.execute(ALL_STATES)]
        sources = [(str(a), str(b)) for a, b in self._conn.execute(ALL_SOURCES)]
        return facts, states, sources

    def dump_rows(self) -> tuple[Iterator[tuple[Any, ...]], ...]:
        """The same rows in the same order as `dump`, as plain tuples read lazily (verify
        compares them one by one and never holds the stored projection whole)."""
        return tuple(self._lazy(sql) for sql in (ALL_FACTS, ALL_STATES, ALL_SOURCES))

    def _lazy(self, sql: str) -> Iterator[tuple[Any, ...]]:
        yield from self._conn.execute(sql)

    def replace_all(
        self, facts: list[FactRow], states: list[StateRow], sources: list[tuple[str, str]]
    ) -> None:
        """Swap the projection for a rebuilt one (inside the caller's write transaction)."""
        self._conn.execute(CLEAR)
        self._conn.executemany(INSERT_FACT, [fact_values(f) for f in facts])
        self._conn.executemany(INSERT_STATE, [state_values(s) for s in states])
        self._conn.executemany(INSERT_SOURCE, sources)
