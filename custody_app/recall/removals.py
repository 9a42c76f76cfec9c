"""Removals from the recall indexes batched over a block (an erasure of many facts: one
statement per index, not a secure delete per fact), and taken ahead on a thread of their own
while the block computes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from custody_app.recall.cells import CellIndex
from custody_app.recall.matrix import VectorMatrix
from store import LedgerFile


class BatchedRemovals:
    """What `RecallIndex` does with the removals `sync` defers, inside `removals_batched`."""

    db: LedgerFile
    cells: CellIndex
    matrix: VectorMatrix
    _removed: set[int]  # deferred by `sync`
    _batching: bool  # inside `removals_batched`: removals wait for its end, not for MOVE_AT
    _gone: set[int]  # what `removing_ahead` already took out of both indexes

    @contextmanager
    def removals_batched(self) -> Iterator[None]:
        """Removals from the indexes inside this block are written together when it ends (an
        erasure of many facts: one statement per table, not a secure delete per fact). Used
        inside one write transaction; on an error nothing is written here and the caller's
        transaction restores what was deferred."""
        if self._batching:
            yield
            return
        self._batching = True
        try:
            yield
            removed, self._removed = sorted(self._removed), set()
            rest = [seq for seq in removed if seq not in self._gone]
            if rest:
                self.cells.count_before_writing()
                old, new = self.db.recall.remove_many(rest)
                self.matrix.changed(old, new, removed=rest)
            if removed:
                self.cells.added(-len(removed))
        finally:
            self._batching = False
            self._gone = set()

    @contextmanager
    def removing_ahead(self, fact_seqs: list[int]) -> Iterator[None]:
        """Inside `removals_batched`, for facts the transaction ends (a sweep's expiries):
        whichever of them are indexed leave both indexes while the block runs, on a thread of
        their own (a statement per index, during which apsw releases the GIL), so the block's
        Python runs beside them on another core; the block must not use the ledger's
        connection meanwhile (its statement would wait behind the removal's, or apsw would
        refuse it). Their removals that `sync` defers afterwards find them gone. Elsewhere, a
        plain block."""
        if not self._batching or not self.db.recall.exists():
            yield
            return
        self.cells.count_before_writing()
        seqs = sorted(self.db.recall.which_indexed(fact_seqs))
        done: list[tuple[str, str] | BaseException] = []

        def remove() -> None:
            try:
                done.append(self.db.recall.remove_many(seqs))
            except BaseException as exc:  # raised on the caller's thread below
                done.append(exc)

        thread = threading.Thread(target=remove, name="custody-index-removal")
        thread.start()
        try:
            yield
        finally:
            thread.join()
        if isinstance(done[0], BaseException):
            raise done[0]
        old, new = done[0]
        self.matrix.changed(old, new, removed=seqs)  # in the order the versions moved
        self._gone.update(seqs)
