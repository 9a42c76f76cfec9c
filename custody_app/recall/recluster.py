"""Re-clustering the vector cells off the write path: on a connection of its own, k-means on a
sample read outside any transaction, then the vectors moved to their new cells a batch per short
write transaction, so a writer never waits behind more than one batch."""

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
from custody_app.recall.cells import MIN_CELLS, SAMPLE, Matrix, kmeans
from store import LedgerFile, open_ledger

# Vectors moved per write transaction, the only time the re-clustering holds the write lock
# (their vectors are read before it): at 100k facts under a load of 8 on this 2-core machine,
# batches of 500 that also read the vectors inside held it ~4 s; ~50 keeps a batch near one
# ordinary group commit.
BATCH = 50

Progress = Callable[[int, int], None]


def recluster(db: LedgerFile, policy: LoadedPolicy, *, batch: int = BATCH,
              progress: Progress | None = None,
              stop: threading.Event | None = None,
              held_ms: list[float] | None = None) -> int:
    """Re-cluster the cells of the ledger open as `db` (a connection no one else writes
    through), reporting (moved, total); resumes a re-clustering that was interrupted. Returns
    the number of cells, or 0 when stopped before the end (it resumes next time). `held_ms`
    collects how long each of its write transactions held the write lock."""
    moving = db.recall.moving_below()
    if not moving:
        with db.read():
            where = db.recall.vector_seqs()
        if len(where) < policy.policy.recall.ann_min_facts:
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
        centroids = kmeans(sample, cells, stop=stop)  # outside any transaction: no lock held
        if centroids is None:
            return 0  # stopped (a close): nothing was changed
        with db.write():
            # Another connection may have begun its own meanwhile: resume that one instead of
            # layering a second set of cells over it (each would think the other a rebuild).
            moving = db.recall.moving_below()
            if not moving:
                moving = max((c for c, _ in db.recall.cells()), default=0) + 1
                db.recall.begin_moving(moving, [c.tobytes() for c in centroids])
    with db.read():
        rows = db.recall.cells()
        # Every vector in an old cell now; later writes already go to the new cells.
        todo = db.recall.vector_seqs(below=moving)
    new = [(c, np.frombuffer(b, dtype=np.float32)) for c, b in rows if c >= moving]
    ids = np.asarray([c for c, _ in new], dtype=np.int64)
    matrix: Matrix = np.stack([v for _, v in new])

    def cell_of(vector: bytes) -> int:
        return int(ids[int(np.argmax(matrix @ np.frombuffer(vector, dtype=np.float32)))])

    for done in range(0, len(todo), batch):
        if stop is not None and stop.is_set():
            return 0
        with db.read():  # outside the write lock: a fact's vector does not change
            vectors = db.recall.vectors_of(todo[done:done + batch])
        with db.write():
            began = time.perf_counter()  # the lock is held from here (not while waiting for it)
            if db.recall.moving_below() != moving:
                return 0  # the index was rebuilt meanwhile (a reindex): nothing left to move
            db.recall.move(vectors, cell_of, moving)
        if held_ms is not None:  # through COMMIT
            held_ms.append((time.perf_counter() - began) * 1000)
        if progress is not None:
            progress(min(done + batch, len(todo)), len(todo))
    with db.write():
        if db.recall.moving_below() != moving:
            return 0  # another connection finished this re-clustering (or a reindex ran)
        db.recall.end_moving(db.recall.vector_count())
    return len(new)


class Maintenance:
    """Runs `recluster` in a background thread on its own connection to the ledger file, when
    the index says it is due; `close` stops it between two batches."""

    def __init__(self, path: str | Path, policy: LoadedPolicy) -> None:
        self.path = str(path)
        self.policy = policy
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self.progress: tuple[int, int] = (0, 0)
        self.held_ms: list[float] = []  # write-lock time of each batch moved (benchmarks)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self.error = None
        self._thread = threading.Thread(target=self._run, name="custody-recluster", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            db = open_ledger(self.path)
            db.limit_mmap(0)  # it reads every vector once: mapped, they would all stay in RSS
            try:
                recluster(db, self.policy, progress=self._note, stop=self._stop,
                          held_ms=self.held_ms)
                if db.recall.maintenance_error() is not None:
                    with db.write():
                        db.recall.note_maintenance_error(None)  # this run succeeded
            finally:
                db.close()
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
