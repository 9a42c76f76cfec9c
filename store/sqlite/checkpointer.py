"""WAL checkpoints off the write path (issue 17). SQLite's automatic checkpoint runs inside the
COMMIT that takes the WAL past 1,000 pages: at 1,000 ops per group that was nearly every group's
commit, 40-60 ms of it here. A ledger opened for writing instead hands that pass to a thread
with its own connection (a PASSIVE checkpoint never takes the write lock, and apsw releases the
GIL while SQLite copies pages), started by the commit that passes PAGES.

A background pass copies the frames of the transactions committed before it starts, but the
WAL only starts over when a write begins after a pass that copied everything; with writes back
to back that never happens by itself, so once a commit leaves CAP pages the writer's next write
waits, before it begins, for the pass that commit started (by then only that commit's frames
are left to copy; a pass here took 50-70 ms, its fsyncs most of it), and then starts the WAL
again. The wait is not in the commit: a caller that does anything between two writes overlaps
it, and a write's own time stays its own. The truncating checkpoint of an erasure and the file
rewrite take `lock` first, so they never meet a pass half way."""

from __future__ import annotations

import threading

import apsw

# A pass starts once a commit leaves this many pages in the WAL (SQLite's own threshold).
PAGES = 1000
# Past this, the next write waits for a pass first, so it can start the WAL over (~32 MB).
CAP = 8000
WAIT_S = 10.0


class Checkpointer:
    """The background checkpoints of one writer connection."""

    def __init__(self, path: str) -> None:
        self.path = path
        # Held by a pass; the truncating checkpoint and the rewrite take it too.
        self.lock = threading.Lock()
        self._cond = threading.Condition()
        self._due = False
        self._running = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self.frames = 0  # pages in the WAL after the latest commit
        self.passes = 0
        self.error: BaseException | None = None

    def install(self, conn: apsw.Connection) -> None:
        """Replace the connection's automatic checkpoint with this one (a WAL hook replaces
        SQLite's autocheckpoint, which is itself a WAL hook)."""
        conn.set_wal_hook(self._hook)

    def _hook(self, conn: apsw.Connection, name: str, pages: int) -> int:
        self.frames = pages
        if pages >= PAGES:
            self.kick()
        return apsw.SQLITE_OK

    def kick(self) -> None:
        with self._cond:
            if self._stop:
                return
            self._due = True
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="custody-checkpoint",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def before_write(self) -> None:
        """Called by the writer before it begins a write transaction: when its last commit
        left CAP pages or more, wait for the pass that commit started."""
        if self.frames >= CAP:
            self.wait()
            self.frames = 0

    def wait(self, timeout: float = WAIT_S) -> bool:
        """Wait until no pass is due or running; False if `timeout` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._due and not self._running, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                self._due = False
                self._running = True
            try:
                with self.lock:
                    conn = apsw.Connection(self.path, flags=apsw.SQLITE_OPEN_READWRITE)
                    try:
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    finally:
                        conn.close()
                self.passes += 1
            except apsw.Error as exc:  # busy or gone: the next commit past PAGES tries again
                self.error = exc
            finally:
                with self._cond:
                    self._running = False
                    self._cond.notify_all()

    def close(self) -> None:
        """Stop the thread (after the pass it is running, if any)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
