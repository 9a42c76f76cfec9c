"""Everything that touches APSW: the connection, schema, migrations and every SQL statement."""

from store.connection import LedgerFile, open_ledger
from store.errors import LedgerTooNew, NotALedger, StoreBusy, StoreError

__all__ = ["LedgerFile", "LedgerTooNew", "NotALedger", "StoreBusy", "StoreError", "open_ledger"]
