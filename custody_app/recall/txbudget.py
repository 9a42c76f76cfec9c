"""The re-clustering's time budget a write transaction: what its COMMIT is expected to cost
(learnt by the row moved and by the sqlite-vec chunk made), and when to stop adding rows
(`recall.recluster`, bench/results_recluster.md)."""

from __future__ import annotations

from collections.abc import Callable

# What a COMMIT is taken to cost until measured: a row (0.011-0.045 ms here) and a new chunk
# (0.1-0.5 ms).
FIRST_ROW_COMMIT_S = 0.00005
FIRST_CHUNK_COMMIT_S = 0.0005


class CommitCost:
    """What a COMMIT of the re-clustering costs: so much a row gone through, so much more a
    chunk made. A transaction that made no chunk measures the first; one that made chunks
    scales both by how far the estimate of it was off. Up at once to a dearer figure, down by
    halves: the estimate errs on the long side."""

    def __init__(self) -> None:
        self.per_row = FIRST_ROW_COMMIT_S
        self.per_chunk = FIRST_CHUNK_COMMIT_S

    def learn(self, rows: int, chunks: int, seconds: float) -> None:
        if chunks == 0:
            self.per_row = lean_long(self.per_row, seconds / rows)
            return
        estimate = self.of(rows, chunks)
        if estimate <= 0.0:  # nothing to scale: every COMMIT so far took no time at all
            self.per_chunk = max(0.0, seconds - rows * self.per_row) / chunks
            return
        off = seconds / estimate
        self.per_row = lean_long(self.per_row, self.per_row * off)
        self.per_chunk = lean_long(self.per_chunk, self.per_chunk * off)

    def of(self, rows: int, chunks: int) -> float:
        return rows * self.per_row + chunks * self.per_chunk


def lean_long(estimate: float, seen: float) -> float:
    return max(seen, (estimate + seen) / 2)


def within(timer: Callable[[], float], began: float, deadline: float,
            commit: CommitCost) -> Callable[[int], bool]:
    """Asked after each row with the chunks made so far: true once now, one more row at the
    mean cost of those so far and the COMMIT of them all would reach `deadline`."""
    rows = 0

    def enough(chunks: int) -> bool:
        nonlocal rows
        rows += 1
        now = timer()
        return now + (now - began) / rows + commit.of(rows + 1, chunks) >= deadline
    return enough
