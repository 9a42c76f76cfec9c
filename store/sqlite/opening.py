"""open_ledger(): one place that sets every pragma, loads sqlite-vec and runs the migration ladder."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import apsw
import apsw.bestpractice
import sqlite_vec

from store.errors import LedgerTooNew, NotALedger, StoreError
from store.sqlite.connection import LedgerFile, begin_immediate
from store.sqlite.recall import add_chunk_lookup
from store.sqlite.recall_upgrade import drop_status_scope, recode_vec_table
from store.sqlite.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION

BUSY_TIMEOUT_MS = 5000
MMAP_BYTES = 0  # how much of the file a connection maps (configure_pragmas)
LEDGER_ID_PUT = ("INSERT OR IGNORE INTO ledger_meta(key, value) "
                 "VALUES ('ledger_id', lower(hex(randomblob(16))))")


def open_ledger(path: str | Path, *, readonly: bool = False,
                immutable: bool = False) -> LedgerFile:
    """Open (creating if missing) a ledger file with every pragma set and the schema current.
    `immutable`: a read-only snapshot that creates no -wal or -shm file (for one-shot checks
    of a ledger no process is writing; its WAL, if any, is then not read)."""
    path = str(path)
    if not readonly and not os.path.exists(path):
        # A new ledger is readable by its owner only.
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    flags = apsw.SQLITE_OPEN_READONLY if readonly else (
        apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    )
    target = path
    if readonly and immutable:
        if not os.path.exists(path):
            raise StoreError(f"cannot open ledger {path}: it does not exist",
                             code="ledger_unopenable")
        target = f"file:{quote(os.path.abspath(path))}?immutable=1"
        flags |= apsw.SQLITE_OPEN_URI
    try:
        conn = apsw.Connection(target, flags=flags)
    except apsw.Error as exc:
        raise StoreError(f"cannot open ledger {path}: {exc}", code="ledger_unopenable") from exc
    try:
        _configure(conn)
        _migrate(conn, path, readonly)
        if not readonly:
            add_chunk_lookup(conn)
    except apsw.NotADBError as exc:
        conn.close()
        raise NotALedger(f"{path} is not a SQLite database") from exc
    except StoreError:
        conn.close()
        raise
    except apsw.Error as exc:
        conn.close()
        raise StoreError(f"cannot open ledger {path}: {exc}", code="ledger_unopenable") from exc
    return LedgerFile(conn, path)


def _configure(conn: apsw.Connection) -> None:
    configure_pragmas(conn)
    load_sqlite_vec(conn)


def load_sqlite_vec(conn: apsw.Connection) -> None:
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.enable_load_extension(False)


def configure_pragmas(conn: apsw.Connection) -> None:
    """The per-connection settings every ledger connection gets (none is stored in the file)."""
    apsw.bestpractice.connection_busy_timeout(conn, BUSY_TIMEOUT_MS)
    apsw.bestpractice.connection_dqs(conn)
    apsw.bestpractice.connection_enable_foreign_keys(conn)
    apsw.bestpractice.connection_recursive_triggers(conn)
    # Per connection, not stored in the file: ON (not FAST) so freed pages are zeroed.
    conn.pragma("secure_delete", "ON")
    # Sorts and temp indexes stay in memory so no value bytes reach temp files.
    conn.pragma("temp_store", "MEMORY")
    conn.pragma("synchronous", "NORMAL")
    # No memory map: every mapped page a process reads stays in its RSS as file-backed memory
    # (658 MB after open + 100 recalls of a 1M-fact ledger, `top`'s RES). sqlite-vec's brute
    # force read every vector per query through it once (64 -> 38 ms at 100k x 256); recall now
    # reads the in-process copy or a few cells, and 100 recalls at 100k took the same CPU
    # through SQLite's page cache (5.9-6.0 s against 6.1-6.2 s mapped, 190 MB peak RSS against
    # 385 MB: bench/results_memory.md, issue 35).
    conn.pragma("mmap_size", MMAP_BYTES)


# Row rewrites a migration needs that SQL alone cannot make (its table may not exist yet): run
# right after the script that takes user_version to the key, in the same transaction.
POST_MIGRATION: dict[int, Callable[[apsw.Connection], object]] = {
    6: drop_status_scope, 7: recode_vec_table, 8: recode_vec_table}


def _migrate(conn: apsw.Connection, path: str, readonly: bool) -> None:
    app_id = conn.pragma("application_id")
    version = conn.pragma("user_version")
    empty = conn.execute("SELECT 1 FROM sqlite_schema LIMIT 1").fetchone() is None
    if app_id != APPLICATION_ID and not (app_id == 0 and version == 0 and empty):
        raise NotALedger(f"{path} is a SQLite file but not a custody-app ledger")
    if version > SCHEMA_VERSION:
        raise LedgerTooNew(
            f"{path} has schema version {version}; this custody-app reads up to "
            f"{SCHEMA_VERSION}: upgrade custody-app"
        )
    # Only now that the file is known to be ours: switching to WAL rewrites its header.
    if not readonly or conn.pragma("journal_mode") != "wal":
        apsw.bestpractice.connection_wal(conn)
    if version == SCHEMA_VERSION:
        return
    if readonly:
        raise StoreError(f"{path} needs a schema upgrade and was opened read-only", "ledger_unopenable")
    begin_immediate(conn)
    try:
        # Re-read inside the lock: another process may have migrated meanwhile.
        version = conn.pragma("user_version")
        for step in range(version, SCHEMA_VERSION):
            conn.execute(MIGRATIONS[step])
            if step + 1 in POST_MIGRATION:
                POST_MIGRATION[step + 1](conn)
        conn.pragma("application_id", APPLICATION_ID)
        conn.pragma("user_version", SCHEMA_VERSION)
        vec = conn.execute("SELECT vec_version()").get
        conn.execute(
            "INSERT OR REPLACE INTO ledger_meta(key, value) VALUES ('sqlite_vec_version', ?)",
            (vec,),
        )
        # The ledger's stable id (what a tool receipt's `audience` names), made once, when the
        # file is created or first upgraded; a ledger that never had one answers by its genesis
        # event (custody_app.core.ledger_core.LedgerCore.ledger_id).
        conn.execute(LEDGER_ID_PUT)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def holds_events(path: str | Path) -> bool:
    """Whether the ledger file at `path` holds an event, read without creating or changing any
    file (an immutable snapshot; no -wal or -shm made). A file that is not this application's
    ledger (empty, another SQLite file's header, not SQLite) holds none: opening it says what
    it is. A WAL with content beside it cannot be read without its -shm, nor a damaged file:
    both count as holding events (a key store is never made for what may be a ledger)."""
    path = str(path)
    try:
        wal = os.path.getsize(f"{os.path.realpath(path)}-wal")
    except OSError:
        wal = 0
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
    except OSError:
        return False
    if len(header) < 100:
        return wal > 0
    if not header.startswith(b"SQLite format 3\x00") or \
            int.from_bytes(header[68:72], "big") != APPLICATION_ID:
        return False
    if wal > 0:
        return True
    target = f"file:{quote(os.path.abspath(path))}?immutable=1"
    try:
        conn = apsw.Connection(target, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    except apsw.Error:
        return True
    try:
        return conn.execute("SELECT EXISTS (SELECT 1 FROM events)").fetchone() != (0,)
    except apsw.Error:
        return True
    finally:
        conn.close()
