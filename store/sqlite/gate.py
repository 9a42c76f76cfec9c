"""The write turns of one process's connections to one ledger file (issue 35).

Between two connections of the same process SQLite's busy handler is a poor referee: a writer
that finds the lock taken sleeps 1, 2, 5, 10, 15, 20, 25 ms... and looks again, so whoever
writes back to back keeps the lock. The background re-clustering, on a connection of its own
beside a writer in the same process, then almost never got in: one begun at 20k facts was still
moving vectors at 100k, and a ledger built to 1M ended with 141 cells. And a writer that missed
the instant the re-clustering let go slept on for up to its busy handler's next step.

So each process hands the write lock of a file from one of its connections to the next itself:
a connection takes this gate before BEGIN IMMEDIATE and gives it back after its COMMIT (or
ROLLBACK), and the next waiter is woken at once. A connection marked `priority` (the
re-clustering) is let in before the ordinary writers waiting with it, but not twice in a row
while one waits (unless it claimed a run of turns, within the share of the writers' time its
credit allows); it holds the lock no longer than one ordinary write, and rests as long again
after each turn, so an ordinary writer waits at most one of its turns.

Only an arrangement between threads: SQLite's lock stays the lock (other processes still meet
the busy handler), and a wait here is bounded by WAIT_S, after which the connection goes on to
BEGIN IMMEDIATE as it did before (a thread that holds a transaction open on one connection while
writing through a second, which SQLite refuses as busy, is not kept waiting here for ever)."""

from __future__ import annotations

import os
import threading
import time

# The longest a connection waits for its turn before leaving it to SQLite's lock alone: SQLite's
# own busy timeout (store.sqlite.opening), so a wait that gave up before still gives up, and a
# long group transaction (seconds) does not send the re-clustering back to polling.
WAIT_S = 5.0

_gates: dict[str, Gate] = {}
_gates_lock = threading.Lock()


class Gate:
    """The turns of one file's connections in this process."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._holder: int | None = None  # the thread whose connection is writing
        self._priority_waiting = 0
        self._ordinary_waiting = 0
        # Set when a priority turn ended with ordinary writers waiting: one of them goes next
        # (under CPU starvation a woken writer could miss the whole rest between two priority
        # turns and wait behind five of them).
        self._ordinary_next = False
        # The threads of priority connections keeping their turns for a run of them.
        self._claims: dict[int, int] = {}
        self._ordinary = False  # the holder is an ordinary writer
        self._since = 0.0
        # Seconds ordinary writers have held their turns (the re-clustering takes a share).
        self.ordinary_held = 0.0

    def enter(self, *, priority: bool = False) -> bool:
        """Wait for this connection's turn; True when taken (give it back with `leave`),
        False when the wait passed WAIT_S or this thread already holds it (another of its
        connections is writing: SQLite answers that one)."""
        me = threading.get_ident()
        with self._cond:
            if self._holder == me:
                return False
            if priority:
                self._priority_waiting += 1
            else:
                self._ordinary_waiting += 1
            try:
                free = self._cond.wait_for(lambda: self._free_for(me, priority), WAIT_S)
            finally:
                if priority:
                    self._priority_waiting -= 1
                else:
                    self._ordinary_waiting -= 1
            if not free:
                return False
            if not priority:
                self._ordinary_next = False
            self._holder = me
            self._ordinary = not priority
            self._since = time.perf_counter()
            return True

    def claim(self, on: bool) -> None:
        """Keep (on) or give up the turns of a priority connection between two of them: while
        kept, ordinary writers wait (for at most WAIT_S each) even when it is not yet waiting,
        so a run of its turns is not broken by a writer's long group."""
        me = threading.get_ident()
        with self._cond:
            count = self._claims.get(me, 0) + (1 if on else -1)
            if count > 0:
                self._claims[me] = count
            else:
                self._claims.pop(me, None)
            self._cond.notify_all()

    def _free_for(self, me: int, priority: bool) -> bool:
        if self._holder is not None:
            return False
        if priority:  # first, unless an ordinary writer's turn is owed and this is no run
            return not (self._ordinary_next and self._ordinary_waiting and me not in self._claims)
        return self._ordinary_next or not (self._priority_waiting or self._claimed_by_other(me))

    def _claimed_by_other(self, me: int) -> bool:
        return any(thread != me for thread in self._claims)

    def leave(self) -> None:
        with self._cond:
            if self._ordinary:
                self.ordinary_held += time.perf_counter() - self._since
            elif self._ordinary_waiting and self._holder not in self._claims:
                self._ordinary_next = True
            self._holder = None
            self._cond.notify_all()


def gate_for(path: str) -> Gate:
    """The gate of the file at `path` (one per file in this process)."""
    key = os.path.realpath(path)
    with _gates_lock:
        gate = _gates.get(key)
        if gate is None:
            gate = _gates[key] = Gate()
        return gate
