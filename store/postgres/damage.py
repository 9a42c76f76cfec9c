"""Damaged ledger data on a server, named instead of a traceback: the server itself reports
corrupted pages or indexes (SQLSTATE XX001, XX002), which `failures.translated` already turns
into LedgerDamaged; text that is not UTF-8 cannot be stored in a UTF-8 database at all."""

from __future__ import annotations

from store.errors import LedgerDamaged


def damage(exc: BaseException, path: str) -> LedgerDamaged | None:
    """What `exc`, raised by a read of the ledger at `path`, says about it (None when it is not
    a sign of damage)."""
    if isinstance(exc, LedgerDamaged):
        return exc
    cause = exc.__cause__
    if isinstance(cause, LedgerDamaged):
        return cause
    if isinstance(exc, UnicodeDecodeError):
        return LedgerDamaged(f"the ledger {path} returned text that is not valid UTF-8 "
                             f"({exc.reason}): the database's encoding is not UTF8")
    return None
