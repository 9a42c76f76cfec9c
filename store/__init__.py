"""The store: all database code, one folder per backend (`store/sqlite/`, later
`store/postgres/`) behind one port. `custody_app/` imports only this package's face, `store.rows`
(the plain row types every backend hands up) and `store.errors`; never a backend's own modules
(the import-linter contracts in pyproject.toml say so)."""

from pathlib import Path
from typing import cast

from store.errors import LedgerTooNew, NotALedger, StoreBusy, StoreError
from store.sqlite import health
from store.sqlite.connection import LedgerFile
from store.sqlite.keystore import KeyStoreFile
from store.sqlite.locate import db_page, wal_page
from store.sqlite.opening import open_ledger
from store.sqlite.projection import FactStore
from store.sqlite.scan_many import ManyPlan
from store.sqlite.schema import APPLICATION_ID, SCHEMA_VERSION
from store.sqlite.scrub import file_size, wal_path

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "FactStore", "KeyStoreFile", "LedgerFile", "LedgerTooNew",
           "ManyPlan", "NotALedger", "StoreBusy", "StoreError", "db_page", "file_size", "health",
           "open_keystore", "open_ledger", "wal_page", "wal_path"]


def open_keystore(address: str | Path) -> KeyStoreFile:
    """Open (creating if missing) a key store by its address: a `postgresql://` URL names the
    key store schema of that ledger's database (store.postgres.keystore), anything else a
    SQLite key store file."""
    if str(address).startswith(("postgresql://", "postgres://")):
        try:
            from store.postgres import keystore
        except ImportError as exc:  # psycopg is not installed
            raise StoreError("a postgresql:// key store needs the PostgreSQL client: "
                             "pip install 'custody-app[postgres]'",
                             "postgres_client_missing") from exc
        return cast(KeyStoreFile, keystore.open_keystore(str(address)))
    from store.sqlite import keystore as sqlite_keystore

    return sqlite_keystore.open_keystore(address)
