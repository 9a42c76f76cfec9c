"""The PostgreSQL backend: a ledger in its own schema of a server database (issue 33). Only
this package imports `psycopg`; everything above `store/` reaches it through `store`'s port and
factory (`store.open_ledger("postgresql://...")`), which imports it only for such an address.

For each statement-group module (FactStore, BrowseStore, ...):
- `__init__(self, conn)` takes the psycopg connection (autocommit outside the transactions that
  `connection.LedgerFile.write()/read()` open; default tuple rows); never BEGIN/COMMIT/ROLLBACK.
- Its statements fail as StoreErrors, never psycopg errors: the connection's cursors are
  `failures.LedgerCursor` (an integrity refusal is a StoreIntegrityError, a lock timeout a
  StoreBusy). A failed statement aborts the server transaction: only a savepoint (a nested
  `write()`) recovers from it.
- Its tables are its `DDL: tuple[str, ...]` (unqualified names; the search_path is the ledger's
  schema, then public); `schema.DDL_MODULES` lists the modules, in the order they run.
- Text columns that are compared or sorted are `COLLATE "C"` (SQLite's byte order, whatever
  the database's locale). An append-only refusal is a trigger calling
  `custody_refuse('what is refused')` (declared by events.DDL), which raises SQLSTATE 23000.
- `ledger_meta(key, value)` is declared by schema.py; write to it with
  `INSERT ... ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`."""

from store.postgres.connection import LedgerFile
from store.postgres.opening import open_ledger

__all__ = ["LedgerFile", "open_ledger"]
