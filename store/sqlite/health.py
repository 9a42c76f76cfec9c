"""Read-only inspection of a ledger and its key store for `custody-app doctor`: writes nothing."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache, wraps
from pathlib import Path
from typing import ParamSpec, TypeVar
from urllib.parse import quote

import apsw

from store.errors import NotALedger, StoreError
from store.sqlite.damage import damage
from store.sqlite.erasure import ErasureStore
from store.sqlite.keystore import _MIGRATIONS as KEYSTORE_MIGRATIONS
from store.sqlite.keystore import GET_META, KEYSTORE_APPLICATION_ID, KeyStoreFile
from store.sqlite.opening import configure_pragmas, load_sqlite_vec
from store.sqlite.recall import RecallStore
from store.sqlite.schema import APPLICATION_ID, MIGRATIONS
from store.sqlite.scrub import wal_path

VEC_VERSION = "SELECT vec_version()"
TRIGGERS = "SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' ORDER BY name"
OBJECTS = ("SELECT type, name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' "
           "ORDER BY type, name")
HAS_TABLE = "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?"
FTS_SECURE_DELETE = "SELECT v FROM recall_fts_config WHERE k = 'secure-delete'"
ANY_OBJECT = "SELECT 1 FROM sqlite_schema LIMIT 1"
# The newest assert whose plaintext subject is still there (not erased): its body holds the
# subject's peppered hash, which only the ledger's own key store reproduces.
LAST_SUBJECT = ("SELECT seq, subject, body FROM events WHERE kind = 'assert' "
                "AND subject IS NOT NULL ORDER BY seq DESC LIMIT 1")
# The distinct identifiers holding a character outside printable ASCII (every character an
# identifier may not hold is one; the doctor keeps those the door refuses), with how many rows
# hold each and, for facts, how many of those are still believed or awaiting review. `writer`
# is the facts' actor (its live count); `actor` counts every event. (table, statement) each.
_OUTSIDE_ASCII = "GLOB '*[^ -~]*'"
_LIVE = "count(*) FILTER (WHERE status IN ('active', 'quarantined'))"
IDENTIFIERS = (
    *(("facts", f"SELECT '{name}', {column}, count(*), {_LIVE} FROM facts "
       f"WHERE {column} {_OUTSIDE_ASCII} GROUP BY {column}")
      for name, column in (("subject", "subject"), ("predicate", "predicate"),
                            ("space", "space"), ("writer", "actor"))),
    ("events", f"SELECT 'actor', actor, count(*), 0 FROM events WHERE actor {_OUTSIDE_ASCII} "
               "GROUP BY actor"),
    ("session_events", f"SELECT 'session', session, count(*), 0 FROM session_events "
                       f"WHERE session {_OUTSIDE_ASCII} GROUP BY session"),
)
# Bytes 18 and 19 of a SQLite header are the write and read format versions: 2 means WAL.
HEADER_BYTES = 100
WAL_FORMAT = 2

Schema = tuple[frozenset[tuple[str, str]], dict[str, str]]
P = ParamSpec("P")
R = TypeVar("R")


def _translated(method: Callable[P, R]) -> Callable[P, R]:
    """A damaged file fails a read with an apsw error: the doctor sees a StoreError instead."""
    @wraps(method)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except (apsw.Error, UnicodeDecodeError) as exc:
            path, conn = getattr(args[0], "path", "the file"), getattr(args[0], "conn", None)
            found = damage(exc, path, conn) if conn is not None else None
            if found is not None:
                raise found from None
            raise StoreError(f"cannot read {path}: {exc}", "ledger_unreadable") from exc
    return run


def sqlite_vec_version() -> str:
    """Load sqlite-vec into a memory connection, as every ledger connection does; its version."""
    conn = apsw.Connection(":memory:")
    try:
        load_sqlite_vec(conn)
        return str(conn.execute(VEC_VERSION).get)
    except apsw.Error as exc:
        raise StoreError(f"sqlite-vec does not load: {exc}", "sqlite_vec_missing") from exc
    finally:
        conn.close()


def _schema_of(conn: apsw.Connection) -> Schema:
    objects = frozenset((str(t), str(n)) for t, n in conn.execute(OBJECTS))
    return objects, {str(n): str(s) for n, s in conn.execute(TRIGGERS)}


@lru_cache(maxsize=8)
def _expected(scripts: tuple[str, ...]) -> Schema:
    conn = apsw.Connection(":memory:")
    try:
        for script in scripts:
            conn.execute(script)
        return _schema_of(conn)
    finally:
        conn.close()


def expected_ledger_schema(version: int) -> Schema:
    """The tables, indexes and triggers (with their exact SQL) the migration ladder makes up to
    `version`; the recall indexes come later, at open, and are not part of it."""
    return _expected(MIGRATIONS[:version])


def keystore_version() -> int:
    return len(KEYSTORE_MIGRATIONS)


def expected_keystore_triggers() -> dict[str, str]:
    return _expected(KEYSTORE_MIGRATIONS)[1]


def _uri(path: str, immutable: bool) -> str:
    return f"file:{quote(os.path.abspath(path))}?" + ("immutable=1" if immutable else "mode=ro")


def _readonly(path: str, immutable: bool) -> apsw.Connection:
    return apsw.Connection(_uri(path, immutable),
                           flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)


class Inspection:
    """A read-only connection to one SQLite file and the few reads the doctor makes."""

    def __init__(self, conn: apsw.Connection, path: str) -> None:
        self.conn = conn
        self.path = path

    def close(self) -> None:
        self.conn.close()

    @_translated
    def pragma(self, name: str) -> int | None:
        value = self.conn.pragma(name)
        return None if value is None else int(value)

    @_translated
    def schema(self) -> Schema:
        return _schema_of(self.conn)

    @_translated
    def triggers(self) -> dict[str, str]:
        return self.schema()[1]

    @_translated
    def has_table(self, name: str) -> bool:
        return self.conn.execute(HAS_TABLE, (name,)).fetchone() is not None

    @_translated
    def fts_secure_delete(self) -> int | None:
        """The recall FTS5 table's persistent secure-delete option (None: no such table)."""
        if not self.has_table("recall_fts_config"):
            return None
        row = self.conn.execute(FTS_SECURE_DELETE).fetchone()
        return 0 if row is None else int(row[0])

    @_translated
    def pending_scrubs(self) -> list[tuple[str, str]] | None:
        """Erasures whose WAL checkpoint was blocked (None: the table does not exist)."""
        if not self.has_table("pending_scrubs"):
            return None
        return ErasureStore(self.conn).pending()

    @_translated
    def rewrite_due(self) -> dict[str, str] | None:
        """The file rewrite an erasure recorded as due and has not finished, if any."""
        if not self.has_table("ledger_meta"):
            return None
        return ErasureStore(self.conn).rewrite_due()

    @_translated
    def erasure_leaks(self) -> list[dict[str, object]]:
        """Erasures whose certificate found leaks (recorded when it was issued)."""
        if not self.has_table("ledger_meta"):
            return []
        return ErasureStore(self.conn).leaks()

    @_translated
    def recall_maintenance_error(self) -> str | None:
        """Why the last background re-clustering of the recall cells failed, if it did."""
        if not self.has_table("ledger_meta"):
            return None
        return RecallStore(self.conn).maintenance_error()

    @_translated
    def last_subject(self) -> tuple[int, str, str] | None:
        """(seq, subject, hashed body) of the newest assert whose subject is not erased."""
        if not self.has_table("events"):
            return None
        row = self.conn.execute(LAST_SUBJECT).fetchone()
        return None if row is None else (int(row[0]), str(row[1]), str(row[2]))

    @_translated
    def identifiers(self) -> list[tuple[str, str, int, int]]:
        """(field, identifier, rows, live facts) of every distinct subject, predicate, space,
        writer (a fact's actor), actor (an event's) and session holding a character outside
        printable ASCII (`IDENTIFIERS`); a table a ledger of this version lacks is skipped."""
        return [(str(f), str(v), int(n), int(live)) for table, sql in IDENTIFIERS
                if self.has_table(table) for f, v, n, live in self.conn.execute(sql)]

    def keystore(self) -> KeyStoreFile:
        """The key store's rows over this read-only connection (the doctor reads its marks)."""
        return KeyStoreFile(self.conn, self.path)

    @_translated
    def meta(self, name: str) -> bytes | None:
        """A key store entry (wrapped, as stored)."""
        row = self.conn.execute(GET_META, (name,)).fetchone()
        return None if row is None else bytes(row[0])


def inspect_ledger(path: str | Path) -> Inspection:
    """Open a ledger for inspection, configured as every ledger connection is, without running
    the migration ladder. With no -wal and no -shm beside it (no connection has it open and
    nothing is waiting in a WAL) it is opened immutable, so not even those files are created;
    otherwise read-only, reading the WAL that is there."""
    path = str(path)
    if not os.path.exists(path):
        raise StoreError(f"ledger {path} does not exist", "ledger_missing")
    if not os.path.isfile(path):
        raise StoreError(f"ledger {path} is not a file", "ledger_unopenable")
    quiet = not os.path.exists(wal_path(path)) and not os.path.exists(f"{path}-shm")
    try:
        conn = _readonly(path, immutable=quiet)
    except apsw.Error as exc:
        raise StoreError(f"cannot open ledger {path}: {exc}", "ledger_unopenable") from exc
    try:
        configure_pragmas(conn)
        app_id = conn.pragma("application_id")
        empty = conn.execute(ANY_OBJECT).fetchone() is None
    except apsw.NotADBError as exc:
        conn.close()
        raise NotALedger(f"{path} is not a SQLite database") from exc
    except apsw.Error as exc:
        conn.close()
        raise StoreError(f"cannot read ledger {path}: {exc}", "ledger_unopenable") from exc
    if app_id != APPLICATION_ID:
        conn.close()
        what = "an empty SQLite file" if empty else "a SQLite file"
        raise NotALedger(f"{path} is {what} but not a custody-app ledger "
                         f"(application_id {app_id:#x}, a ledger has {APPLICATION_ID:#x})")
    return Inspection(conn, path)


def inspect_keystore(path: str | Path) -> Inspection:
    """Open a key store read-only; refuses a file that is not one."""
    path = str(path)
    try:
        conn = _readonly(path, immutable=False)
    except apsw.Error as exc:
        raise StoreError(f"cannot open key store {path}: {exc}", "keystore_unopenable") from exc
    try:
        app_id = conn.pragma("application_id")
    except apsw.Error as exc:
        conn.close()
        if isinstance(exc, apsw.NotADBError):
            raise NotALedger(f"{path} is not a custody-app key store") from exc
        raise StoreError(f"cannot read key store {path}: {exc}", "keystore_unopenable") from exc
    if app_id != KEYSTORE_APPLICATION_ID:
        conn.close()
        raise NotALedger(f"{path} is not a custody-app key store (application_id {app_id:#x})")
    return Inspection(conn, path)


def journal_is_wal(path: str | Path) -> bool:
    """Whether the file's header says WAL mode (read from the bytes, not through SQLite)."""
    with open(path, "rb") as handle:
        header = handle.read(HEADER_BYTES)
    return len(header) == HEADER_BYTES and header[18] == header[19] == WAL_FORMAT


def file_size(path: str | Path) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None
