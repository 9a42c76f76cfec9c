"""The key store: a second SQLite file, never the ledger, holding wrapped keys and key tombstones."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any, cast

import apsw
import apsw.bestpractice

from store.errors import LedgerTooNew, NotALedger, StoreBusy, StoreError, StoreFull
from store.rows import MarkReads, MarkRow, mark_row
from store.sqlite import tables

KEYSTORE_APPLICATION_ID = 0x4355534B  # 'CUSK'

_V1 = """
CREATE TABLE keystore_meta(
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
) WITHOUT ROWID;
CREATE TRIGGER keystore_meta_no_update BEFORE UPDATE ON keystore_meta
BEGIN SELECT RAISE(ABORT, 'custody: key store entries are written once'); END;
CREATE TRIGGER keystore_meta_no_delete BEFORE DELETE ON keystore_meta
BEGIN SELECT RAISE(ABORT, 'custody: key store entries are written once'); END;
CREATE TRIGGER keystore_meta_no_replace BEFORE INSERT ON keystore_meta
WHEN EXISTS (SELECT 1 FROM keystore_meta WHERE name = NEW.name)
BEGIN SELECT RAISE(ABORT, 'custody: key store entries are written once'); END;

-- One data key per subject and generation, wrapped under the master key. Destroying a key
-- nulls `wrapped` and sets `destroyed_at`; the row stays as its tombstone, immutable after.
CREATE TABLE subject_keys(
    subject_ref  TEXT NOT NULL,
    generation   INTEGER NOT NULL,
    wrapped      BLOB,
    created_at   TEXT NOT NULL,
    destroyed_at TEXT,
    PRIMARY KEY(subject_ref, generation)
) WITHOUT ROWID;
CREATE TRIGGER subject_keys_no_delete BEFORE DELETE ON subject_keys
BEGIN SELECT RAISE(ABORT, 'custody: a subject key is destroyed, never deleted'); END;
CREATE TRIGGER subject_keys_no_replace BEFORE INSERT ON subject_keys
WHEN EXISTS (SELECT 1 FROM subject_keys
             WHERE subject_ref = NEW.subject_ref AND generation = NEW.generation)
BEGIN SELECT RAISE(ABORT, 'custody: a subject key row cannot be replaced'); END;
CREATE TRIGGER subject_keys_destroy_only BEFORE UPDATE ON subject_keys
WHEN NOT (OLD.destroyed_at IS NULL AND NEW.destroyed_at IS NOT NULL AND NEW.wrapped IS NULL
          AND NEW.subject_ref IS OLD.subject_ref AND NEW.generation IS OLD.generation
          AND NEW.created_at IS OLD.created_at)
BEGIN SELECT RAISE(ABORT, 'custody: a key can only be destroyed, once'); END;
"""
# The word index key may be replaced (rotate-index-key: the old one must leave the file); every
# other entry stays written once. A self-contained step, so it can be renumbered at a merge.
_V2 = """
DROP TRIGGER keystore_meta_no_update;
CREATE TRIGGER keystore_meta_no_update BEFORE UPDATE ON keystore_meta
WHEN NOT (OLD.name = 'index' AND NEW.name IS OLD.name)
BEGIN SELECT RAISE(ABORT, 'custody: key store entries are written once'); END;
"""

# The ledger's high-water mark (issue 13): the head (seq, hash) the ledger had reached when
# this key store last changed a key or recorded an erasure. A ledger behind it was restored
# from an older copy (or cut short). `accepted` marks a rollback a user accepted knowingly.
_V3 = """
CREATE TABLE ledger_marks(
    n        INTEGER PRIMARY KEY AUTOINCREMENT,
    seq      INTEGER NOT NULL,
    head     TEXT NOT NULL,
    at       TEXT NOT NULL,
    accepted INTEGER NOT NULL DEFAULT 0
);
CREATE TRIGGER ledger_marks_no_update BEFORE UPDATE ON ledger_marks
BEGIN SELECT RAISE(ABORT, 'custody: a ledger mark is written once'); END;
CREATE TRIGGER ledger_marks_no_delete BEFORE DELETE ON ledger_marks
BEGIN SELECT RAISE(ABORT, 'custody: a ledger mark is written once'); END;
"""
# Marks are authenticated (DESIGN 14): each row carries a MAC under a key derived from the
# master key, over its number and fields. Rows written before this step have none; they stay
# trusted as they were, up to the number recorded here (a MAC-less row added later is not).
# `ledger`: the genesis hash of the ledger this key store belongs to (bound on first write).
# `index_next`: a rotation of the word index key under way (its recorded intent): the new key,
# written before the ledger re-indexes under it, moved to `index` and deleted after.
_V4 = """
DROP TRIGGER keystore_meta_no_update;
CREATE TRIGGER keystore_meta_no_update BEFORE UPDATE ON keystore_meta
WHEN NOT (OLD.name IN ('index', 'index_next') AND NEW.name IS OLD.name)
BEGIN SELECT RAISE(ABORT, 'custody: key store entries are written once'); END;
DROP TRIGGER keystore_meta_no_delete;
CREATE TRIGGER keystore_meta_no_delete BEFORE DELETE ON keystore_meta
WHEN OLD.name IS NOT 'index_next'
BEGIN SELECT RAISE(ABORT, 'custody: key store entries are written once'); END;
ALTER TABLE ledger_marks ADD COLUMN mac TEXT;
INSERT INTO keystore_meta(name, value)
SELECT 'marks_legacy_upto', CAST(CAST(coalesce(max(n), 0) AS TEXT) AS BLOB) FROM ledger_marks;
"""
# Epoch keys (issue 34): `custody-app rotate-epoch` re-wraps every live key under a new master
# (epoch) key in one transaction, so the wrapped entries and a live key's `wrapped` may be
# replaced by another wrapping; `epoch` (the epoch's record, plain JSON) and `mark_key` (the
# marks' MAC key, wrapped, so marks outlive the master they were derived from) may be replaced.
# Nothing else changes: the ledger binding, marks_legacy_upto and destroyed keys stay as they are.
_V5 = """
DROP TRIGGER keystore_meta_no_update;
CREATE TRIGGER keystore_meta_no_update BEFORE UPDATE ON keystore_meta
WHEN NOT (OLD.name IN ('index', 'index_next', 'check', 'forget', 'pepper', 'signing',
                       'mark_key', 'epoch') AND NEW.name IS OLD.name)
BEGIN SELECT RAISE(ABORT, 'custody: key store entries are written once'); END;
DROP TRIGGER subject_keys_destroy_only;
CREATE TRIGGER subject_keys_destroy_only BEFORE UPDATE ON subject_keys
WHEN NOT (OLD.destroyed_at IS NULL AND NEW.subject_ref IS OLD.subject_ref
          AND NEW.generation IS OLD.generation AND NEW.created_at IS OLD.created_at
          AND ((NEW.destroyed_at IS NOT NULL AND NEW.wrapped IS NULL)
               OR (NEW.destroyed_at IS NULL AND OLD.wrapped IS NOT NULL
                   AND NEW.wrapped IS NOT NULL)))
BEGIN SELECT RAISE(ABORT, 'custody: a key can only be destroyed, once, or re-wrapped'); END;
"""
_MIGRATIONS = (_V1, _V2, _V3, _V4, _V5)

GET_META = "SELECT value FROM keystore_meta WHERE name = ?"
PUT_META = "INSERT INTO keystore_meta(name, value) VALUES (?, ?)"
# Overwrites in place: with secure_delete and a rollback journal the old value leaves the file.
REPLACE_META = "UPDATE keystore_meta SET value = ? WHERE name = ?"
# Only `index_next` (a finished rotation's intent) may be deleted (the trigger says so too);
# it is overwritten with zeroes first, so its bytes do not wait for the page to be reused.
DROP_META = "DELETE FROM keystore_meta WHERE name = ?"
LATEST_KEY = ("SELECT generation, wrapped, created_at, destroyed_at FROM subject_keys "
              "WHERE subject_ref = ? ORDER BY generation DESC LIMIT 1")
KEY_BY_GEN = ("SELECT generation, wrapped, created_at, destroyed_at FROM subject_keys "
              "WHERE subject_ref = ? AND generation = ?")
# Whether an erasure at that instant destroyed a generation of the subject's key (a re-key's
# retirement or a subject erasure).
DESTROYED_AT = ("SELECT 1 FROM subject_keys WHERE subject_ref = ? AND destroyed_at = ? "
                "AND wrapped IS NULL LIMIT 1")
# The subject's latest erasure: a generation a re-key retired (issue 34: a newer generation
# created by then outlived it) is no erasure of the subject, so it fences no work.
LAST_DESTROYED = ("SELECT max(d.destroyed_at) FROM subject_keys d WHERE d.subject_ref = ? "
                  "AND d.destroyed_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM subject_keys s "
                  "WHERE s.subject_ref = d.subject_ref AND s.generation > d.generation "
                  "AND s.created_at <= d.destroyed_at "
                  "AND (s.destroyed_at IS NULL OR s.destroyed_at > d.destroyed_at))")
INSERT_KEY = ("INSERT INTO subject_keys(subject_ref, generation, wrapped, created_at) "
              "VALUES (?, ?, ?, ?)")
# Keys created after the erasure (by newer work) are not the erased subject's old keys.
DESTROY = ("UPDATE subject_keys SET wrapped = NULL, destroyed_at = ? "
           "WHERE subject_ref = ? AND destroyed_at IS NULL AND created_at <= ?")
# A re-key (issue 34): every live generation older than the one its values were re-sealed under
# is destroyed (the same tombstone as DESTROY's, so the same trigger rule allows it).
RETIRE = ("UPDATE subject_keys SET wrapped = NULL, destroyed_at = ? "
          "WHERE subject_ref = ? AND generation < ? AND destroyed_at IS NULL")
# A keyless row born destroyed: the fence for a subject that had no live key at its erasure.
INSERT_DESTROYED = ("INSERT INTO subject_keys(subject_ref, generation, wrapped, created_at, "
                    "destroyed_at) VALUES (?, ?, NULL, ?, ?)")

LIVE_KEYS = ("SELECT subject_ref, generation, wrapped FROM subject_keys "
             "WHERE destroyed_at IS NULL AND wrapped IS NOT NULL ORDER BY subject_ref, generation")
# Every key row, destroyed ones included (their wrapped key NULL): a walk over every sealed blob
# reads the key store once instead of one row per subject (verify's).
ALL_KEYS = "SELECT subject_ref, generation, wrapped FROM subject_keys"
REWRAP_KEY = ("UPDATE subject_keys SET wrapped = ? WHERE subject_ref = ? AND generation = ? "
              "AND destroyed_at IS NULL AND wrapped IS NOT NULL")

ADD_MARK = ("INSERT INTO ledger_marks(n, seq, head, at, accepted, mac) "
            "VALUES (?, ?, ?, ?, ?, ?)")
NEXT_MARK = "SELECT coalesce(max(n), 0) + 1 FROM ledger_marks"
# Newest first, a page at a time (each page read whole: no half-read cursor holds the file):
# the trusted mark is the newest row whose MAC holds, almost always on the first page.
MARKS = ("SELECT n, seq, head, at, accepted, mac FROM ledger_marks WHERE n < ? "
         "ORDER BY n DESC LIMIT 64")
NEWEST_MARK = ("SELECT n, seq, head, at, accepted, mac FROM ledger_marks "
               "ORDER BY n DESC LIMIT 1")
MARK_BY_N = "SELECT n, seq, head, at, accepted, mac FROM ledger_marks WHERE n = ?"
FOREIGN_TABLES = "SELECT 1 FROM sqlite_schema LIMIT 1"
TRIGGERS = "SELECT name, sql FROM sqlite_schema WHERE type = 'trigger'"

KeyRow = tuple[int, bytes | None, str, str | None]
# (n, seq, head hash, at, accepted, mac or None)
_KEYS_FULL = "the disk is full: the key store write was rolled back"


class KeyStoreFile(MarkReads):
    """Rows of the key store. It knows nothing of cryptography: keys arrive already wrapped."""

    def __init__(self, conn: apsw.Connection, path: str) -> None:
        self.conn = conn
        self.path = path
        # Whether the open transaction changed anything that is still there (a savepoint rolled
        # back takes its changes with it): with nothing, the transaction rolls back instead of
        # committing, so a refused op leaves the file byte for byte (not even its change counter).
        self._dirty = False
        # The change counter as read in the write transaction open now, if any: while this
        # connection holds the write lock no other can commit, and its own writes never move
        # the counter, so one read serves the whole transaction (the key ring asks for it three
        # times an assert, each a statement prepared and stepped).
        self._locked = False
        self._locked_version: int | None = None

    def data_version(self) -> int:
        """Changes whenever another connection commits to the key store (cheap: no disk I/O)."""
        if self._locked_version is not None and self.conn.in_transaction:
            return self._locked_version
        version = int(self.conn.pragma("data_version"))
        if self._locked:
            self._locked_version = version
        return version

    def total_changes(self) -> int:
        """Rows changed through this key store's connection since it opened, rolled back or
        not (a write that changed no key leaves it as it was)."""
        return int(self.conn.total_changes())

    def meta(self, name: str) -> bytes | None:
        row = self.conn.execute(GET_META, (name,)).fetchone()
        return None if row is None else bytes(row[0])

    def put_meta(self, name: str, value: bytes) -> None:
        with self.write():
            if self.meta(name) is None:
                self.conn.execute(PUT_META, (name, value))
                self._dirty = True

    def replace_meta(self, name: str, value: bytes) -> None:
        with self.write():
            self.conn.execute(REPLACE_META, (value, name))
            self._dirty = True

    def drop_meta(self, name: str) -> None:
        with self.write():
            value = self.meta(name)
            if value is not None:
                self.conn.execute(REPLACE_META, (bytes(len(value)), name))
                self.conn.execute(DROP_META, (name,))
                self._dirty = True

    def latest(self, subject_ref: str) -> KeyRow | None:
        row = self.conn.execute(LATEST_KEY, (subject_ref,)).fetchone()
        return None if row is None else (int(row[0]), row[1], str(row[2]), row[3])

    def last_destroyed(self, subject_ref: str) -> str | None:
        """When the subject's latest key destruction happened (any generation), if ever."""
        row = self.conn.execute(LAST_DESTROYED, (subject_ref,)).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def destroyed_at(self, subject_ref: str, at: str) -> bool:
        """Whether a generation of the subject's key was destroyed at `at`."""
        return self.conn.execute(DESTROYED_AT, (subject_ref, at)).fetchone() is not None

    def generation(self, subject_ref: str, generation: int) -> KeyRow | None:
        row = self.conn.execute(KEY_BY_GEN, (subject_ref, generation)).fetchone()
        return None if row is None else (int(row[0]), row[1], str(row[2]), row[3])

    def add(self, subject_ref: str, generation: int, wrapped: bytes, created_at: str) -> None:
        with self.write():
            self.conn.execute(INSERT_KEY, (subject_ref, generation, wrapped, created_at))
            self._dirty = True

    def destroy(self, subject_ref: str, destroyed_at: str) -> int:
        """Null every live key of the subject; returns how many were destroyed. With none live
        (never keyed, or already shredded) a keyless destroyed row still records the instant,
        so work begun before it stays fenced."""
        with self.write():
            self.conn.execute(DESTROY, (destroyed_at, subject_ref, destroyed_at))
            self._dirty = True
            destroyed = int(self.conn.changes())
            if destroyed == 0:
                latest = self.latest(subject_ref)
                generation = 1 if latest is None else latest[0] + 1
                self.conn.execute(INSERT_DESTROYED, (subject_ref, generation, destroyed_at,
                                                     destroyed_at))
            return destroyed

    def live_keys(self) -> list[tuple[str, int, bytes]]:
        """(subject ref, generation, wrapped key) of every key not destroyed."""
        return [(str(r), int(g), bytes(w)) for r, g, w in self.conn.execute(LIVE_KEYS)]

    def key_rows(self) -> Iterator[tuple[str, int, bytes | None]]:
        """(subject ref, generation, wrapped key or None once destroyed) of every key row."""
        for ref, gen, wrapped in self.conn.execute(ALL_KEYS):
            yield str(ref), int(gen), None if wrapped is None else bytes(wrapped)

    def rewrap_keys(self, rows: list[tuple[str, int, bytes]]) -> int:
        """Replace the wrapping of each live key (subject ref, generation, new wrapped key), in
        one key store transaction (an epoch rotation's); a destroyed key is never revived."""
        with self.write():
            before = self.conn.total_changes()
            self.conn.executemany(REWRAP_KEY, [(w, r, g) for r, g, w in rows])
            changed = int(self.conn.total_changes() - before)
            self._dirty = self._dirty or changed > 0
            return changed

    def retire(self, subject_ref: str, below: int, destroyed_at: str) -> int:
        """Destroy every live key of the subject older than generation `below` (a re-key's
        end); returns how many. Fences no work: a newer generation lives on."""
        with self.write():
            self.conn.execute(RETIRE, (destroyed_at, subject_ref, below))
            retired = int(self.conn.changes())
            self._dirty = self._dirty or retired > 0
            return retired

    def add_mark(self, seq: int, head: str, at: str, sign: Callable[[MarkRow], str], *,
                 accepted: bool = False, last: MarkRow | None = None) -> MarkRow | None:
        """Record the ledger's head (unless `last`, the trusted mark, is it already); `sign`
        gives the row's MAC (the store knows no key). Returns the row written, if any."""
        with self.write():
            if accepted or last is None or (last[1], last[2]) != (seq, head):
                next_row = self.conn.execute(NEXT_MARK).fetchone()
                assert next_row is not None  # an aggregate answers one row
                n = int(next_row[0])
                row: MarkRow = (n, seq, head, at, accepted, None)
                mac = sign(row)
                self.conn.execute(ADD_MARK, (n, seq, head, at, int(accepted), mac))
                self._dirty = True
                return (n, seq, head, at, accepted, mac)
        return None

    def newest_mark(self) -> MarkRow | None:
        """The mark row with the highest number, trusted or not (one row read)."""
        found = self.conn.execute(NEWEST_MARK).fetchone()
        return None if found is None else mark_row(found)

    def mark(self, n: int) -> MarkRow | None:
        """The mark row numbered `n`, trusted or not, if the key store still holds it."""
        found = self.conn.execute(MARK_BY_N, (n,)).fetchone()
        return None if found is None else mark_row(found)

    def missing_triggers(self) -> list[str]:
        """The write-once triggers this key store should have and lacks (or has altered):
        dropped, its marks and keys can be deleted or overwritten by anyone who can write
        the file, no master key needed."""
        have = {str(name): str(sql) for name, sql in self.conn.execute(TRIGGERS)}
        return sorted(name for name, sql in expected_triggers().items() if have.get(name) != sql)

    def marks(self) -> Iterator[MarkRow]:
        """Every mark row, newest first."""
        below = 2**62
        while True:
            page = self.conn.execute(MARKS, (below,)).fetchall()
            for n, seq, head, at, accepted, mac in page:
                yield (int(cast(int, n)), int(cast(int, seq)), str(head), str(at), bool(accepted),
                       None if mac is None else str(mac))
            if len(page) < 64:
                return
            below = int(cast(int, page[-1][0]))

    # ---- whole tables (custody-app copy: store.sqlite.tables) ------------------------------
    def columns(self, table: str) -> list[str]:
        """The table's column names (StoreError `copy_unknown_table` when it has none)."""
        return tables.columns(self.conn, table)

    def copy_rows(self, table: str, names: list[str],
                  batch: int = tables.BATCH) -> Iterator[list[tuple[Any, ...]]]:
        """The table's rows (columns `names`, in that order) in primary-key order, `batch` at
        a time."""
        return tables.read_rows(self.conn, table, names, batch)

    def load_rows(self, table: str, names: list[str], rows: list[tuple[Any, ...]]) -> int:
        """Insert `rows` (columns `names`) in one key store transaction (the write-once
        triggers still apply: a row already there is refused); returns how many."""
        with self.write():
            loaded = tables.load_rows(self.conn, table, names, rows)
            self._dirty = self._dirty or loaded > 0
            return loaded

    def writing(self) -> bool:
        """Whether a key store transaction (write()) is open."""
        return bool(self.conn.in_transaction)

    @contextmanager
    def write(self) -> Iterator[None]:
        """A key store transaction (a savepoint inside one). A full disk at its commit is a
        StoreFull; what fails inside the block propagates as it is."""
        if self.conn.in_transaction:
            saved = self._dirty
            try:
                with self.conn:
                    yield
            except BaseException:
                self._dirty = saved
                raise
            return
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except apsw.BusyError as exc:
            # Another writer held the key store past the busy timeout: a clear `busy`, never
            # an apsw exception above store/ (seen with 4 writers on a loaded machine).
            raise StoreBusy("the key store is busy: another writer held it past the busy "
                            "timeout") from exc
        self._dirty = False
        self._locked = True
        try:
            try:
                yield
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            if not self._dirty:
                self.conn.execute("ROLLBACK")  # nothing to keep: the file stays as it was
                return
            try:
                self.conn.execute("COMMIT")
            except apsw.FullError as exc:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise StoreFull(_KEYS_FULL) from exc
        finally:
            self._locked = False
            self._locked_version = None

    def close(self) -> None:
        self.conn.close()


@cache
def expected_triggers() -> dict[str, str]:
    """Each trigger the migrations make, by name, with its exact SQL (a memory database)."""
    conn = apsw.Connection(":memory:")
    try:
        for script in _MIGRATIONS:
            conn.execute(script)
        return {str(name): str(sql) for name, sql in conn.execute(TRIGGERS)}
    finally:
        conn.close()


def open_keystore(path: str | Path) -> KeyStoreFile:
    """Open or create the key store (mode 0600, rollback journal so nothing lingers in a WAL)."""
    path = str(path)
    fresh = not os.path.exists(path)
    if fresh:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    try:
        conn = apsw.Connection(path)
        apsw.bestpractice.connection_busy_timeout(conn, 5000)
        apsw.bestpractice.connection_dqs(conn)
        app_id = conn.pragma("application_id")
        version = conn.pragma("user_version")
        foreign = app_id == 0 and conn.execute(FOREIGN_TABLES).fetchone() is not None
        if app_id not in (0, KEYSTORE_APPLICATION_ID) or (app_id == 0 and version) or foreign:
            # Another application's SQLite file: refused before anything is written to it.
            raise NotALedger(f"{path} is a SQLite file but not a custody-app key store")
        if version > len(_MIGRATIONS):
            raise LedgerTooNew(f"{path} was written by a newer custody-app")
        conn.pragma("secure_delete", "ON")
        # TRUNCATE, not DELETE: as clean at commit (shared/SQLITE-FACTS.md), without creating and
        # unlinking the journal at every commit (a commit 4.6 vs 12.7 ms p50 here; a write group
        # commits the key store twice).
        conn.pragma("journal_mode", "TRUNCATE")
        conn.pragma("temp_store", "MEMORY")
        if version < len(_MIGRATIONS):
            conn.execute("BEGIN IMMEDIATE")
            for step in range(version, len(_MIGRATIONS)):
                conn.execute(_MIGRATIONS[step])
            conn.pragma("application_id", KEYSTORE_APPLICATION_ID)
            conn.pragma("user_version", len(_MIGRATIONS))
            conn.execute("COMMIT")
    except apsw.NotADBError as exc:
        raise NotALedger(f"{path} is not a custody-app key store") from exc
    except apsw.Error as exc:
        raise StoreError(f"cannot open key store {path}: {exc}", "keystore_unopenable") from exc
    return KeyStoreFile(conn, path)
