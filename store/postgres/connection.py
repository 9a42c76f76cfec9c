"""LedgerFile on PostgreSQL: one server connection (autocommit outside transactions), its write
transactions (READ COMMITTED, the ledger's advisory lock first; savepoints inside), its reads
(one REPEATABLE READ snapshot) and the stores over it (opened by
`store.postgres.opening.open_ledger`). The same public surface as store.sqlite.connection's;
what only a file has (a WAL, mmap, byte scans, VACUUM into a new file) has an honest server
meaning here, said on each method."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from store.errors import LedgerDamaged, StoreError
from store.postgres import residue
from store.postgres.damage import damage
from store.postgres.erasure import LAST_TOMBSTONE
from store.postgres.events import EventStore
from store.postgres.failures import flush_queued, forget_queued, later, translated
from store.postgres.locate import Locator
from store.postgres.projection import ACTIVE_OF_KEY
from store.postgres.readcache import PRIME, ReadCache
from store.postgres.subjects import PUT as SUBJECT_PUT
from store.postgres.subjects import (
    SubjectNames,
    named_rows,
    reseal,
    seal_existing,
    stored,
    stored_values,
)
from store.postgres.tables import BATCH, column_types, load_rows, read_rows
from store.rows import CheckpointOutcome, RewriteOutcome

# How long a write waits for another writer's lock before it is a StoreBusy (as SQLite's
# busy timeout, store.sqlite.opening.BUSY_TIMEOUT_MS).
BUSY_TIMEOUT_MS = 5000
SAVEPOINT = "SAVEPOINT {}"
RELEASE = "RELEASE SAVEPOINT {}"
ROLLBACK_TO = "ROLLBACK TO SAVEPOINT {}"
# One round trip: the transaction, its lock wait bound, the ledger's lock, and then (under the
# lock) what every write reads first: the head, the last recorded policy and ledger_meta
# (store.postgres.readcache.PRIME, answered from the cache afterwards). Every writer takes the
# lock before it reads the head, so appends are serialized across machines.
BEGIN_WRITE = ("BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '{ms}ms'; "
               "SELECT pg_advisory_xact_lock({key}); " + "; ".join(PRIME))
BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
NO_FILE_WAL = ("a server ledger has no WAL file of its own to checkpoint: complete (the "
               "server's WAL, archives and replicas are beyond this check)")
Hook = Callable[[], None]


class _SubStore:
    """A store over the connection made at first use from `store.postgres.<module>.<cls>`, so a
    statement group not written yet fails only where it is used (StoreError
    `postgres_unsupported`), not at open."""

    def __init__(self, module: str, cls: str) -> None:
        self.module, self.cls = module, cls
        self.name = cls

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: LedgerFile | None, owner: type) -> Any:
        if obj is None:
            return self
        try:
            module = importlib.import_module(f"store.postgres.{self.module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"store.postgres.{self.module}":
                raise
            raise StoreError(f"the {self.name} of a PostgreSQL ledger is not built yet "
                             f"(store/postgres/{self.module}.py)", "postgres_unsupported") from None
        store = getattr(module, self.cls)(obj.conn)
        obj.__dict__[self.name] = store  # later reads find it on the object itself
        return store


# The tables whose `subject` column holds a subject's stored form (store.postgres.subjects).
SUBJECT_TABLES = ("events", "facts")
STORED_BYTES = ("SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind = 'r'")

class LedgerFile:
    """An open ledger on a PostgreSQL server: the connection and the statement groups over it.
    `path` is the ledger's address without any password."""

    facts = _SubStore("projection", "FactStore")
    policies = _SubStore("policies", "PolicyStore")
    erasure = _SubStore("erasure", "ErasureStore")
    recall = _SubStore("recall", "RecallStore")
    browse = _SubStore("browse", "BrowseStore")
    sessions = _SubStore("sessions", "SessionStore")
    actions = _SubStore("actions", "ActionStore")
    texts = _SubStore("texts", "TextStore")

    def __init__(self, conn: psycopg.Connection[Any], path: str, *, schema: str = "custody",
                 lock_key: int = 0) -> None:
        self.conn = conn
        self.path = path
        self.schema = schema
        self.lock_key = lock_key
        self.busy_timeout_ms = BUSY_TIMEOUT_MS
        # The write transactions' read cache (store.postgres.readcache), beside the
        # connection where its cursors find it.
        self.cache = ReadCache()
        if hasattr(conn, "read_cache"):
            conn.read_cache = self.cache
        # Subject ids in and out of their sealed form (store.postgres.subjects), beside the
        # connection where every statement group finds them.
        self.subject_names = SubjectNames(conn)
        if hasattr(conn, "subject_names"):
            conn.subject_names = self.subject_names
        self.events = EventStore(conn)
        self.locate = Locator(conn, path)
        self._depth = 0
        # Reads the next write transaction makes first (expect_subject), sent with its BEGIN.
        self._expected: list[tuple[str, tuple[Any, ...]]] = []
        # No background checkpointer on a server (the SQLite attribute, always None here).
        self.checkpointer: None = None
        self.timer: Callable[[], float] = time.perf_counter
        self.committed_at = 0.0

    def damage(self, exc: BaseException) -> LedgerDamaged | None:
        """What a failed read says about the ledger: damage the server reported, else None."""
        return damage(exc, self.path)

    def checkpoint_in_background(self) -> None:
        """Nothing to do: the server checkpoints its own WAL."""

    def write_first(self) -> None:
        """Nothing to do: the server queues its writers itself (the advisory lock)."""

    def claim_turns(self, on: bool) -> None:
        """Nothing to do: the server queues its writers itself."""

    def writers_held(self) -> float:
        """0: not counted on a server (the re-clustering then rests after every turn)."""
        return 0.0

    @property
    def depth(self) -> int:
        """0 outside a transaction, 1 in the outermost write or read, more inside savepoints."""
        return self._depth

    @property
    def sqlite_vec_version(self) -> str:
        """'' : a server ledger loads no sqlite-vec (its vectors are pgvector's:
        store.postgres.health.pgvector)."""
        return ""

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM ledger_meta WHERE key = %s", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put_meta(self, key: str, value: str | None) -> None:
        """Set a ledger_meta entry (None: remove it), in a transaction of its own or the
        caller's."""
        with self.write():
            if value is None:
                self.conn.execute("DELETE FROM ledger_meta WHERE key = %s", (key,))
            else:
                self.conn.execute("INSERT INTO ledger_meta(key, value) VALUES (%s, %s) "
                                  "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                                  (key, value))

    # ---- whole tables (custody-app copy: store.postgres.tables) ----------------------------
    def columns(self, table: str) -> list[str]:
        """The table's column names (StoreError `copy_unknown_table` when it has none)."""
        return list(column_types(self.conn, table))

    def copy_rows(self, table: str, names: list[str],
                  batch: int = BATCH) -> Iterator[list[tuple[Any, ...]]]:
        """The table's rows (columns `names`, in that order) in primary-key order, `batch` at
        a time through a server-side cursor; read inside the caller's transaction for one
        consistent view."""
        rows = read_rows(self.conn, table, names, batch)
        if table not in SUBJECT_TABLES or "subject" not in names:
            return rows
        at = names.index("subject")
        return (named_rows(self.conn, part, at) for part in rows)  # each subject by its id

    def load_rows(self, table: str, names: list[str], rows: list[tuple[Any, ...]]) -> int:
        """Insert `rows` (columns `names`) by one COPY in one transaction (every trigger
        still applies); returns how many."""
        with self.write():
            if table in SUBJECT_TABLES and "subject" in names:
                rows = self._sealed_rows(table, names, rows)
            return load_rows(self.conn, table, names, rows)

    def _sealed_rows(self, table: str, names: list[str],
                     rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Rows of another ledger's events or facts as this one stores them: each subject by
        its ref, an assert's id sealed into `subjects` beside its sealed value."""
        at = names.index("subject")
        value = names.index("value") if "value" in names else None
        sealed: dict[str, bytes] = {}
        for row in rows:
            subject = row[at]
            if (subject is not None and table == "events" and self.subject_names.sealed
                    and not str(subject).startswith("erased:")):
                ref, blob = self.subject_names.seal(str(subject),
                                                    None if value is None else row[value])
                sealed.setdefault(ref, blob)
        if sealed:
            with self.conn.cursor() as cur:
                cur.executemany(SUBJECT_PUT, sorted(sealed.items()))
        return [stored_values(self.conn, row, at) for row in rows]

    def _run(self, statement: str) -> None:
        self.conn.execute(statement)

    def _status(self) -> TransactionStatus:
        return self.conn.info.transaction_status

    def expect_subject(self, subject: str, predicate: str | None,
                       subject_ref: str | None) -> None:
        """The next write transaction (an outermost one; inside one this does nothing) will
        read the subject's active facts of `predicate` (None: not) and the latest tombstone
        of `subject_ref` (None: not): they are read in its first round trip, under the lock,
        and answered from its read cache (store.postgres.readcache) until it writes them."""
        if self._depth:
            return
        self._expected = ([(ACTIVE_OF_KEY, (stored(self.conn, subject), predicate))]
                          if predicate is not None else [])
        if subject_ref is not None:
            self._expected.append((LAST_TOMBSTONE, (subject_ref,)))

    # ---- subject ids (issue 34: sealed on a server, store.postgres.subjects) --------------
    def use_subject_codec(self, codec: Any) -> None:
        """The layer above's codec (store.port.SubjectCodec): the subject columns hold each
        subject's ref and `subjects` its id sealed under its data key; reads give the id."""
        self.subject_names.attach(codec)

    def reseal_subject(self, subject_ref: str, again: Callable[[bytes], bytes | None]) -> int:
        """A re-key's re-seal of the subject's sealed id (`again`: the blob under the new
        generation, None to leave it), inside the erasure's transaction; 1 when re-sealed."""
        return reseal(self.conn, subject_ref, again)

    def seal_subject_ids(self) -> int:
        """A ledger made before its subject ids were sealed has them sealed now, in one write
        transaction (a read-write open's roll-forward); how many subjects were (0: sealed
        already, no transaction)."""
        if self.subject_names.sealed:
            return 0
        with self.write():
            self.subject_names.attach(self.subject_names.codec)  # the mode, read under the lock
            return seal_existing(self.conn)

    @contextmanager
    def write(self) -> Iterator[None]:
        """One write transaction (READ COMMITTED, after the ledger's advisory lock, waiting at
        most `busy_timeout_ms` for it: then StoreBusy), or a savepoint when already inside
        one. A block that fails rolls back what it wrote (to its savepoint when nested); a
        transaction the server aborted (a statement failed and the failure was caught inside
        the block) is rolled back and its end raises, so nothing claims to be stored."""
        if self._depth:
            if self._status() == TransactionStatus.INERROR:
                raise StoreError("the transaction was aborted by the server before this savepoint")
            name = f"custody_sp{self._depth}"
            # Sent with the savepoint's first statement (none: never sent, nothing to undo).
            later(self.conn, SAVEPOINT.format(name), None)
            self._depth += 1
            try:
                yield
            except BaseException as exc:
                self._undo_savepoint(name)
                if isinstance(exc, psycopg.Error):
                    raise translated(exc) from exc
                raise
            else:
                queued = getattr(self.conn, "queued", None) or []
                if queued[-1:] == [(SAVEPOINT.format(name), None)]:
                    queued.pop()  # nothing ran inside: no savepoint to send or release
                    return
                try:
                    if queued:
                        flush_queued(self.conn)  # the savepoint's queued writes, in its scope
                except StoreError:
                    self._undo_savepoint(name)
                    raise
                if self._status() == TransactionStatus.INERROR:
                    self._undo_savepoint(name)
                    raise StoreError("a statement of this savepoint failed on the server: "
                                     "what it wrote was rolled back")
                later(self.conn, RELEASE.format(name), None)  # with the next statement
            finally:
                self._depth -= 1
            return
        try:
            self._begin_write()
        except BaseException:
            self._rollback()
            raise
        self._depth = 1
        try:
            yield
        except BaseException as exc:
            self._depth = 0
            self.cache.stop()
            self._rollback()
            if isinstance(exc, psycopg.Error):
                raise translated(exc) from exc
            raise
        try:
            if self._status() != TransactionStatus.INTRANS:
                raise StoreError("the transaction was aborted by the server before its commit: "
                                 "nothing of it was stored")
            self.cache.stop()
            self._run("COMMIT")
            self.committed_at = self.timer()
        except StoreError:
            self._rollback()
            raise
        finally:
            self.cache.stop()
            self._depth = 0

    def _begin_write(self) -> None:
        """BEGIN, the lock, and the reads of PRIME in one round trip; their answers prime the
        transaction's read cache."""
        expected, self._expected = self._expected, []
        statement = BEGIN_WRITE.format(ms=int(self.busy_timeout_ms), key=int(self.lock_key))
        if expected:
            # Bound here (literals, as the server would bind them): one simple query still.
            bind = psycopg.ClientCursor(self.conn)
            statement = "; ".join([statement] + [bind.mogrify(q, p) for q, p in expected])
        cur = self.conn.execute(statement)
        answers: list[list[Any]] = []
        while True:
            if cur.pgresult is not None and cur.pgresult.status == psycopg.pq.ExecStatus.TUPLES_OK:
                answers.append(cur.fetchall())
            if not cur.nextset():
                break
        # The lock's row, then PRIME's answers, then the expected reads'.
        head, policy, meta = answers[1:4]
        self.cache.start(head, policy, meta)
        for (query, params), rows in zip(expected, answers[4:], strict=True):
            self.cache.put(query, params, rows)

    def _undo_savepoint(self, name: str) -> None:
        """Roll a failed savepoint back (what it wrote is gone, the transaction goes on)."""
        self.cache.forget()
        queued = getattr(self.conn, "queued", None) or []
        marker = (SAVEPOINT.format(name), None)
        if marker in queued:
            # Never sent: nothing of the savepoint reached the server; what was queued inside
            # it is dropped, what was queued before it (a sibling's release) stays.
            del queued[len(queued) - 1 - queued[::-1].index(marker):]
            return
        forget_queued(self.conn)
        try:
            self._run(ROLLBACK_TO.format(name))
            self._run(RELEASE.format(name))
        except StoreError:
            pass  # the connection is gone: the outer transaction's end reports it

    def _rollback(self) -> None:
        forget_queued(self.conn)
        if self._status() in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            try:
                self._run("ROLLBACK")
            except StoreError:
                pass

    @contextmanager
    def read(self) -> Iterator[None]:
        """A consistent snapshot for several reads (REPEATABLE READ, READ ONLY)."""
        if self._depth:
            yield
            return
        self._run(BEGIN_READ)
        self._depth = 1
        try:
            yield
        except BaseException as exc:
            self._depth = 0
            self._rollback()
            if isinstance(exc, psycopg.Error):
                raise translated(exc) from exc
            raise
        self._depth = 0
        if self._status() == TransactionStatus.INTRANS:
            self._run("COMMIT")
        else:
            self._rollback()

    def limit_mmap(self, nbytes: int) -> None:
        """Nothing to do: the server's memory is its own (the client maps no file)."""

    def wal_checkpoint(self, *, wait: bool = True) -> CheckpointOutcome:
        """Complete at once: there is no WAL file of the ledger's own to empty (what the
        server's WAL holds after an erasure is a place of its certificate: places_beyond_scan)."""
        return CheckpointOutcome(True, 1, 0, NO_FILE_WAL)

    def rewrite(self, *, wait: bool = True, during: Hook | None = None,
                vacuumed: Hook | None = None) -> RewriteOutcome:
        """VACUUM FULL of the ledger's tables (each rewritten from its live rows, indexes and
        TOAST with it), when no transaction older than the pending erasure could still read
        the rows it replaced (VACUUM FULL would have to copy them); otherwise not done.
        Outside any transaction only. `wait`, `during`: unused here; `vacuumed` is called after
        it."""
        if self._depth:
            return RewriteOutcome(False, 0, 0, "not done: inside a transaction")
        held = residue.old_snapshots(self.conn, residue.horizon(
            self.conn, self.meta(residue.HORIZON)))
        if held:
            return RewriteOutcome(False, 0, 0, "not done: a transaction older than the erasure "
                                  f"may still read the old row versions ({held[0]})")
        before = self.stored_bytes()[0]
        tables, refused = residue.maintainable(self.conn, self.schema)
        if refused:
            return RewriteOutcome(False, before, before, "not done: the role may not VACUUM "
                                  f"{', '.join(refused[:5])}")
        try:
            residue.vacuum(self.conn, self.schema, [name for _oid, name in tables], full=True,
                           lock_timeout_ms=self.busy_timeout_ms)
        except residue.LOCK_WAIT:
            return RewriteOutcome(False, before, before, "not done: VACUUM FULL could not take "
                                  "its lock (another session is using a table)")
        if vacuumed is not None:
            vacuumed()
        after = self.stored_bytes()[0]
        return RewriteOutcome(True, before, after, f"VACUUM FULL of the ledger's {len(tables)} "
                              f"table(s): {before} -> {after} bytes")

    def scan(self, needles: list[bytes]) -> dict[str, list[int]]:
        """Nothing to scan: a server ledger has no file this process may read (an erasure
        certificate on a server must say so, not claim a clean scan)."""
        return {}

    def files(self) -> list[str]:
        """None: the ledger's bytes are in the server's files, out of this process's reach."""
        return []

    def places_beyond_scan(self, needles: list[bytes]) -> list[tuple[str, str, str]]:
        """The server's own places for an erasure whose transaction committed, each (place,
        outcome, detail) (store.postgres.residue): transactions older than the erasure that
        may still read the old row versions (`pending`, named), and those old versions
        (VACUUM, then the raw pages searched for `needles`: `clean`, `found` with where, or
        `unverifiable` with why). The WAL and the copies made from it are the epoch's place
        (custody_app.erasure.epoch): crypto-erased once the epoch that wrapped the destroyed
        keys is destroyed, pending until then."""
        return residue.server_places(self.conn, self.schema, needles, self.meta(residue.HORIZON),
                                     in_transaction=self._depth > 0,
                                     lock_timeout_ms=self.busy_timeout_ms)

    def stored_bytes(self) -> tuple[int, int]:
        """(the bytes the ledger's tables take on the server, indexes and TOAST included; 0:
        the server's WAL is shared by every database, none of it this ledger's alone)."""
        row = self.conn.execute(STORED_BYTES, (self.schema,)).fetchone()
        return int(row[0] if row and row[0] is not None else 0), 0

    def close(self) -> None:
        self.conn.close()
