"""The key store of a server ledger: wrapped keys, key tombstones and the ledger's high-water
marks in the ledger's own database, in a schema of their own (`<ledger schema>_keys`,
`custody_keys` by default), on a connection of their own (its transactions commit apart from
the ledger's, as the SQLite key store's file does). The twin of `store.sqlite.keystore`: the
same methods, and the same write-once rules enforced by triggers."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, NoReturn
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors, sql

from store.errors import StoreBusy, StoreError, StoreFull, StoreIntegrityError
from store.postgres import tables
from store.postgres.failures import pipelined
from store.postgres.keystore_schema import ensure
from store.rows import MarkReads, MarkRow, mark_row

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
# Whether an erasure at that instant destroyed a generation of the subject's key (a re-key's
# retirement or a subject erasure).
DESTROYED_AT = ("SELECT 1 FROM subject_keys WHERE subject_ref = %s AND destroyed_at = %s "
                "AND wrapped IS NULL LIMIT 1")
# The subject's latest erasure: a generation a re-key retired (issue 34: a newer generation
# created by then outlived it) is no erasure of the subject, so it fences no work.
LAST_DESTROYED = ("SELECT max(d.destroyed_at) FROM subject_keys d WHERE d.subject_ref = %s "
                  "AND d.destroyed_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM subject_keys s "
                  "WHERE s.subject_ref = d.subject_ref AND s.generation > d.generation "
                  "AND s.created_at <= d.destroyed_at "
                  "AND (s.destroyed_at IS NULL OR s.destroyed_at > d.destroyed_at))")
# Inside a write transaction: every key row of a subject, newest first, in one read (what
# latest, last_destroyed and generation answer from).
SUBJECT_KEYS = ("SELECT generation, wrapped, created_at, destroyed_at FROM subject_keys "
                "WHERE subject_ref = %s ORDER BY generation DESC")
INSERT_KEY = ("INSERT INTO subject_keys(subject_ref, generation, wrapped, created_at) "
              "VALUES (%s, %s, %s, %s)")
# Keys created after the erasure (by newer work) are not the erased subject's old keys.
DESTROY = ("UPDATE subject_keys SET wrapped = NULL, destroyed_at = %s "
           "WHERE subject_ref = %s AND destroyed_at IS NULL AND created_at <= %s")
# A re-key (issue 34): every live generation older than the one its values were re-sealed under
# is destroyed (the same tombstone as DESTROY's, so the same trigger rule allows it).
RETIRE = ("UPDATE subject_keys SET wrapped = NULL, destroyed_at = %s "
          "WHERE subject_ref = %s AND generation < %s AND destroyed_at IS NULL")
# A keyless row born destroyed: the fence for a subject that had no live key at its erasure.
INSERT_DESTROYED = ("INSERT INTO subject_keys(subject_ref, generation, wrapped, created_at, "
                    "destroyed_at) VALUES (%s, %s, NULL, %s, %s)")
LIVE_KEYS = ("SELECT subject_ref, generation, wrapped FROM subject_keys "
             "WHERE destroyed_at IS NULL AND wrapped IS NOT NULL ORDER BY subject_ref, generation")
# Every key row, destroyed ones included (their wrapped key NULL): a walk over every sealed blob
# reads the key store once instead of one row per subject (verify's).
ALL_KEYS = "SELECT subject_ref, generation, wrapped FROM subject_keys"
# Every re-wrapping of an epoch rotation in one statement (arrays of refs, generations, keys).
REWRAP_KEYS = ("UPDATE subject_keys k SET wrapped = n.wrapped "
               "FROM unnest(%s::text[], %s::bigint[], %s::bytea[]) AS n(ref, gen, wrapped) "
               "WHERE k.subject_ref = n.ref AND k.generation = n.gen "
               "AND k.destroyed_at IS NULL AND k.wrapped IS NOT NULL")
ADD_MARK = ("INSERT INTO ledger_marks(n, seq, head, at, accepted, mac) "
            "VALUES (%s, %s, %s, %s, %s, %s)")
NEXT_MARK = "SELECT coalesce(max(n), 0) + 1 FROM ledger_marks"
MARKS = ("SELECT n, seq, head, at, accepted, mac FROM ledger_marks WHERE n < %s "
         "ORDER BY n DESC LIMIT 64")
NEWEST_MARK = ("SELECT n, seq, head, at, accepted, mac FROM ledger_marks "
               "ORDER BY n DESC LIMIT 1")
MARK_BY_N = "SELECT n, seq, head, at, accepted, mac FROM ledger_marks WHERE n = %s"
CHANGES = "SELECT n FROM keystore_changes"
# One writer at a time (SQLite's BEGIN IMMEDIATE on the key store file).
LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
META_ALL = "SELECT name, value FROM keystore_meta"
# One round trip: the transaction, its lock, and (under the lock) what its reads usually want
# first (data_version, every meta entry), kept in the transaction's read cache.
BEGIN_WRITE = ("BEGIN ISOLATION LEVEL READ COMMITTED; "
               "SELECT pg_advisory_xact_lock(hashtextextended({}, 0)); " + CHANGES + "; " + META_ALL
               + "; " + NEWEST_MARK)
# The reads a write transaction answers from its cache (the lock keeps every other writer out
# until it ends); any statement of its own that writes forgets them all.
CACHEABLE = frozenset((GET_META, LATEST_KEY, KEY_BY_GEN, LAST_DESTROYED, DESTROYED_AT, CHANGES,
                       MARKS, NEXT_MARK, SUBJECT_KEYS, NEWEST_MARK, LIVE_KEYS))
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


# The key store's write-once triggers (keystore_schema.py): refusing an update, delete or
# truncate of a meta entry, a key (but its destruction) or a mark.
WRITE_ONCE_TRIGGERS = ("keystore_meta_write_once", "subject_keys_destroy_only",
                       "ledger_marks_write_once", "keystore_meta_no_truncate",
                       "subject_keys_no_truncate", "ledger_marks_no_truncate")
ENABLED_TRIGGERS = ("SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = %s AND NOT t.tgisinternal AND t.tgenabled IN ('O', 'A')")


class KeyStoreFile(MarkReads):
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
        # Inside a write transaction: the answers of CACHEABLE reads (None outside one), and
        # the savepoint statements not sent yet (each goes with the next statement: a
        # savepoint nothing ran in costs no round trip).
        self._cache: dict[tuple[str, tuple[object, ...]], list[Any]] | None = None
        self._queued: list[tuple[str, tuple[object, ...]]] = []
        # Every meta entry as the transaction began (None: not known; read from the server).
        self._meta: dict[str, bytes] | None = None

    def _run(self, statement: str, params: tuple[object, ...] = (), *,
             what: str = "a statement") -> Any:
        cache = self._cache
        if cache is not None:
            # (a write's parameters may be lists, which no cache key holds)
            found = cache.get((statement, params)) if statement in CACHEABLE else None
            if found is None and statement == GET_META and self._meta is not None:
                name = str(params[0])
                found = [(self._meta[name],)] if name in self._meta else []
            if found is not None:
                return _Answer(found)
            if statement == NEXT_MARK and (NEWEST_MARK, ()) in cache:
                top = cache[(NEWEST_MARK, ())]  # the newest mark, read under the lock
                return _Answer([(int(top[0][0]) + 1 if top else 1,)])
            if statement not in CACHEABLE:
                self._wrote(statement)
        try:
            if self._queued:
                queued, self._queued = self._queued, []
                done: list[Any] = []
                pipelined(self.conn, [(step, values or None) for step, values in queued],
                          lambda: done.append(self.conn.execute(statement, params)))
                cur = done[0]
            else:
                cur = self.conn.execute(statement, params)
        except psycopg.Error as exc:
            _raise(exc, what)
        if cur.rowcount > 0 and not statement.startswith("SELECT"):
            self._changes += cur.rowcount
        if cache is not None and statement in CACHEABLE:
            rows = cache[(statement, params)] = cur.fetchall()
            return _Answer(rows)
        return cur

    def _wrote(self, statement: str) -> None:
        """This transaction writes: what it read of the table written may be stale. The
        change counter moves by one a writing statement (keystore_schema's statement
        triggers)."""
        cache = self._cache
        if cache is None:
            return
        stale = _STALE.get(statement)
        changes = cache.get((CHANGES, ()))
        for entry in [e for e in cache if stale is None or e[0] in stale]:
            del cache[entry]
        if stale is None or GET_META in stale:
            self._meta = None
        if changes:
            cache[(CHANGES, ())] = [(int(changes[0][0]) + 1,)]

    def _write_later(self, statement: str, params: tuple[object, ...]) -> None:
        """Inside a write transaction, a one-row INSERT whose answer nobody reads goes with
        the next statement: at the latest the end of the savepoint it was made in, or the
        COMMIT (a refusal fails that statement, and the savepoint or transaction is rolled
        back: nothing of it is stored)."""
        self._wrote(statement)
        self._queued.append((statement, params))
        self._changes += 1
        self._dirty = True

    def data_version(self) -> int:
        """A number that changes whenever the key store changes (any connection's commit,
        this one's too: a reader that caches keys drops its cache then, which is safe)."""
        row = self._run(CHANGES).fetchone()
        return 0 if row is None else int(row[0])

    def total_changes(self) -> int:
        """Rows changed through this key store since it opened, rolled back or not."""
        return self._changes

    def missing_triggers(self) -> list[str]:
        """The write-once triggers this key store should have and lacks, or has disabled
        (`ALTER TABLE ... DISABLE TRIGGER`, or enabled for replicas only): without them its
        marks and keys can be deleted or overwritten by any role that may write the tables."""
        have = {str(name) for (name,) in self.conn.execute(ENABLED_TRIGGERS, (self.schema,))}
        return sorted(set(WRITE_ONCE_TRIGGERS) - have)

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

    def _subject_keys(self, subject_ref: str) -> list[KeyRow] | None:
        """Inside a write transaction, every key row of the subject (one read, then cached);
        None outside one (each method reads what it needs)."""
        if self._cache is None:
            return None
        return [_key_row(r) for r in self._run(SUBJECT_KEYS, (subject_ref,)).fetchall()]

    def latest(self, subject_ref: str) -> KeyRow | None:
        rows = self._subject_keys(subject_ref)
        if rows is not None:
            return rows[0] if rows else None
        row = self._run(LATEST_KEY, (subject_ref,)).fetchone()
        return None if row is None else _key_row(row)

    def last_destroyed(self, subject_ref: str) -> str | None:
        """When the subject's latest key destruction happened (any generation), if ever."""
        rows = self._subject_keys(subject_ref)
        if rows is not None:
            # max() of text as the server's (C-collated) max() compares it: by code point;
            # LAST_DESTROYED's rule: a generation a re-key retired is no erasure.
            return max((d[3] for d in rows if d[3] is not None and not any(
                s[0] > d[0] and s[2] <= d[3] and (s[3] is None or s[3] > d[3])
                for s in rows)), default=None)
        row = self._run(LAST_DESTROYED, (subject_ref,)).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def destroyed_at(self, subject_ref: str, at: str) -> bool:
        """Whether a generation of the subject's key was destroyed at `at`."""
        rows = self._subject_keys(subject_ref)
        if rows is not None:
            return any(r[1] is None and r[3] == at for r in rows)
        return self._run(DESTROYED_AT, (subject_ref, at)).fetchone() is not None

    def generation(self, subject_ref: str, generation: int) -> KeyRow | None:
        rows = self._subject_keys(subject_ref)
        if rows is not None:
            return next((r for r in rows if r[0] == generation), None)
        row = self._run(KEY_BY_GEN, (subject_ref, generation)).fetchone()
        return None if row is None else _key_row(row)

    def add(self, subject_ref: str, generation: int, wrapped: bytes, created_at: str) -> None:
        if self._depth:
            self._write_later(INSERT_KEY, (subject_ref, generation, wrapped, created_at))
            return
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

    def live_keys(self) -> list[tuple[str, int, bytes]]:
        """(subject ref, generation, wrapped key) of every key not destroyed."""
        return [(str(r), int(g), bytes(w)) for r, g, w in self._run(LIVE_KEYS).fetchall()]

    def key_rows(self) -> Iterator[tuple[str, int, bytes | None]]:
        """(subject ref, generation, wrapped key or None once destroyed) of every key row."""
        for ref, gen, wrapped in self._run(ALL_KEYS).fetchall():
            yield str(ref), int(gen), None if wrapped is None else bytes(wrapped)

    def rewrap_keys(self, rows: list[tuple[str, int, bytes]]) -> int:
        """Replace the wrapping of each live key (subject ref, generation, new wrapped key), in
        one key store transaction (an epoch rotation's); a destroyed key is never revived."""
        with self.write():
            if not rows:
                return 0
            cur = self._run(REWRAP_KEYS, ([r for r, _, _ in rows], [g for _, g, _ in rows],
                                          [w for _, _, w in rows]), what="re-wrapping keys")
            changed = max(0, int(cur.rowcount))
            self._dirty = self._dirty or changed > 0
            return changed

    def retire(self, subject_ref: str, below: int, destroyed_at: str) -> int:
        """Destroy every live key of the subject older than generation `below` (a re-key's
        end); returns how many. Fences no work: a newer generation lives on."""
        with self.write():
            cur = self._run(RETIRE, (destroyed_at, subject_ref, below), what="a key retirement")
            self._dirty = True
            return max(0, int(cur.rowcount))

    def add_mark(self, seq: int, head: str, at: str, sign: Callable[[MarkRow], str], *,
                 accepted: bool = False, last: MarkRow | None = None) -> MarkRow | None:
        """Record the ledger's head (unless `last`, the trusted mark, is it already); `sign`
        gives the row's MAC (the store knows no key). Returns the row written, if any."""
        with self.write() if not self._depth else nullcontext():
            if accepted or last is None or (last[1], last[2]) != (seq, head):
                next_row = self._run(NEXT_MARK).fetchone()
                assert next_row is not None  # an aggregate answers one row
                n = int(next_row[0])
                row: MarkRow = (n, seq, head, at, accepted, None)
                mac = sign(row)
                self._write_later(ADD_MARK, (n, seq, head, at, int(accepted), mac))
                return (n, seq, head, at, accepted, mac)
        return None

    def newest_mark(self) -> MarkRow | None:
        """The mark row with the highest number, trusted or not (one row read)."""
        found = self._run(NEWEST_MARK).fetchone()
        return None if found is None else mark_row(found)

    def mark(self, n: int) -> MarkRow | None:
        """The mark row numbered `n`, trusted or not, if the key store still holds it."""
        found = self._run(MARK_BY_N, (n,)).fetchone()
        return None if found is None else mark_row(found)

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

    # ---- whole tables (custody-app copy: store.postgres.tables) ----------------------------
    def columns(self, table: str) -> list[str]:
        """The table's column names (StoreError `copy_unknown_table` when it has none)."""
        return list(tables.column_types(self.conn, table))

    def copy_rows(self, table: str, names: list[str],
                  batch: int = tables.BATCH) -> Iterator[list[tuple[Any, ...]]]:
        """The table's rows (columns `names`, in that order) in primary-key order, `batch` at
        a time through a server-side cursor."""
        return tables.read_rows(self.conn, table, names, batch)

    def load_rows(self, table: str, names: list[str], rows: list[tuple[Any, ...]]) -> int:
        """Insert `rows` (columns `names`) by one COPY in one key store transaction (the
        write-once triggers still apply); returns how many."""
        with self.write():
            loaded = tables.load_rows(self.conn, table, names, rows)
            self._dirty = self._dirty or loaded > 0
            self._changes += loaded
            return loaded

    def _roll_back_to(self, name: str) -> None:
        """Roll the savepoint `name` back (what is queued now is dropped with it) and release it."""
        self._queued = [(f"ROLLBACK TO SAVEPOINT {name}", ()), (f"RELEASE SAVEPOINT {name}", ())]
        self._flush()

    def _forget_reads(self) -> None:
        """Forget the write transaction's cached reads (a rolled-back write may have changed
        what they answered)."""
        if self._cache is not None:
            self._cache.clear()
            self._meta = None

    def writing(self) -> bool:
        """Whether a key store transaction (write()) is open."""
        return self._depth > 0

    @contextmanager
    def write(self) -> Iterator[None]:
        """A key store transaction on its own connection (READ COMMITTED, one writer at a time
        through an advisory lock on the key store), a savepoint inside one. With nothing
        changed it rolls back instead of committing. A full disk at its commit is a
        StoreFull, a lock not had within the timeout a StoreBusy; what fails inside the block
        propagates as it is."""
        if self._depth:
            name = sql.Identifier(f"keys_sp{self._depth}").as_string(self.conn)
            if any(values for _, values in self._queued):
                # Writes queued by the enclosing block are its own: sent now, a refusal of
                # one is that block's failure, not this savepoint's.
                self._flush()
            saved = self._dirty
            marker = (f"SAVEPOINT {name}", ())
            self._queued.append(marker)
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                self._dirty = saved
                if marker in self._queued:
                    # Never sent: nothing of the savepoint reached the server; what was queued
                    # inside it is dropped.
                    del self._queued[self._queued.index(marker):]
                else:
                    # Sent (and with it everything queued before it): what is queued now was
                    # queued inside it, and is dropped with its rollback.
                    self._roll_back_to(name)
                self._forget_reads()
                raise
            self._depth -= 1
            if self._queued[-1:] == [marker]:
                self._queued.pop()
            elif any(values for _, values in self._queued):
                # Writes queued inside it are sent now, in its scope: a refusal of one rolls
                # back the savepoint alone, and is this block's failure.
                self._queued.append((f"RELEASE SAVEPOINT {name}", ()))
                try:
                    self._flush()
                except StoreError:
                    self._dirty = saved
                    self._roll_back_to(name)
                    self._forget_reads()
                    raise
            else:
                self._queued.append((f"RELEASE SAVEPOINT {name}", ()))
            return
        self._begin()
        self._depth, self._dirty = 1, False
        try:
            yield
        except BaseException:
            self._depth = 0
            self._end()
            self._quiet_rollback()
            raise
        self._depth = 0
        if not self._dirty:
            self._end()
            self._quiet_rollback()  # nothing to keep
            return
        try:
            self._flush("COMMIT")
        except StoreError:
            self._quiet_rollback()
            raise
        finally:
            self._end()

    def _begin(self) -> None:
        """BEGIN and the lock in one round trip, with the reads that prime the cache."""
        statement = sql.SQL(BEGIN_WRITE).format(sql.Literal(f"custody-keys:{self.schema}"))
        try:
            cur = self.conn.execute(statement)
        except psycopg.Error as exc:
            self._quiet_rollback()
            _raise(exc, "taking the write lock")
        answers = []
        while True:
            if cur.pgresult is not None and cur.pgresult.status == psycopg.pq.ExecStatus.TUPLES_OK:
                answers.append(cur.fetchall())
            if not cur.nextset():
                break
        changes, meta, newest = answers[-3:]
        self._queued = []
        self._cache = {(CHANGES, ()): changes, (NEWEST_MARK, ()): newest}
        self._meta = {str(name): bytes(value) for name, value in meta}

    def _end(self) -> None:
        self._cache = self._meta = None
        self._queued = []

    def _flush(self, then: str | None = None) -> None:
        """Send the queued statements (and `then`) in one round trip: savepoint steps alone
        as one simple query, with queued writes pipelined."""
        steps = self._queued + ([(then, ())] if then else [])
        self._queued = []
        if not steps:
            return
        try:
            if not any(values for _, values in steps):
                self.conn.execute("; ".join(step for step, _ in steps))
                return
            pipelined(self.conn, [(step, values or None) for step, values in steps])
        except psycopg.Error as exc:
            what = "a transaction step"
            if any(step == INSERT_KEY for step, _ in steps):
                what = "a new subject key"
            elif any(step == ADD_MARK for step, _ in steps):
                what = "a ledger mark"
            _raise(exc, what)

    def _quiet_rollback(self) -> None:
        try:
            self.conn.execute("ROLLBACK")
        except psycopg.Error:
            pass  # the connection is gone: the server rolled the transaction back

    def close(self) -> None:
        self.conn.close()


# What a write of the key store makes stale (a statement not named here: everything).
_KEY_READS = frozenset((LATEST_KEY, KEY_BY_GEN, LAST_DESTROYED, SUBJECT_KEYS, LIVE_KEYS,
                        CHANGES))
_MARK_READS = frozenset((MARKS, NEXT_MARK, NEWEST_MARK, CHANGES))
_META_READS = frozenset((GET_META, CHANGES))
_STALE = {INSERT_KEY: _KEY_READS, DESTROY: _KEY_READS, REWRAP_KEYS: _KEY_READS, RETIRE: _KEY_READS,
          INSERT_DESTROYED: _KEY_READS,
          ADD_MARK: _MARK_READS, PUT_META: _META_READS, REPLACE_META: _META_READS,
          DROP_META: _META_READS}


class _Answer:
    """Rows a read of a write transaction got from its cache (or just fetched)."""

    def __init__(self, rows: list[Any]) -> None:
        self._rows = list(rows)

    def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows


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
