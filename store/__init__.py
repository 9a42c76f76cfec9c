"""Everything that touches APSW: the connection, schema, migrations and every SQL statement."""

from store.connection import LedgerFile
from store.errors import LedgerTooNew, NotALedger, StoreBusy, StoreError
from store.opening import open_ledger

__all__ = ["LedgerFile", "LedgerTooNew", "NotALedger", "StoreBusy", "StoreError", "open_ledger"]
