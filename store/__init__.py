"""The store: all database code, one folder per backend (`store/sqlite/`, `store/postgres/`)
behind one port (`store.port`). `custody_app/` imports only this package's face, `store.rows`
(the plain row types every backend hands up) and `store.errors`; never a backend's own modules
(the import-linter contracts in pyproject.toml say so)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from store.address import is_server_text
from store.errors import LedgerTooNew, NotALedger, StoreBusy, StoreError
from store.sqlite import health
from store.sqlite.connection import LedgerFile
from store.sqlite.keystore import KeyStoreFile
from store.sqlite.keystore import open_keystore as open_sqlite_keystore
from store.sqlite.locate import db_page, wal_page
from store.sqlite.opening import holds_events as sqlite_holds_events
from store.sqlite.opening import open_ledger as open_sqlite_ledger
from store.sqlite.projection import FactStore
from store.sqlite.scan_many import ManyPlan
from store.sqlite.schema import APPLICATION_ID, SCHEMA_VERSION
from store.sqlite.scrub import file_size, wal_path

CLIENT_MISSING = ("a postgresql:// ledger needs the PostgreSQL client: "
                  "pip install 'custody-app[postgres]'")


def is_server_address(address: str | Path) -> bool:
    """Whether `address` names a ledger on a PostgreSQL server (else it is a SQLite file)."""
    return isinstance(address, str) and is_server_text(address)


def open_ledger(address: str | Path, *, readonly: bool = False, immutable: bool = False,
                create: bool = False) -> Any:
    """Open the ledger at `address`: a `postgresql://` (or `postgres://`) URL is a ledger on a
    server (store.postgres: refused when missing unless `create`), anything else a SQLite file
    (made when missing, whatever `create` says, as it always was). The PostgreSQL backend is
    imported here, only for a server address, so an install without psycopg never loads it."""
    if not is_server_address(address):
        return open_sqlite_ledger(address, readonly=readonly, immutable=immutable)
    with _server_client():
        from store.postgres.opening import open_ledger as open_server_ledger
    return open_server_ledger(str(address), readonly=readonly, immutable=immutable, create=create)


def listen(address: str | Path) -> Any | None:
    """A feed of the ledger's changes committed by any process on any host
    (store.port.ChangeFeedPort: store.postgres.changes.ChangeFeed, a connection listening
    to the ledger's channel) for a server ledger; None for a file ledger, whose changes its
    own files show (store.address.LedgerAddress.watched_files). A server that cannot be
    reached is a StoreError `postgres_unreachable`."""
    if not is_server_address(address):
        return None
    with _server_client():
        from store.postgres.changes import listen as listen_on_server
    return listen_on_server(str(address))


def server_health(address: str) -> Any:
    """What `doctor` reports for a ledger on a server (store.postgres.health.ServerHealth: the
    server and pgvector versions, the schema version, the append-only triggers, the role's
    rights), read without changing anything."""
    with _server_client():
        from store.postgres.health import inspect_server
    return inspect_server(address)


@contextmanager
def _server_client() -> Iterator[None]:
    """Import the PostgreSQL backend; without psycopg, a StoreError naming the extra."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "psycopg":
            raise
        raise StoreError(CLIENT_MISSING, "postgres_client_missing") from None


__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "FactStore", "KeyStoreFile", "LedgerFile", "LedgerTooNew",
           "ManyPlan", "NotALedger", "StoreBusy", "StoreError", "db_page", "file_size", "health",
           "is_server_address", "keystore_exists", "ledger_exists", "ledger_holds_events", "listen",
           "occupied", "open_keystore", "open_ledger", "server_health", "wal_page", "wal_path"]


def ledger_exists(address: str | Path) -> bool:
    """Whether a ledger is at `address` (a file there; a server asked whether its schema holds
    one: another application's schema is not a ledger; a server that cannot be reached raises
    its StoreError, as opening it would)."""
    if not is_server_address(address):
        return os.path.exists(address)
    with _server_client():
        from store.postgres.opening import ledger_exists as on_server
    return on_server(str(address))


def ledger_holds_events(address: str | Path) -> bool:
    """Whether a ledger at `address` holds events already (a key store is then never made for
    it: its values are sealed under the keys its own key store held), read without creating or
    changing anything. A server ledger's schema counts as holding them once made (its key store
    schema is made with it)."""
    if not is_server_address(address):
        return sqlite_holds_events(address)
    return ledger_exists(address)


def open_keystore(address: str | Path, *, create: bool = True) -> Any:
    """Open (creating if missing, unless `create` is False: then a missing one is a StoreError
    `keystore_missing`) a key store by its address: a `postgresql://` URL names the key store
    schema of that ledger's database (store.postgres.keystore), anything else a SQLite key
    store file."""
    if not is_server_address(str(address)):
        if not create and not os.path.exists(address):
            raise StoreError(f"the key store {address} does not exist", "keystore_missing")
        return open_sqlite_keystore(address)
    with _server_client():
        from store.postgres.keystore import open_keystore as open_server_keystore
    return open_server_keystore(str(address), create=create)


def keystore_exists(address: str | Path) -> bool:
    """Whether a key store is at `address` (a file there; on a server, the ledger's key store
    schema made)."""
    if not is_server_address(str(address)):
        return os.path.exists(address)
    with _server_client():
        from store.postgres.keystore import keystore_exists as on_server
    return on_server(str(address))


def occupied(address: str | Path) -> str | None:
    """What already is at `address`, a place `custody-app copy` would write a ledger or a key
    store to (None: nothing, so a copy may go there). A file path: anything but a missing or
    empty regular file; a server address: its ledger schema or its key store schema holding
    any relation (another ledger, another application's tables). Changes nothing."""
    if is_server_address(address):
        with _server_client():
            from store.postgres.vacancy import occupant
        return occupant(str(address))
    path = str(address)
    if os.path.islink(path):
        return f"a symbolic link to {os.readlink(path)}"
    if not os.path.exists(path):
        return None
    if not os.path.isfile(path):
        return "a directory" if os.path.isdir(path) else "something that is not a regular file"
    size = os.path.getsize(path)
    return None if size == 0 else f"a file of {size:,} bytes"
