"""The tables the erasure and recall statement groups read but do not own (events, facts,
ledger_meta), declared here as the SQLite schema has them, for store-level tests on a raw
psycopg connection until the PostgreSQL schema (store/postgres/schema.py) builds them all.
Also the same rows written to a SQLite ledger, so both backends can be asked the same."""

from __future__ import annotations

from typing import Any

from store.rows import FACT_COLUMNS, FactRow

OTHER_TABLES: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS ledger_meta(key text COLLATE "C" PRIMARY KEY,
    value text NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS events(
    seq bigint PRIMARY KEY, kind text NOT NULL, tx_at text COLLATE "C" NOT NULL,
    actor text NOT NULL, policy_hash text NOT NULL, fact_id text, subject text,
    body text NOT NULL, value bytea, salt text, prev_hash text NOT NULL, hash text NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS facts(
    assert_seq bigint PRIMARY KEY, fact_id text NOT NULL UNIQUE,
    subject text COLLATE "C" NOT NULL, predicate text NOT NULL, space text COLLATE "C" NOT NULL,
    valid_from text NOT NULL, valid_to text, provenance text NOT NULL, confirmed_seq bigint,
    ended text, ended_seq bigint, supersedes text, superseded_by text,
    held bigint NOT NULL DEFAULT 0, actor text NOT NULL, session text, status text NOT NULL,
    marks text)""",
    "CREATE INDEX IF NOT EXISTS facts_by_space ON facts(space)",
)

EVENT_INSERT = ("INSERT INTO events(seq, kind, tx_at, actor, policy_hash, fact_id, subject, "
                "body, value, salt, prev_hash, hash) VALUES ({})")
FACT_INSERT = f"INSERT INTO facts({', '.join(FACT_COLUMNS)}) VALUES ({{}})"


def pg_prepare(conn: Any, *ddl: tuple[str, ...]) -> None:
    """The scaffold tables and each module's DDL, committed."""
    with conn.transaction():
        for statement in OTHER_TABLES + tuple(s for group in ddl for s in group):
            conn.execute(statement)


def put_rows(pg: Any, sq: Any, events: list[tuple[object, ...]], facts: list[FactRow]) -> None:
    """The same events and facts into a psycopg connection and an apsw connection (raw rows:
    the stores under test only read them)."""
    values = [tuple(getattr(f, c) for c in FACT_COLUMNS) for f in facts]
    with pg.cursor() as cur:
        if events:
            cur.executemany(EVENT_INSERT.format(", ".join(["%s"] * 12)), events)
        if values:
            cur.executemany(FACT_INSERT.format(", ".join(["%s"] * len(FACT_COLUMNS))), values)
    if events:
        sq.executemany(EVENT_INSERT.format(", ".join(["?"] * 12)), events)
    if values:
        sq.executemany(FACT_INSERT.format(", ".join(["?"] * len(FACT_COLUMNS))), values)
