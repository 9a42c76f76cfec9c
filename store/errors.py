"""The store's own error types: nothing above store/ sees an apsw exception."""

from __future__ import annotations


class StoreError(Exception):
    """A storage failure, with a stable code the service and the CLI report."""

    code = "store_error"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class NotALedger(StoreError):
    """The file exists but is not a custody-app ledger."""

    code = "not_a_ledger"


class LedgerTooNew(StoreError):
    """The file was written by a newer custody-app than this one."""

    code = "ledger_too_new"


class StoreBusy(StoreError):
    """Another process held the write lock for longer than the busy timeout and retries."""

    code = "ledger_busy"


class StoreIntegrityError(StoreError):
    """A constraint or trigger refused a change (e.g. an edit of an append-only event)."""

    code = "integrity"


class StoreFull(StoreError):
    """The disk (or the connection's page limit) is full: the write was rolled back whole."""

    code = "disk_full"


class LedgerDamaged(StoreError):
    """The ledger holds bytes the database or the ledger cannot read; `seq` where known."""

    code = "ledger_damaged"

    def __init__(self, message: str, seq: int | None = None) -> None:
        super().__init__(message)
        self.seq = seq
