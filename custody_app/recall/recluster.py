"""Re-clustering the vector cells off the write path: on a connection of its own, k-means on a
sample read outside any transaction, then the vectors moved to their new cells, old cell by old
cell, in write transactions bounded in rows and in time. This process's writers take turns with it
at the lock (store.sqlite.gate), its turn first; after a turn it rests as long as it held the
lock, unless the writers held it long since its last turn (groups), when it may take a share of
that time in further turns at once: so it keeps pace with a writer writing back to back, and a
single write waits behind at most one of its transactions (CREDIT_CAP_S of them after a group)."""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from custody_app.domain.policy import LoadedPolicy
from custody_app.keys.keyring import INDEX_KEY_ID
from custody_app.keys.vectors import VectorCipher
from custody_app.recall.background import BackgroundThread
from custody_app.recall.cells import MIN_CELLS, SAMPLE, Matrix, kmeans, regrow_due
from custody_app.recall.heap import give_back_freed_heap
from custody_app.recall.txbudget import CommitCost, within
from store import LedgerFile, open_ledger

# Most vectors moved per write transaction, the only time the re-clustering holds the write
# lock (their vectors are read before it): at 100k facts under a load of 8 on this 2-core machine,
# batches of 500 that also read the vectors inside held it ~4 s.
BATCH = 50
# And at most this long, its COMMIT included: a transaction stops before the row that would
# take it past BUDGET_S, counting the rows so far, the next row at their mean cost and the
# COMMIT estimated for them (at least one row a transaction). A batch of 50 held it up to 3.7 s
# at 100k under load; this keeps it under one ordinary write. A COMMIT writes out two kinds of
# pages: those of the chunks the moved rows were taken from and put in (about 0.01-0.04 ms a
# row), and the whole of every chunk sqlite-vec made for a cell with no room left (256 vectors,
# 0.1-0.5 ms each here). The first transactions make a chunk for most new cells, which an
# estimate by the row alone missed (holds up to 29-30 ms against this budget in session 13's
# bench_recluster runs): the two are learnt apart (bench/results_recluster.md).
BUDGET_S = 0.025
# The estimate's error seen here (a COMMIT dearer than estimated by up to a millisecond or so,
# a row dearer than the mean: `bench_recluster.py --longest`), kept free under the budget.
LEEWAY_S = 0.002
# After each commit the lock is left free a little longer than the transaction held it: a
# writer waiting in SQLite's busy handler retries only after 1, 3, 8, 18, 33, 53 ms... of waiting,
# and transactions back to back, however short each, kept one out up to its 5 s busy timeout here.
PAUSE_EXTRA_S = 0.002
# The re-clustering may hold the lock up to this share of the time the process's writers held it
# (the rest after each turn aside): moving a vector held it ~0.15 ms quiet (~0.4 ms at a load of
# 10), writing a fact in a group ~1.5-2 ms, and with REGROW 3 it must move a vector for every two
# facts written; at most CREDIT_CAP_S of turns back to back, the longest a writer then waits
# behind it (a quarter of a 1,000-op group's time on this machine).
SHARE = 0.5
CREDIT_CAP_S = 0.5
Progress = Callable[[int, int], None]


def recluster(db: LedgerFile, policy: LoadedPolicy, *, batch: int = BATCH,
              budget_s: float | None = BUDGET_S,
              progress: Progress | None = None,
              stop: threading.Event | None = None,
              held_ms: list[float] | None = None,
              seal: VectorCipher | None = None) -> int:
    """Re-cluster the cells of the ledger open as `db` (a connection no one else writes
    through), reporting (moved, total) after each write transaction; resumes a re-clustering
    that was interrupted. Each transaction moves up to `batch` vectors and stops before the row
    it expects to take it past `budget_s` (None: no time limit). Returns the number of cells, or 0 when
    stopped before the end (it resumes next time). `held_ms` collects how long each of its
    write transactions held the write lock. `seal`: the cipher of a server's sealed vectors
    (installed on `db` here); the re-clustering stops before it would seal new centroids under
    a word index key another process has rotated away meanwhile."""
    if seal is not None:
        db.recall.seal_vectors(seal)
    moving = db.recall.moving_below()
    sized_on = 0  # the vectors the new cells were sized and trained on (0: resumed, unknown)
    if not moving:
        with db.read():
            where = db.recall.vector_seqs()
            clustered = db.recall.clustered_on()
            cells_now = len(db.recall.cells())
        sized_on = len(where)
        # Checked here, not only by the caller: a second process's `due` is stale once another
        # connection has re-clustered (it would begin a needless third set of cells).
        if not regrow_due(len(where), clustered, policy.policy.recall.ann_min_facts, cells_now):
            return 0
        rng = random.Random(len(where))
        picked = rng.sample(where, min(SAMPLE, len(where)))
        read: list[bytes] = []
        for i in range(0, len(picked), 2000):  # point reads, seconds at 20k: stoppable
            if stop is not None and stop.is_set():
                return 0
            with db.read():
                read += [b for _, b in db.recall.vectors_of(picked[i:i + 2000])]
        sample = np.stack([np.frombuffer(b, dtype=np.float32) for b in read])
        cells = min(len(where), max(MIN_CELLS, round(math.sqrt(len(where)))))
        # The vectors read (20 MB at 256 dimensions) live on in `sample`; the seqs are not
        # needed again. Dropped before k-means, which runs for seconds beside the writer.
        del read, picked, where
        centroids = kmeans(sample, cells, stop=stop)  # outside any transaction: no lock held
        del sample
        if centroids is None:
            return 0  # stopped (a close): nothing was changed
        with db.write():
            # Another connection may have begun its own meanwhile: resume that one instead of
            # layering a second set of cells over it (each would think the other a rebuild).
            moving = db.recall.moving_below()
            if not moving and db.recall.clustered_on() != clustered:
                return 0  # another connection re-clustered meanwhile: not due any more
            if not moving and seal is not None and db.meta(INDEX_KEY_ID) not in (None,
                                                                                seal.key_id()):
                return 0  # the index key was rotated meanwhile: the next run uses the new one
            if not moving:
                moving = max((c for c, _ in db.recall.cells()), default=0) + 1
                db.recall.begin_moving(moving, [c.tobytes() for c in centroids])
    with db.read():
        rows = db.recall.cells()
        # Every vector in an old cell now; later writes already go to the new cells.
        seqs, olds = db.recall.vector_seqs_by_cell(moving)
    # In (old cell, seq) order: the deletes of a transaction then fall in one cell's chunks,
    # mostly the same few, instead of one chunk per row all over the table.
    order = np.asarray(seqs, dtype=np.int64)
    todo = order[np.lexsort((order, np.asarray(olds, dtype=np.int64)))]
    del seqs, olds, order
    new = [(c, np.frombuffer(b, dtype=np.float32)) for c, b in rows if c >= moving]
    ids = np.asarray([c for c, _ in new], dtype=np.int64)
    matrix: Matrix = np.stack([v for _, v in new])

    def cell_of(vector: bytes) -> int:
        return int(ids[int(np.argmax(matrix @ np.frombuffer(vector, dtype=np.float32)))])

    commit = CommitCost()
    credit, writers_seen = 0.0, db.writers_held()
    window: list[tuple[int, bytes]] = []  # read, not yet moved
    taken = 0  # entries of todo read so far
    claimed = False  # this thread keeps its turns (a run of them within its credit)
    try:
        while taken < len(todo) or window:
            if stop is not None and stop.is_set():
                return 0
            if len(window) < batch and taken < len(todo):
                take = todo[taken:taken + batch - len(window)].tolist()
                with db.read():  # outside the write lock: a fact's vector does not change
                    window += db.recall.vectors_of(take)
                taken += len(take)
            if not window:
                continue  # all of those were removed meanwhile (forgotten, superseded)
            with db.write():
                began = db.timer()  # the lock is held from here (not while waiting for it)
                enough = (None if budget_s is None else
                          within(db.timer, began, began + budget_s - LEEWAY_S, commit))
                if db.recall.moving_below() != moving:
                    return 0  # the index was rebuilt meanwhile (a reindex): nothing left to move
                used, made = db.recall.move(window, cell_of, moving, enough)
                moved = db.timer()
            held = db.committed_at - began
            commit.learn(used, made, max(0.0, db.committed_at - moved))
            if held_ms is not None:  # through COMMIT
                held_ms.append(held * 1000)
            window = window[used:]
            if progress is not None:
                progress(taken - len(window), len(todo))
            # A share of the time this process's writers held the lock since the last turn may be
            # taken at once in further turns (a writer of 1,000-op groups held it ~1.5 s a group,
            # and one turn after each moved 50 vectors a group: the move never ended); past that
            # share, rest, the lock free for a waiting writer.
            writers = db.writers_held()
            credit = min(CREDIT_CAP_S, credit + SHARE * (writers - writers_seen) - held)
            writers_seen = writers
            if credit <= 0:
                credit = 0.0
                if claimed:
                    db.claim_turns(False)
                    claimed = False
                _rest(held + PAUSE_EXTRA_S, stop)
            elif not claimed:
                db.claim_turns(True)
                claimed = True
    finally:
        if claimed:
            db.claim_turns(False)
    with db.write():
        if db.recall.moving_below() != moving:
            return 0  # another connection finished this re-clustering (or a reindex ran)
        # The size the cells were made for, not the size at the end: a ledger that grew while
        # the vectors moved is due again once it doubles from there (recorded at the end, a
        # re-clustering begun at 20k and ended at 84k left 142 cells due again only at 336k).
        # A resumed run knows only its cells, about sqrt of the size they were made for.
        count = db.recall.vector_count()
        db.recall.end_moving(sized_on or min(count, len(new) ** 2))
    return len(new)


def _rest(seconds: float, stop: threading.Event | None) -> None:
    """Sleep (the lock and the GIL free for others), or until stopped."""
    if stop is not None:
        stop.wait(seconds)
    else:
        time.sleep(seconds)


class Maintenance(BackgroundThread):
    """Runs `recluster` in a background thread on its own connection to the ledger file, when
    the index says it is due; `close` stops it between two batches."""

    THREAD_NAME = "custody-recluster"

    def __init__(self, path: str | Path, policy: LoadedPolicy,
                 seal: Callable[[], VectorCipher | None] | None = None) -> None:
        super().__init__()
        self.path = str(path)
        self.policy = policy
        # Asked at each start, in the owner's thread (its key ring is not shared with ours).
        self._seal = seal
        self._cipher: VectorCipher | None = None
        self.error: BaseException | None = None
        self.progress: tuple[int, int] = (0, 0)
        self.held_ms: list[float] = []  # write-lock time of each batch moved (benchmarks)

    def start(self) -> None:
        if self.running:
            return
        self.error = None
        self._cipher = self._seal() if self._seal is not None else None
        self._spawn()

    def _run(self) -> None:
        try:
            db = open_ledger(self.path)
            db.limit_mmap(0)  # it reads every vector once: mapped, they would all stay in RSS
            # Its commits hand the WAL checkpoint to a thread too, instead of running it
            # themselves (after the lock is free, but before the next batch could begin).
            db.checkpoint_in_background()
            # Its turns come before this process's writers waiting with them: between two
            # connections SQLite's busy handler let a writer writing back to back keep the lock,
            # and a re-clustering begun at 20k facts was still moving vectors at 100k.
            db.write_first()
            try:
                recluster(db, self.policy, progress=self._note, stop=self._stop,
                          held_ms=self.held_ms, seal=self._cipher)
                if db.recall.maintenance_error() is not None:
                    with db.write():
                        db.recall.note_maintenance_error(None)  # this run succeeded
            finally:
                db.close()
                # The sample, the moved vectors and the connection's cache were freed in this
                # thread's own malloc arena, which glibc keeps (36 MB after the first
                # re-clustering of a 20k-fact ingest here): give it back.
                give_back_freed_heap()
        except BaseException as exc:  # kept for the owner to see; the index stays searchable
            self.error = exc
            _record(self.path, exc)

    def _note(self, done: int, total: int) -> None:
        self.progress = (done, total)

    def join(self, timeout: float | None = None) -> None:
        """Wait for a running re-clustering to finish."""
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self) -> None:
        self._stop.set()
        self.join()


def _record(path: str, exc: BaseException) -> None:
    """Leave the failure in the ledger for `doctor` (another process) to report; best effort:
    the failure may be the very file being unwritable."""
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        db = open_ledger(path)
        try:
            with db.write():
                db.recall.note_maintenance_error(f"{when} {type(exc).__name__}: {exc}"[:500])
        finally:
            db.close()
    except Exception:  # noqa: S110 - nothing more can be done; `error` still holds it
        pass
