"""psycopg's errors as the store's own: every statement of the PostgreSQL backend runs through
`LedgerCursor`, so nothing above store/ ever sees a psycopg exception."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import errors as pg

from store.errors import LedgerDamaged, StoreBusy, StoreError, StoreFull, StoreIntegrityError

# Another writer held the ledger's lock (or a row lock) past lock_timeout, or the server broke
# a deadlock or a serialization conflict: the caller may try again.
_BUSY = (pg.LockNotAvailable, pg.DeadlockDetected, pg.SerializationFailure)
_FULL = (pg.DiskFull, pg.OutOfMemory, pg.ProgramLimitExceeded)
_DAMAGED = (pg.DataCorrupted, pg.IndexCorrupted)


def translated(exc: psycopg.Error) -> StoreError:
    """The store's error for a psycopg one, with a stable code."""
    message = (exc.diag.message_primary if exc.diag.message_primary else str(exc)).strip()
    if isinstance(exc, _BUSY):
        return StoreBusy(f"the ledger is locked by another writer ({message}); gave up after "
                         "the busy timeout")
    if isinstance(exc, _FULL):
        return StoreFull(f"the server could not store the write ({message}): it was rolled back "
                         "and nothing of it was stored")
    if isinstance(exc, psycopg.IntegrityError):
        return StoreIntegrityError(message)
    if isinstance(exc, _DAMAGED):
        return LedgerDamaged(f"the server reports damaged ledger data: {message}")
    if isinstance(exc, pg.ReadOnlySqlTransaction):
        return StoreError(f"the ledger was opened read-only: {message}", "read_only")
    if isinstance(exc, pg.InsufficientPrivilege):
        return StoreError(f"the server refused this role: {message}", "postgres_denied")
    if isinstance(exc, psycopg.OperationalError):
        return StoreError(f"the server connection failed: {message}", "postgres_unreachable")
    return StoreError(f"the server refused a statement: {message}", "postgres_error")


def forget_prepared(conn: Any) -> None:
    """After a pipelined group failed: forget which statements psycopg believes prepared. A
    statement due to be prepared (its 5th run) after the failing one in the group was never
    parsed by the server, yet psycopg records its name, and every later run of it would fail
    ("prepared statement ... does not exist"). psycopg's own rollback does this
    (`Transaction._rollback_gen`); the ledger rolls back by statement (savepoints), so it is
    done here: the next statement's maintenance deallocates every prepared statement and
    they are prepared again as they recur (the error path only)."""
    prepared = getattr(conn, "_prepared", None)
    if prepared is not None:
        prepared.clear()


def pipelined(conn: Any, steps: list[tuple[Any, Any]], last: Callable[[], Any] | None = None) -> None:
    """Run `steps` ((statement, params), in order) and then `last` in one pipelined round
    trip. The first failure is raised as psycopg raised it (its SQLSTATE: the caller
    translates it), after the pipeline was closed (psycopg logs a second, useless error when
    a pipeline block is left by an exception); psycopg's prepared names are then forgotten
    (`forget_prepared`)."""
    first: psycopg.Error | None = None
    try:
        with conn.pipeline():
            try:
                for statement, values in steps:
                    psycopg.Cursor(conn).execute(statement, values)
                if last is not None:
                    last()
            except psycopg.Error as exc:
                first = exc
    except psycopg.Error as exc:
        first = first or exc
    if first is not None:
        forget_prepared(conn)
        raise first


class LedgerConnection(psycopg.Connection[Any]):
    """A ledger's connection: its write transactions' read cache beside it
    (store.postgres.readcache; LedgerFile starts and stops it), and the writes queued by
    `later`, sent with the next statement."""

    read_cache: Any = None
    queued: list[tuple[Any, Any]] | None = None
    subject_names: Any = None


def later(conn: Any, query: str, params: Any,
          known: dict[tuple[str, Any], list[tuple[Any, ...]]] | None = None) -> None:
    """Run a write whose answer nobody reads (no rows back, no row count looked at) with the
    connection's next statement, in one pipelined round trip, when inside a write transaction
    (else now). A failure of it fails that next statement, in the same transaction, before
    any savepoint or the transaction ends (those statements are the next one at the latest).
    `known`: reads whose answer the write makes certain ((statement, params) -> rows), given
    to the transaction's read cache (store.postgres.readcache) once it has forgotten what the
    write made stale."""
    cache = getattr(conn, "read_cache", None)
    if cache is None or not cache.active:
        conn.execute(query, params)
        return
    cache.wrote(query, params)
    for (statement, values), rows in (known or {}).items():
        cache.put(statement, values, rows)
    if conn.queued is None:
        conn.queued = []
    conn.queued.append((query, params))


def queues(conn: Any) -> bool:
    """Whether `later` queues on this connection now (inside a ledger write transaction)
    rather than running the statement at once."""
    cache = getattr(conn, "read_cache", None)
    return cache is not None and bool(cache.active)


def flush_queued(conn: Any) -> None:
    """Send the writes `later` queued now, in one pipelined round trip (none queued: none)."""
    cursor = conn.cursor()
    if isinstance(cursor, LedgerCursor):
        cursor.send_queued()


def forget_queued(conn: Any) -> None:
    """Drop the queued writes: what they would write is being rolled back anyway."""
    if getattr(conn, "queued", None):
        conn.queued = []


class LedgerCursor(psycopg.Cursor[Any]):
    """A cursor whose failures are StoreErrors (see `translated`). Inside a write transaction
    it answers the reads `store.postgres.readcache.CACHED` names from the connection's cache
    (no round trip) and tells the cache what every other statement may have written."""

    _cached: list[Any] | None = None

    def _cache(self) -> Any:
        return getattr(self.connection, "read_cache", None)

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> LedgerCursor:
        self._cached = None
        cache = self._cache()
        if cache is not None and cache.active and isinstance(query, str):
            rows = cache.get(query, params)
            if rows is not None:
                self._cached = list(rows)
                return self
        queued = getattr(self.connection, "queued", None)
        try:
            if queued:
                self.connection.queued = []  # type: ignore[attr-defined]
                pipelined(self.connection, queued,
                          lambda: super(LedgerCursor, self).execute(query, params, **kwargs))
            else:
                super().execute(query, params, **kwargs)
        except psycopg.Error as exc:
            raise translated(exc) from exc
        if cache is not None and cache.active:
            text = query if isinstance(query, str) else query.as_string(self.connection)
            if cache.cacheable(text):
                self._cached = list(super().fetchall())
                cache.put(text, params, self._cached)
            else:
                cache.wrote(text, params)
        return self

    def send_queued(self) -> None:
        """Send the queued writes now (before a statement that cannot go with them)."""
        queued = getattr(self.connection, "queued", None)
        if queued:
            self.connection.queued = []  # type: ignore[attr-defined]
            try:
                pipelined(self.connection, queued)
            except psycopg.Error as exc:
                raise translated(exc) from exc

    def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
        self._cached = None
        self.send_queued()
        cache = self._cache()
        if cache is not None and cache.active:
            cache.wrote(query if isinstance(query, str) else query.as_string(self.connection),
                        None)
        try:
            super().executemany(query, params_seq, **kwargs)
        except psycopg.Error as exc:
            raise translated(exc) from exc

    def copy(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        self.send_queued()
        cache = self._cache()
        if cache is not None and cache.active:
            cache.wrote(statement if isinstance(statement, str)
                        else statement.as_string(self.connection), None)
        return super().copy(statement, params, **kwargs)

    def fetchone(self) -> Any:
        if self._cached is not None:
            return self._cached.pop(0) if self._cached else None
        return super().fetchone()

    def fetchall(self) -> list[Any]:
        if self._cached is not None:
            rows, self._cached = self._cached, []
            return rows
        return super().fetchall()

    def fetchmany(self, size: int = 0) -> list[Any]:
        if self._cached is not None:
            size = size or self.arraysize
            rows, self._cached = self._cached[:size], self._cached[size:]
            return rows
        return super().fetchmany(size)

    def __iter__(self) -> Any:
        if self._cached is not None:
            rows, self._cached = self._cached, []
            return iter(rows)
        return super().__iter__()
