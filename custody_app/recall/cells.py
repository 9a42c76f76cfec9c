"""Cells of the vector index: k-means partitions of sqlite-vec's table (an inverted-file index).

Below the policy's `ann_min_facts` every vector sits in one cell and a query reads them all
(exact). From there on the vectors are clustered into about sqrt(n) cells, each vector stored in
the cell of its nearest centroid (a sqlite-vec partition key), and a query reads only the
`ann_probe` share of cells nearest to it: the KNN is still sqlite-vec's, over fewer chunks. The
cells are re-clustered when the index has grown threefold since the last clustering, off the
write path (`recluster`), in short transactions of their own.
"""

from __future__ import annotations

import math
import threading
from typing import overload

import numpy as np
import numpy.typing as npt

from custody_app.domain.policy import LoadedPolicy
from store import LedgerFile

Matrix = npt.NDArray[np.float32]

# Re-cluster when the index holds this many times the vectors it was clustered on: the cells then
# stay between 0.58 and 1 times sqrt(n) (at 4 a ledger grown to 1M sat on the cells of 320k,
# 0.57 sqrt(n) at best), for moving about 1.5n vectors in all over a ledger's growth instead of
# 4n/3; at 2 (0.71) a re-clustering must move a vector for every fact written meanwhile, which
# under a load of 10 on this 2-core machine it did not (0.6 a fact, bench_recluster_pace.py).
REGROW = 3
SAMPLE = 20_000  # vectors k-means is trained on
ITERATIONS = 10
MIN_CELLS = 16


def regrow_due(count: int, clustered: int, floor: int, cells: int = 0) -> bool:
    """Whether an index of `count` vectors, last clustered on `clustered` (0: never) into
    `cells` cells (0: not known), is due a re-clustering under the policy's `floor`
    (ann_min_facts). The cells count too: about sqrt of the size they were made for, they heal
    a ledger whose re-clustering recorded the size it ended at (before issue 35: 142 cells
    made at 20k, recorded as clustered on 84k, not due again before 336k)."""
    made_for = clustered if cells <= 1 else min(clustered, cells * cells)
    return count >= floor and (clustered == 0 or count >= REGROW * made_for)


def unit(vector: Matrix) -> Matrix:
    """The vector scaled to length 1 (L2 distance then ranks as cosine)."""
    norm = float(np.linalg.norm(vector))
    if norm == 0 or abs(norm - 1.0) < 1e-6:  # already unit (the embedders' contract)
        return vector
    out: Matrix = (vector / norm).astype(np.float32)
    return out


@overload
def kmeans(vectors: Matrix, cells: int, seed: int = 0) -> Matrix: ...


@overload
def kmeans(vectors: Matrix, cells: int, seed: int = 0, *,
           stop: threading.Event | None) -> Matrix | None: ...


def kmeans(vectors: Matrix, cells: int, seed: int = 0, *,
           stop: threading.Event | None = None) -> Matrix | None:
    """Spherical k-means (centroids of unit length) on a sample; deterministic for a seed.
    None when `stop` was set (checked between iterations: a close need not wait for it)."""
    rng = np.random.default_rng(seed)
    sample = vectors if len(vectors) <= SAMPLE else vectors[
        rng.choice(len(vectors), SAMPLE, replace=False)]
    centroids: Matrix = sample[rng.choice(len(sample), cells, replace=False)].copy()
    for _ in range(ITERATIONS):
        parts = []
        for i in range(0, len(sample), 4096):  # in blocks: a stop is seen within an iteration
            if stop is not None and stop.is_set():
                return None
            parts.append(np.argmax(sample[i:i + 4096] @ centroids.T, axis=1))
        nearest = np.concatenate(parts)
        sums = np.zeros_like(centroids)
        np.add.at(sums, nearest, sample)
        norms = np.linalg.norm(sums, axis=1)
        filled = norms > 0  # an empty cell keeps its centroid
        centroids[filled] = sums[filled] / norms[filled, None]
    return centroids.astype(np.float32)


def nearest_cells(vectors: Matrix, centroids: Matrix, block: int = 8192) -> npt.NDArray[np.int64]:
    """The cell of each vector, in blocks to bound memory."""
    out = [np.argmax(vectors[i:i + block] @ centroids.T, axis=1)
           for i in range(0, len(vectors), block)]
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


class CellIndex:
    """The centroids of one ledger file, cached per connection and reloaded when another
    connection changed them (the store keeps a version). Re-clustering is not done here, on
    the write path: `due` tells the caller to run `recall.recluster` on a connection of its
    own."""

    def __init__(self, db: LedgerFile, policy: LoadedPolicy, dimensions: int) -> None:
        self.db = db
        self.policy = policy
        self.dimensions = dimensions
        self._version: str | None = None
        self._centroids: Matrix | None = None
        self._ids: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._moving = 0
        self._count: int | None = None  # vectors in the index, kept in step by this process
        self._confirmed: int | None = None  # the clustered-on size the count was last checked at
        self.due = False  # the index grew enough to be re-clustered (off the write path)

    def _load(self) -> None:
        version = self.db.recall.cells_version()
        if version != self._version:
            rows = self.db.recall.cells()
            self._moving = self.db.recall.moving_below()
            if self._moving:  # writers place vectors by the new cells only
                rows = [r for r in rows if r[0] >= self._moving]
            self._centroids = (np.stack([np.frombuffer(b, dtype=np.float32) for _, b in rows])
                               if rows else None)
            self._ids = np.asarray([c for c, _ in rows], dtype=np.int64)
            self._version = version
            self._count = None

    def centroids(self) -> Matrix | None:
        self._load()
        return self._centroids

    def cell_for(self, vector: Matrix) -> int:
        centroids = self.centroids()
        return 0 if centroids is None else int(self._ids[int(np.argmax(centroids @ vector))])

    def cells_for(self, vectors: Matrix) -> npt.NDArray[np.int64]:
        """The cell of each of several vectors (one matrix product)."""
        centroids = self.centroids()
        if centroids is None:
            return np.zeros(len(vectors), dtype=np.int64)
        out: npt.NDArray[np.int64] = self._ids[nearest_cells(vectors, centroids)]
        return out

    def probe(self, query: Matrix, pool: int, most: int | None = None) -> list[int] | None:
        """The cells a query reads, nearest first: the policy's share of them, and enough to
        hold about twice `pool` vectors on average; with `most`, no more cells than hold about
        that many vectors (but enough for the pool); None when the index is one cell, or while
        a re-clustering is moving vectors between cells (then every vector is read)."""
        centroids = self.centroids()
        if centroids is None or self._moving:
            return None
        cells = len(centroids)
        per_cell = max(self.db.recall.clustered_on(), 1) / cells
        share = self.policy.policy.recall.ann_probe
        enough = math.ceil(2 * pool / per_cell)
        n = min(cells, max(1, math.ceil(cells * share), enough))
        if most is not None:
            n = min(n, max(1, enough, math.floor(most / per_cell)))
        return [int(self._ids[c]) for c in np.argsort(-(centroids @ query))[:n]]

    def count_before_writing(self) -> None:
        """Start the count the due check keeps from FTS5's own row count (one record, no scan),
        before this process writes its first index rows: a count(*) of both tables took 255 ms
        at 100k facts inside the first write after every open. FTS5 writes that count with
        its rows, so only before any write of ours does it hold them all; it equals the vector
        count while the indexes are whole (verify checks that)."""
        self._load()  # a change of cells starts the count again
        if self._count is None:
            self._count = self.db.recall.lexical_rows_count()

    def added(self, n: int) -> None:
        """`n` vectors were added (negative: removed): note when a re-clustering is due. The
        kept count may drift (other processes write too), so the first time it says due it is
        checked by counting the table, once per clustered size: a count at every flush while
        a re-clustering ran (every flush is then due) cut ingest past 440k facts to ~45/s."""
        if self._count is None:
            self._count = self.db.recall.vector_count()
        else:
            self._count += n
        if n > 0 and self._due(self._count):
            clustered = self.db.recall.clustered_on()
            if self._confirmed != clustered:
                self._count = self.db.recall.vector_count()
                self._confirmed = clustered
            self.due = self._due(self._count)

    def rebuilt(self) -> None:
        """The index was rebuilt (all in one cell): cluster it if it is large enough (a rebuild
        rewrites every vector in its transaction anyway)."""
        self._count = self.db.recall.vector_count()
        if self._count >= self.policy.policy.recall.ann_min_facts:
            self.repartition()

    def count_cells(self) -> int:
        centroids = self.centroids()
        return 1 if centroids is None else len(centroids)

    def _due(self, count: int) -> bool:
        if self.db.recall.moving_below():
            return True  # an interrupted re-clustering resumes
        return regrow_due(count, self.db.recall.clustered_on(),
                          self.policy.policy.recall.ann_min_facts, self.count_cells())

    def repartition(self) -> int:
        """Cluster every vector anew and store each in its nearest cell, in the caller's
        transaction (used by a rebuild); returns the cells."""
        rows = self.db.recall.vectors()
        if not rows:
            return 0
        matrix = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows])
        cells = min(len(rows), max(MIN_CELLS, round(math.sqrt(len(rows)))))
        centroids = kmeans(matrix, cells)
        where = nearest_cells(matrix, centroids)
        self.db.recall.repartition(
            self.dimensions, [c.tobytes() for c in centroids],
            [(seq, int(cell), vec, status, space, ref)
             for (seq, vec, status, space, ref), cell in zip(rows, where, strict=True)])
        self._count = len(rows)
        return cells
