"""The store: all database code, one folder per backend (`store/sqlite/`, later
`store/postgres/`) behind one port. `custody_app/` imports only this package's face, `store.rows`
(the plain row types every backend hands up) and `store.errors`; never a backend's own modules
(the import-linter contracts in pyproject.toml say so)."""

import os

from store.address import is_server_text
from store.errors import LedgerTooNew, NotALedger, StoreBusy, StoreError
from store.sqlite import health
from store.sqlite.connection import LedgerFile
from store.sqlite.keystore import KeyStoreFile, open_keystore
from store.sqlite.locate import db_page, wal_page
from store.sqlite.opening import open_ledger
from store.sqlite.projection import FactStore
from store.sqlite.scan_many import ManyPlan
from store.sqlite.schema import APPLICATION_ID, SCHEMA_VERSION
from store.sqlite.scrub import file_size, wal_path

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "FactStore", "KeyStoreFile", "LedgerFile", "LedgerTooNew",
           "ManyPlan", "NotALedger", "StoreBusy", "StoreError", "db_page", "file_size", "health",
           "ledger_exists", "open_keystore", "open_ledger", "wal_page", "wal_path"]


def ledger_exists(address: str) -> bool:
    """Whether a ledger is at `address` (a file there; a server asked whether its schema holds
    one)."""
    if is_server_text(address):
        from store.postgres.opening import ledger_exists as on_server

        return on_server(address)
    return os.path.exists(address)
