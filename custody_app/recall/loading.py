"""The in-process vector copy loaded in a background thread, so no recall waits for it.

Loading the copy of 1M vectors took 11.3 s (bench/results_memory.md): the first recall after an
open waited for it. A copy of more than `BACKGROUND_ROWS` rows is now loaded on a connection of
its own, in one read snapshot (the vector table's version token and its rows together), while
recalls are answered by the store's own KNN over the nearest cells. The owner adopts the loaded
copy at its next search, with the additions and status moves this process made meanwhile
applied to it, if that brings it to the table's token (else it is zeroed and loaded again). A
removal stops the load and waits for the thread to zero what it had copied (a forgotten fact's
vector is in no buffer of this process when forget returns, loaded or half-loaded). Nothing is
written anywhere: sqlite-vec stays the source of truth.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, Protocol

from custody_app.keys.vectors import VectorCipher
from custody_app.recall.heap import give_back_freed_heap
from store import LedgerFile, open_ledger

# Copies of more rows than this load in the background (a load of 20k rows took ~0.3 s of CPU
# here; of 1M, 11 s). Smaller ones load in the search that needs them.
BACKGROUND_ROWS = 20_000

class Loadable(Protocol):
    """A vector copy, as the thread loads it (`matrix.VectorMatrix`)."""

    def load(self, stop: threading.Event | None = None, count: int | None = None) -> bool: ...
    def drop(self) -> None: ...
    def hand_over(self) -> dict[str, Any]: ...


# Called in the owner's thread when a load starts (the key ring is not shared across
# threads); returns what opens the thread's own connection to the ledger, read-only.
Opener = Callable[[], Callable[[], LedgerFile]]


def reader(path: str, seal: VectorCipher | None) -> Callable[[], LedgerFile]:
    """What opens the ledger at `path` read-only, reading its vectors as the owner does (a
    server's sealed vectors opened with `seal`, the owner's index key fixed at the start)."""
    def open_reader() -> LedgerFile:
        db = open_ledger(path, readonly=True)
        if seal is not None:
            db.recall.seal_vectors(seal)
        return db  # type: ignore[no-any-return]
    return open_reader


# How far below the process's own CPU priority the loading thread runs (Linux nice steps): the
# first recalls after an open, answered meanwhile from sqlite-vec's cells, are not slowed by it.
NICER = 10


def below() -> None:
    """Lower the calling thread's CPU priority by NICER (only this thread: Linux schedules each
    thread on its own; elsewhere, or when refused, nothing changes)."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + NICER)
    except (AttributeError, OSError):
        pass


class BackgroundLoad:
    """One load of the copy, on a thread and a connection of its own."""

    def __init__(self, make: Callable[[LedgerFile], Loadable], opener: Opener) -> None:
        self._make = make
        self._open = opener()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the handover: the loaded copy, or the stop, first
        self._loaded: Loadable | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="custody-vector-copy", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            below()  # the recalls it serves go first
            db = self._open()
            # It reads every vector once: mapped, each page read would stay in this process's
            # RSS as file-backed memory (1 GB at 1M vectors); read through the page cache.
            db.limit_mmap(0)
            try:
                copy: Loadable | None = self._make(db)
                assert copy is not None
                with db.read():  # the token and the rows from one snapshot
                    loaded = copy.load(self._stop)
                with self._lock:
                    if loaded and not self._stop.is_set():
                        self._loaded, copy = copy, None
                if copy is not None:
                    copy.drop()  # cancelled, or too large: zeroed
            finally:
                db.close()
                give_back_freed_heap()  # this thread's arena: the streamed rows passed through
        except BaseException as exc:  # the owner's searches go on through the store's KNN
            self.error = exc

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def take(self) -> Loadable | None:
        """The loaded copy (its db is the closed connection: the adopter replaces it), or None."""
        self._thread.join()
        copy, self._loaded = self._loaded, None
        return copy

    def cancel(self, wait: bool) -> None:
        """Stop the load; with `wait`, return only when the thread has zeroed what it held."""
        with self._lock:
            self._stop.set()
            copy, self._loaded = self._loaded, None
        if copy is not None:  # it had finished: zeroed here
            copy.drop()
        if wait:  # else the thread zeroes what it holds when it next looks at the stop
            self._thread.join()
