"""LedgerFile: one open ledger, its write transactions (savepoints inside), reads, checkpoints
and the stores over its connection (opened by `store.opening.open_ledger`)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import apsw
import apsw.bestpractice

from store.errors import LedgerDamaged, StoreBusy, StoreError, StoreFull
from store.rows import CheckpointOutcome, RewriteOutcome
from store.sqlite.actions import ActionStore
from store.sqlite.browse import BrowseStore
from store.sqlite.checkpointer import Checkpointer
from store.sqlite.damage import damage
from store.sqlite.erasure import ErasureStore
from store.sqlite.events import EventStore
from store.sqlite.gate import gate_for
from store.sqlite.locate import Locator
from store.sqlite.policies import PolicyStore
from store.sqlite.projection import FactStore
from store.sqlite.recall import RecallStore
from store.sqlite.rewrite import Hook, rewrite_file
from store.sqlite.scrub import (
    CHECKPOINT_DELAYS,
    checkpoint_truncate,
    file_size,
    scan_files,
    wal_path,
)
from store.sqlite.sessions import SessionStore
from store.sqlite.tables import BATCH, columns, load_rows, read_rows
from store.sqlite.texts import TextStore

FULL_MESSAGE = ("the disk is full (or the ledger reached its page limit): the write was rolled "
                "back and nothing of it was stored")
SAVEPOINT = "SAVEPOINT {}"
RELEASE = "RELEASE {}"
ROLLBACK_TO = "ROLLBACK TO {}"
# BEGIN IMMEDIATE is retried this many times (with jittered backoff) after the busy timeout.
WRITE_RETRIES = 8


class LedgerFile:
    """An open ledger file: the connection and the statement groups that use it."""

    def __init__(self, conn: apsw.Connection, path: str) -> None:
        self.conn = conn
        self.path = path
        self.events = EventStore(conn)
        self.facts = FactStore(conn)
        self.policies = PolicyStore(conn)
        self.erasure = ErasureStore(conn)
        self.recall = RecallStore(conn)
        self.browse = BrowseStore(conn)
        self.sessions = SessionStore(conn)
        self.locate = Locator(conn, path)
        self.actions = ActionStore(conn)
        self.texts = TextStore(conn)
        self._depth = 0
        # Set when SQLite rolled back the open transaction under a savepoint: why ("disk_full").
        self._aborted: str | None = None
        # WAL checkpoints in a thread of their own instead of inside a COMMIT (a writer's).
        self.checkpointer: Checkpointer | None = None
        # `timer()` when the latest write transaction's COMMIT returned (the write lock is free
        # from then on, before any wait for a checkpoint); a test may give it a clock of its own.
        self.timer: Callable[[], float] = time.perf_counter
        self.committed_at = 0.0
        # The write turns of this process's connections to the file (store.sqlite.gate);
        # `write_priority`: this one (the re-clustering) goes before ordinary writers waiting.
        self.gate = gate_for(path)
        self.write_priority = False

    def damage(self, exc: BaseException) -> LedgerDamaged | None:
        """What a failed read says about the file: damage named by file and seq, else None."""
        return damage(exc, self.path, self.conn)

    def write_first(self) -> None:
        """This connection's write transactions go before the ordinary writers of this
        process waiting with them (the re-clustering's: store.sqlite.gate)."""
        self.write_priority = True

    def claim_turns(self, on: bool) -> None:
        """Keep (on) this priority connection's turns between two of its transactions, or give
        them up (store.sqlite.gate); nothing for an ordinary connection."""
        if self.write_priority:
            self.gate.claim(on)

    def writers_held(self) -> float:
        """Seconds this process's ordinary writers have held the file's write lock so far, as
        seen by the re-clustering's connection; 0 on an ordinary one (its own turns count)."""
        return self.gate.ordinary_held if self.write_priority else 0.0

    def checkpoint_in_background(self) -> None:
        """Take the automatic WAL checkpoint off this connection's commits (store.checkpointer)."""
        if self.checkpointer is None:
            self.checkpointer = Checkpointer(self.path)
            self.checkpointer.install(self.conn)

    @contextmanager
    def _no_pass(self) -> Iterator[None]:
        """No background checkpoint runs inside this block (it waits for one running)."""
        if self.checkpointer is None:
            yield
            return
        with self.checkpointer.lock:
            yield

    @property
    def depth(self) -> int:
        """0 outside a transaction, 1 in the outermost write, more inside savepoints."""
        return self._depth

    @property
    def sqlite_vec_version(self) -> str:
        row = self.conn.execute("SELECT vec_version()").fetchone()
        return str(row[0]) if row else ""

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM ledger_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put_meta(self, key: str, value: str | None) -> None:
        """Set a ledger_meta entry (None: remove it), in a transaction of its own or the
        caller's."""
        with self.write():
            if value is None:
                self.conn.execute("DELETE FROM ledger_meta WHERE key = ?", (key,))
            else:
                self.conn.execute("INSERT OR REPLACE INTO ledger_meta(key, value) VALUES (?, ?)",
                                  (key, value))

    # ---- whole tables (custody-app copy: store.sqlite.tables) ------------------------------
    def columns(self, table: str) -> list[str]:
        """The table's column names (StoreError `copy_unknown_table` when it has none)."""
        return columns(self.conn, table)

    def copy_rows(self, table: str, names: list[str],
                  batch: int = BATCH) -> Iterator[list[tuple[Any, ...]]]:
        """The table's rows (columns `names`, in that order) in primary-key order, `batch` at
        a time; read inside the caller's transaction for one consistent snapshot."""
        return read_rows(self.conn, table, names, batch)

    def load_rows(self, table: str, names: list[str], rows: list[tuple[Any, ...]]) -> int:
        """Insert `rows` (columns `names`) in one transaction (every trigger still applies);
        returns how many."""
        with self.write():
            return load_rows(self.conn, table, names, rows)

    def expect_subject(self, subject: str, predicate: str | None,
                       subject_ref: str | None) -> None:
        """Nothing to do: a file ledger's reads cost no round trip (a server ledger reads the
        subject's rows with its next write transaction's first one)."""

    def use_subject_codec(self, codec: Any) -> None:
        """Nothing to do: a file ledger keeps each subject id in its rows, and erasure rewrites
        the file (a server ledger seals them: store.postgres.subjects)."""

    def reseal_subject(self, subject_ref: str, again: Callable[[bytes], bytes | None]) -> int:
        """0: a file ledger holds no sealed subject ids to re-seal."""
        return 0

    def seal_subject_ids(self) -> int:
        """0: a file ledger seals no subject ids."""
        return 0

    @contextmanager
    def write(self) -> Iterator[None]:
        """One write transaction (BEGIN IMMEDIATE), or a savepoint when already inside one.
        A full disk is a StoreFull (`disk_full`), and what the block wrote is rolled back. When
        SQLite rolls back the whole transaction under a savepoint (it can, on a full disk),
        every later savepoint of it and its end raise too, so nothing claims to be stored.
        Before it begins, a background pass over a WAL of CAP pages or more is waited for
        (`Checkpointer.before_write`): the commit never waits for one."""
        if self._depth:
            if self._aborted is not None:
                raise self._aborted_error()
            name = f"custody_sp{self._depth}"
            self.conn.execute(SAVEPOINT.format(name))
            self._depth += 1
            try:
                yield
            except BaseException as exc:
                full = _is_full(exc) or isinstance(exc, StoreFull)
                self._undo_savepoint(name, full)
                if isinstance(exc, apsw.Error) and full:
                    raise StoreFull(FULL_MESSAGE) from exc
                raise
            else:
                try:
                    self.conn.execute(RELEASE.format(name))
                except apsw.Error as exc:
                    self._undo_savepoint(name, _is_full(exc))
                    raise self._aborted_error() if self._aborted else StoreError(
                        f"savepoint release failed: {exc}") from exc
            finally:
                self._depth -= 1
            return
        if self.checkpointer is not None:
            self.checkpointer.before_write()
        turn = self.gate.enter(priority=self.write_priority)  # this process's writers in turn
        try:
            begin_immediate(self.conn)
            self._depth = 1
            self._aborted = None
            try:
                yield
            except BaseException as exc:
                self._depth = 0
                self._aborted = None
                self._rollback()
                if isinstance(exc, apsw.Error) and _is_full(exc):
                    raise StoreFull(FULL_MESSAGE) from exc
                raise
            try:
                if self._aborted is not None or not self.conn.in_transaction:
                    raise self._aborted_error()
                self.conn.execute("COMMIT")
                self.committed_at = self.timer()
            except apsw.Error as exc:
                self._rollback()
                if _is_full(exc):
                    raise StoreFull(FULL_MESSAGE) from exc
                raise StoreError(f"commit failed: {exc}") from exc
            finally:
                self._depth = 0
                self._aborted = None
        finally:
            if turn:
                self.gate.leave()

    def _undo_savepoint(self, name: str, full: bool) -> None:
        """Roll a failed savepoint back; if SQLite already rolled back the whole transaction,
        remember that so the rest of it fails too."""
        try:
            if self.conn.in_transaction:
                self.conn.execute(ROLLBACK_TO.format(name))
                self.conn.execute(RELEASE.format(name))
                return
        except apsw.Error:
            pass
        self._aborted = "disk_full" if full else "store_error"

    def _aborted_error(self) -> StoreError:
        if self._aborted == "disk_full":
            return StoreFull(FULL_MESSAGE + " (with the rest of its transaction)")
        return StoreError("the transaction was rolled back by SQLite before its commit")

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    @contextmanager
    def read(self) -> Iterator[None]:
        """A consistent snapshot for several reads (a deferred transaction)."""
        if self._depth:
            yield
            return
        self.conn.execute("BEGIN")
        self._depth = 1
        try:
            yield
        finally:
            self._depth = 0
            self.conn.execute("COMMIT")

    def limit_mmap(self, nbytes: int) -> None:
        """Map at most `nbytes` of the file: every mapped page a process touched stays in its
        RSS, so a long writer (a batch, the background re-clustering) reads through the page
        cache instead and its RSS stays flat however large the ledger grows."""
        self.conn.pragma("mmap_size", int(nbytes))

    def wal_checkpoint(self, *, wait: bool = True) -> CheckpointOutcome:
        """A truncating WAL checkpoint (outside any transaction), retried while readers block
        it unless `wait` is false (one attempt)."""
        with self._no_pass():
            outcome = checkpoint_truncate(self.conn, self.path,
                                          CHECKPOINT_DELAYS if wait else (0.0,))
        if outcome.complete and self.checkpointer is not None:
            self.checkpointer.frames = 0  # the WAL is empty: the next write has nothing to wait for
        return outcome

    def rewrite(self, *, wait: bool = True, during: Hook | None = None,
                vacuumed: Hook | None = None) -> RewriteOutcome:
        """Rewrite the file from its live rows (VACUUM) and checkpoint it (outside any
        transaction): no byte of a freed or rebuilt page survives in the database file.
        `during` / `vacuumed`: called while the VACUUM runs and after it (crash trials)."""
        with self._no_pass():
            return rewrite_file(self.conn, self.path, CHECKPOINT_DELAYS if wait else (0.0,),
                                during=during, vacuumed=vacuumed)

    def scan(self, needles: list[bytes]) -> dict[str, list[int]]:
        """Which of `needles` each of the ledger's files still contains."""
        return scan_files(self.files(), needles)

    def files(self) -> list[str]:
        """The files that hold this ledger's bytes: the database and its WAL."""
        return [self.path, wal_path(self.path)]

    def places_beyond_scan(self, needles: list[bytes]) -> list[tuple[str, str, str]]:
        """Where this ledger's erased bytes could stay that `scan` does not read: none (the
        database file and its WAL are scanned; backups and copies are listed by the
        certificate as what erasure cannot reach)."""
        return []

    def stored_bytes(self) -> tuple[int, int]:
        """(the database file's bytes, its WAL's)."""
        return file_size(self.path), file_size(wal_path(self.path))

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.close()
        self.conn.close()


def _is_full(exc: BaseException | None) -> bool:
    """A full disk, even when a failed savepoint release raised over it."""
    while exc is not None:
        if isinstance(exc, apsw.FullError):
            return True
        exc = exc.__context__
    return False


def begin_immediate(conn: apsw.Connection) -> None:
    """BEGIN IMMEDIATE, retried with backoff while another writer holds the lock."""
    for attempt in range(WRITE_RETRIES + 1):
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except apsw.BusyError as exc:
            if attempt == WRITE_RETRIES:
                raise StoreBusy(
                    "the ledger is locked by another writer; gave up after "
                    f"{WRITE_RETRIES} retries"
                ) from exc
            time.sleep(min(2.0, 0.02 * 2**attempt) * (0.5 + random.random()))
