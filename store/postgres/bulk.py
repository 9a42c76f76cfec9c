"""What the PostgreSQL statement groups share for bulk work and paging: COPY, server-side
cursors, array batches, and SQLite's LIMIT semantics."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import count
from typing import Any

import psycopg
from psycopg import pq

from store.errors import StoreError, StoreIntegrityError
from store.postgres.failures import flush_queued

# Rows a bulk statement binds at once (arrays) and a server-side cursor fetches at once.
BATCH = 5000


def no_limit(limit: int) -> int | None:
    """SQLite reads a negative LIMIT as none; PostgreSQL refuses it and reads NULL as none."""
    return None if limit < 0 else limit


_CURSORS = count(1)


def store_error(exc: psycopg.Error) -> StoreError:
    """The store's error for a failure of a COPY or a server-side cursor (which the
    connection's LedgerCursor does not see): an integrity refusal is a StoreIntegrityError,
    anything else a StoreError naming the server's message."""
    message = (exc.diag.message_primary or str(exc)).strip()
    if isinstance(exc, psycopg.IntegrityError):
        return StoreIntegrityError(message)
    return StoreError(f"the server refused a statement: {message}", "postgres_error")


def lazy_rows(conn: psycopg.Connection[Any], sql: str) -> Iterator[tuple[Any, ...]]:
    """The rows of `sql` fetched a batch at a time through a server-side cursor of its own
    (never all held on the client), opened on the first row asked for. Outside a transaction
    the cursor is WITH HOLD (it outlives the statement's implicit commit); inside one it lives
    as long as the transaction."""
    hold = conn.info.transaction_status == pq.TransactionStatus.IDLE
    try:
        flush_queued(conn)  # a server-side cursor goes around the queue: send it first
        with conn.cursor(name=f"custody_rows_{next(_CURSORS)}", withhold=hold) as cur:
            cur.itersize = BATCH
            cur.execute(sql)
            yield from cur
    except psycopg.Error as exc:
        raise store_error(exc) from exc


def copy_rows(conn: psycopg.Connection[Any], sql: str, rows: Iterable[tuple[Any, ...]]) -> None:
    """Rows into a table by one COPY (the bulk load of a rebuild)."""
    try:
        with conn.cursor() as cur, cur.copy(sql) as copy:
            for row in rows:
                copy.write_row(row)
    except psycopg.Error as exc:
        raise store_error(exc) from exc
