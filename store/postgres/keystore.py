"""The key store of a server ledger: wrapped keys, key tombstones and the ledger's high-water
marks in the ledger's own database, in a schema of their own (`<ledger schema>_keys`,
`custody_keys` by default), on a connection of their own (its transactions commit apart from
the ledger's, as the SQLite key store's file does). The twin of `store.sqlite.keystore`: the
same methods, and the same write-once rules enforced by triggers."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors, sql

from store.errors import StoreBusy, StoreError, StoreFull, StoreIntegrityError
from store.postgres.keystore_schema import ensure
from store.rows import MarkRow

DEFAULT_SCHEMA = "custody"
KEYS_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}\Z")
# SQLite's key store waits 5 s for its write lock.
LOCK_TIMEOUT = "5s"

GET_META = "SELECT value FROM keystore_meta WHERE name = %s"
PUT_META = "INSERT INTO keystore_meta(name, value) VALUES (%s, %s)"
REPLACE_META = "UPDATE keystore_meta SET value = %s WHERE name = %s"
DROP_META = "DELETE FROM keystore_meta WHERE name = %s"
LATEST_KEY = ("SELECT generation, wrapped, created_at, destroyed_at FROM subject_keys "
              "WHERE subject_ref = %s ORDER BY generation DESC LIMIT 1")
KEY_BY_GEN = ("SELECT generation, wrapped, created_at, destroyed_at FROM subject_keys "
              "WHERE subject_ref = %s AND generation = %s")
LAST_DESTROYED = "SELECT max(destroyed_at) FROM subject_keys WHERE subject_ref = %s"
INSERT_KEY = ("INSERT INTO subject_keys(subject_ref, generation, wrapped, created_at) "
              "VALUES (%s, %s, %s, %s)")
# Keys created after the erasure (by newer work) are not the erased subject's old keys.
DESTROY = ("UPDATE subject_keys SET wrapped = NULL, destroyed_at = %s "
           "WHERE subject_ref = %s AND destroyed_at IS NULL AND created_at <= %s")
# A keyless row born destroyed: the fence for a subject that had no live key at its erasure.
INSERT_DESTROYED = ("INSERT INTO subject_keys(subject_ref, generation, wrapped, created_at, "
                    "destroyed_at) VALUES (%s, %s, NULL, %s, %s)")
ADD_MARK = ("INSERT INTO ledger_marks(n, seq, head, at, accepted, mac) "
            "VALUES (%s, %s, %s, %s, %s, %s)")
NEXT_MARK = "SELECT coalesce(max(n), 0) + 1 FROM ledger_marks"
MARKS = ("SELECT n, seq, head, at, accepted, mac FROM ledger_marks WHERE n < %s "
         "ORDER BY n DESC LIMIT 64")
CHANGES = "SELECT n FROM keystore_changes"
# One writer at a time (SQLite's BEGIN IMMEDIATE on the key store file).
LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
KeyRow = tuple[int, bytes | None, str, str | None]
_KEYS_FULL = "the disk is full: the key store write was rolled back"


def _raise(exc: psycopg.Error, what: str) -> NoReturn:
    """A psycopg error as the store's own (nothing above store/ sees a psycopg exception)."""
    if isinstance(exc, errors.DiskFull):
        raise StoreFull(_KEYS_FULL) from exc
    if isinstance(exc, errors.LockNotAvailable):
        raise StoreBusy("the key store is busy: another writer held it past the lock "
                        "timeout") from exc
    if isinstance(exc, errors.IntegrityError):
        raise StoreIntegrityError(f"the key store refused {what}: "
                                  f"{exc.diag.message_primary or exc}") from exc
    raise StoreError(f"key store {what} failed: {exc.diag.message_primary or exc}",
                     "keystore_error") from exc


class KeyStoreFile:
    """Rows of the key store. It knows nothing of cryptography: keys arrive already wrapped."""

    def __init__(self, conn: psycopg.Connection[Any], path: str, schema: str) -> None:
        self.conn = conn
        self.path = path  # the address, without a password, for messages
        self.schema = schema
        self._dirty = False
        self._depth = 0
        # Rows this object's statements changed since it opened, rolled back or not (SQLite's
        # total_changes).
        self._changes = 0

    def _run(self, statement: str, params: tuple[object, ...] = (), *,
             what: str = "a statement") -> psycopg.Cursor[Any]:
        try:
            cur = self.conn.execute(statement, params)
        except psycopg.Error as exc:
            _raise(exc, what)
        if cur.rowcount > 0 and not statement.startswith("SELECT"):
            self._changes += cur.rowcount
        return cur

    def data_version(self) -> int:
        """A number that changes whenever the key store changes (any connection's commit,
        this one's too: a reader that caches keys drops its cache then, which is safe)."""
        row = self._run(CHANGES).fetchone()
        return 0 if row is None else int(row[0])

    def total_changes(self) -> int:
        """Rows changed through this key store since it opened, rolled back or not."""
        return self._changes

    def meta(self, name: str) -> bytes | None:
        row = self._run(GET_META, (name,)).fetchone()
        return None if row is None else bytes(row[0])

    def put_meta(self, name: str, value: bytes) -> None:
        with self.write():
            if self.meta(name) is None:
                self._run(PUT_META, (name, value), what=f"entry {name!r}")
                self._dirty = True

    def replace_meta(self, name: str, value: bytes) -> None:
        with self.write():
            self._run(REPLACE_META, (value, name), what=f"replacing entry {name!r}")
            self._dirty = True

    def drop_meta(self, name: str) -> None:
        with self.write():
            value = self.meta(name)
            if value is not None:
                self._run(REPLACE_META, (bytes(len(value)), name), what=f"dropping {name!r}")
                self._run(DROP_META, (name,), what=f"dropping {name!r}")
                self._dirty = True

    def latest(self, subject_ref: str) -> KeyRow | None:
        row = self._run(LATEST_KEY, (subject_ref,)).fetchone()
        return None if row is None else _key_row(row)

    def last_destroyed(self, subject_ref: str) -> str | None:
        """When the subject's latest key destruction happened (any generation), if ever."""
        row = self._run(LAST_DESTROYED, (subject_ref,)).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def generation(self, subject_ref: str, generation: int) -> KeyRow | None:
        row = self._run(KEY_BY_GEN, (subject_ref, generation)).fetchone()
        return None if row is None else _key_row(row)

    def add(self, subject_ref: str, generation: int, wrapped: bytes, created_at: str) -> None:
        with self.write():
            self._run(INSERT_KEY, (subject_ref, generation, wrapped, created_at),
                      what="a new subject key")
            self._dirty = True

    def destroy(self, subject_ref: str, destroyed_at: str) -> int:
        """Null every live key of the subject; returns how many were destroyed. With none live
        (never keyed, or already shredded) a keyless destroyed row still records the instant,
        so work begun before it stays fenced."""
        with self.write():
            cur = self._run(DESTROY, (destroyed_at, subject_ref, destroyed_at),
                            what="a key destruction")
            self._dirty = True
            destroyed = max(0, int(cur.rowcount))
            if destroyed == 0:
                latest = self.latest(subject_ref)
                generation = 1 if latest is None else latest[0] + 1
                self._run(INSERT_DESTROYED, (subject_ref, generation, destroyed_at,
                                             destroyed_at), what="a key destruction")
            return destroyed

    def add_mark(self, seq: int, head: str, at: str, sign: Callable[[MarkRow], str], *,
                 accepted: bool = False, last: MarkRow | None = None) -> None:
        """Record the ledger's head (unless `last`, the trusted mark, is it already); `sign`
        gives the row's MAC (the store knows no key)."""
        with self.write():
            if accepted or last is None or (last[1], last[2]) != (seq, head):
                next_row = self._run(NEXT_MARK).fetchone()
                assert next_row is not None  # an aggregate answers one row
                n = int(next_row[0])
                row: MarkRow = (n, seq, head, at, accepted, None)
                self._run(ADD_MARK, (n, seq, head, at, int(accepted), sign(row)),
                          what="a ledger mark")
                self._dirty = True

    def marks(self) -> Iterator[MarkRow]:
        """Every mark row, newest first (a page of 64 a statement)."""
        below = 2**62
        while True:
            page = self._run(MARKS, (below,)).fetchall()
            for n, seq, head, at, accepted, mac in page:
                yield (int(n), int(seq), str(head), str(at), bool(accepted),
                       None if mac is None else str(mac))
            if len(page) < 64:
                return
            below = int(page[-1][0])

    def high_water(self) -> tuple[int, str, str, bool] | None:
        """(seq, head hash, at, accepted) of the newest mark row, trusted or not (the key ring
        decides which row is trusted)."""
        for row in self.marks():
            return row[1], row[2], row[3], row[4]
        return None

    def legacy_marks_upto(self) -> int:
        """Rows up to this number were written before marks had a MAC."""
        value = self.meta("marks_legacy_upto")
        try:
            return int(value or b"0")
        except ValueError:
            return 0

    @contextmanager
    def write(self) -> Iterator[None]:
        """A key store transaction on its own connection (READ COMMITTED, one writer at a time
        through an advisory lock on the key store), a savepoint inside one. With nothing
        changed it rolls back instead of committing. A full disk at its commit is a
        StoreFull, a lock not had within the timeout a StoreBusy; what fails inside the block
        propagates as it is."""
        if self._depth:
            name = sql.Identifier(f"keys_sp{self._depth}")
            saved = self._dirty
            self._statement(sql.SQL("SAVEPOINT {}").format(name))
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                self._dirty = saved
                self._statement(sql.SQL("ROLLBACK TO SAVEPOINT {}").format(name))
                self._statement(sql.SQL("RELEASE SAVEPOINT {}").format(name))
                raise
            self._depth -= 1
            self._statement(sql.SQL("RELEASE SAVEPOINT {}").format(name))
            return
        self._statement(sql.SQL("BEGIN ISOLATION LEVEL READ COMMITTED"))
        self._depth, self._dirty = 1, False
        try:
            self._run(LOCK, (f"custody-keys:{self.schema}",), what="taking the write lock")
            yield
        except BaseException:
            self._depth = 0
            self._quiet_rollback()
            raise
        self._depth = 0
        if not self._dirty:
            self._quiet_rollback()  # nothing to keep
            return
        try:
            self.conn.execute("COMMIT")
        except psycopg.Error as exc:
            self._quiet_rollback()
            _raise(exc, "the commit")

    def _statement(self, statement: sql.SQL | sql.Composed) -> None:
        try:
            self.conn.execute(statement)
        except psycopg.Error as exc:
            _raise(exc, "a transaction step")

    def _quiet_rollback(self) -> None:
        try:
            self.conn.execute("ROLLBACK")
        except psycopg.Error:
            pass  # the connection is gone: the server rolled the transaction back

    def close(self) -> None:
        self.conn.close()


def _key_row(row: Any) -> KeyRow:
    return (int(row[0]), None if row[1] is None else bytes(row[1]), str(row[2]),
            None if row[3] is None else str(row[3]))


def split_address(url: str) -> tuple[str, str]:
    """(the libpq URL, the ledger's schema) of a ledger address, read as the ledger's opening
    reads it: the schema is the last `schema=` query parameter (taken out: libpq does not know
    it), else `custody`."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    rest = [(k, v) for k, v in query if k != "schema"]
    clean = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment))
    return clean, schemas[-1] if schemas else DEFAULT_SCHEMA


def shown(url: str) -> str:
    """The address without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def open_keystore(url: str, *, schema: str | None = None, create: bool = True) -> KeyStoreFile:
    """Open (creating if missing, unless `create` is False) the key store of the ledger at
    `url`: the schema `<ledger schema>_keys` of its database (`schema` names another). A schema
    holding other tables, or a key store of a newer version, is refused before anything is
    written."""
    conninfo, ledger_schema = split_address(url)
    keys = schema or f"{ledger_schema}_keys"
    where = f"{shown(url)} (schema {keys})"
    if not KEYS_SCHEMA.match(keys):
        # PostgreSQL would cut a longer name to 63 bytes, and two ledgers could share one.
        raise StoreError(f"cannot open key store {where}: its schema name must be 1-63 "
                         "lower-case letters, digits or underscores (a ledger schema of up to "
                         "58, as the key store adds '_keys')", "keystore_unopenable")
    try:
        conn = psycopg.connect(conninfo, autocommit=True)
    except psycopg.Error as exc:
        raise StoreError(f"cannot open key store {where}: {exc}", "keystore_unopenable") from exc
    try:
        conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)))
        with conn.transaction():
            conn.execute(LOCK, (f"custody-keys:{keys}",))
            ensure(conn, keys, where, create=create)
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(keys)))
    except StoreError:
        conn.close()
        raise
    except psycopg.Error as exc:
        conn.close()
        raise StoreError(f"cannot open key store {where}: {exc}", "keystore_unopenable") from exc
    return KeyStoreFile(conn, where, keys)


def keystore_exists(url: str, *, schema: str | None = None) -> bool:
    """Whether the key store of the ledger at `url` has been made (its schema holds a version
    table); a server that cannot be reached raises its StoreError."""
    conninfo, ledger_schema = split_address(url)
    keys = schema or f"{ledger_schema}_keys"
    try:
        conn = psycopg.connect(conninfo, autocommit=True)
    except psycopg.Error as exc:
        raise StoreError(f"cannot open key store {shown(url)} (schema {keys}): {exc}",
                         "keystore_unopenable") from exc
    try:
        found = conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                             (f"{sql.Identifier(keys).as_string(conn)}.schema_version",)).fetchone()
    except psycopg.Error as exc:
        raise StoreError(f"cannot read key store {shown(url)} (schema {keys}): {exc}",
                         "keystore_unopenable") from exc
    finally:
        conn.close()
    return found == (True,)
