"""The SQLite backend: one APSW file (WAL, secure delete, sqlite-vec recall). Only this package
imports `apsw`; everything above `store/` reaches it through `store`'s port and factory."""

from store.sqlite.connection import LedgerFile
from store.sqlite.opening import open_ledger

__all__ = ["LedgerFile", "open_ledger"]
