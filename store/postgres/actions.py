"""SQL over the actions index (PostgreSQL): one row per recorded action, searched by tool,
actor, session, subject (peppered hash) and transaction time, newest first, one page at a
time. Mirrors store.sqlite.actions call for call and row for row."""

from __future__ import annotations

from functools import cache
from typing import Any

import psycopg

from store.postgres.bulk import copy_rows, no_limit

# Written here: actions (ActionStore.record); sessions.py reads it. Text compares bytewise
# (COLLATE "C"), as SQLite's BINARY does: `since`/`until` are string bounds on tx_at.
DDL: tuple[str, ...] = (
    """CREATE TABLE actions(
    seq         bigint PRIMARY KEY,
    tool        text COLLATE "C" NOT NULL,
    actor       text COLLATE "C" NOT NULL,
    session     text COLLATE "C" NOT NULL,
    subject_ref text COLLATE "C",
    tx_at       text COLLATE "C" NOT NULL
)""",
    "CREATE INDEX actions_by_tool ON actions(tool, seq)",
    "CREATE INDEX actions_by_actor ON actions(actor, seq)",
    "CREATE INDEX actions_by_session ON actions(session, seq)",
    "CREATE INDEX actions_by_subject ON actions(subject_ref, seq) WHERE subject_ref IS NOT NULL",
    "CREATE INDEX actions_by_time ON actions(tx_at, seq)",
)

ADD = ("INSERT INTO actions(seq, tool, actor, session, subject_ref, tx_at) "
       "VALUES (%s, %s, %s, %s, %s, %s)")
ALL = "SELECT seq, tool, actor, session, subject_ref, tx_at FROM actions ORDER BY seq"
CLEAR = "DELETE FROM actions"
COPY = "COPY actions(seq, tool, actor, session, subject_ref, tx_at) FROM STDIN"
# SQLite's one statement filters `?N IS NULL OR column = ?N` and names the index to walk;
# PostgreSQL cannot type a NULL-tested parameter and plans better without the ORs, so here
# each combination of given filters is its own statement (same rows: a filter of None is
# no filter, any other value, the empty string too, is one).
_FILTERS = (("tool", "tool = %s"), ("actor", "actor = %s"), ("session", "session = %s"),
            ("subject_ref", "subject_ref = %s"), ("since", "tx_at >= %s"),
            ("until", "tx_at < %s"))

ActionIndexRow = tuple[int, str, str, str, "str | None", str]


@cache
def search_sql(given: tuple[bool, ...], window: bool) -> str:
    """The search for one combination of filters (`given[i]`: filter i of _FILTERS is set).
    A `window` (a time bound and no name filter) reads just the window's rows by time, then
    sorts them by seq, as SQLite's "window" shape does: walking seq backwards instead, as the
    planner would, reads every newer action before an old window's first."""
    where = [cond for (_, cond), on in zip(_FILTERS, given, strict=True) if on]
    where.append("seq < %s")
    if window:
        return (f"WITH w AS MATERIALIZED (SELECT seq FROM actions WHERE {' AND '.join(where)}) "
                "SELECT seq FROM w ORDER BY seq DESC LIMIT %s")
    return f"SELECT seq FROM actions WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT %s"


class ActionStore:
    """The actions index beside the events, written in the event's own transaction."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def record(self, row: ActionIndexRow) -> None:
        self._conn.execute(ADD, row)

    def search(self, *, tool: str | None, actor: str | None, session: str | None,
               subject_ref: str | None, since: str | None, until: str | None,
               before_seq: int | None, limit: int) -> list[int]:
        """Seqs of matching actions, newest first, below `before_seq` (the page cursor)."""
        values = (tool, actor, session, subject_ref, since, until)
        window = bool(until) and not (tool or session or subject_ref or actor)
        sql = search_sql(tuple(v is not None for v in values), window)
        args: list[object] = [v for v in values if v is not None]
        args += [before_seq if before_seq is not None else 2**62, no_limit(limit)]
        return [int(r[0]) for r in self._conn.execute(sql, args)]

    def dump(self) -> list[tuple[object, ...]]:
        return [tuple(r) for r in self._conn.execute(ALL)]

    def replace_all(self, rows: list[tuple[object, ...]]) -> None:
        """Swap the index for a rebuilt one (inside the caller's write transaction), by COPY."""
        self._conn.execute(CLEAR)
        copy_rows(self._conn, COPY, rows)
