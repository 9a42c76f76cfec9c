"""psycopg's errors as the store's own: every statement of the PostgreSQL backend runs through
`LedgerCursor`, so nothing above store/ ever sees a psycopg exception."""

from __future__ import annotations

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


class LedgerCursor(psycopg.Cursor[Any]):
    """A cursor whose failures are StoreErrors (see `translated`)."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> LedgerCursor:
        try:
            super().execute(query, params, **kwargs)
        except psycopg.Error as exc:
            raise translated(exc) from exc
        return self

    def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
        try:
            super().executemany(query, params_seq, **kwargs)
        except psycopg.Error as exc:
            raise translated(exc) from exc
