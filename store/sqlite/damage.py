"""A damaged ledger file named, not a traceback: text that is not valid UTF-8 (located to its
event's seq and column), or pages SQLite reports malformed (often a -wal file beside the ledger
that belongs to another copy of it). Only the store knows apsw's errors; callers ask here."""

from __future__ import annotations

import apsw

from store.errors import LedgerDamaged
from store.rows import EVENT_COLUMNS

_TEXT_COLUMNS = tuple(c for c in EVENT_COLUMNS if c not in ("seq", "value"))
# Every text column as raw bytes, so a bad byte is found here instead of failing the read.
_RAW = ("SELECT seq, " + ", ".join(f"CAST({c} AS BLOB)" for c in _TEXT_COLUMNS)
        + " FROM events ORDER BY seq")


def damage(exc: BaseException, path: str, conn: apsw.Connection) -> LedgerDamaged | None:
    """What `exc`, raised by a read of the ledger at `path`, says about the file (None when it
    is not a sign of damage)."""
    if isinstance(exc, LedgerDamaged):
        return exc
    if isinstance(exc, UnicodeDecodeError):
        found = _bad_text(conn)
        if found is None:
            return LedgerDamaged(f"the ledger {path} holds text that is not valid UTF-8 "
                                 f"({exc.reason}): it was edited outside custody-app")
        seq, column = found
        return LedgerDamaged(f"event {seq} in the ledger {path} holds text that is not valid "
                             f"UTF-8 in its {column}: the file was edited outside custody-app; "
                             "restore it from a backup", seq)
    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        return LedgerDamaged(f"the ledger {path} is damaged (SQLite: {exc}); a {path}-wal or "
                             f"{path}-shm beside it may belong to another copy of the ledger: "
                             "move them aside and restore the ledger with its own")
    return None


def _bad_text(conn: apsw.Connection) -> tuple[int, str] | None:
    """(seq, column) of the first event with a text column that is not valid UTF-8."""
    try:
        for row in conn.execute(_RAW):
            for column, raw in zip(_TEXT_COLUMNS, row[1:], strict=True):
                if raw is None:
                    continue
                try:
                    bytes(raw).decode("utf-8")
                except UnicodeDecodeError:
                    return int(row[0]), column
    except apsw.Error:
        return None
    return None
