"""The PostgreSQL backend: a ledger in its own schema of a server database (issue 33). Only
this package imports `psycopg`; everything above `store/` reaches it through `store`'s port and
factory (`store.open_ledger("postgresql://...")`), which imports it only for such an address."""

from store.postgres.connection import LedgerFile
from store.postgres.opening import open_ledger

__all__ = ["LedgerFile", "open_ledger"]
