"""The rows of the in-process vector copy (`matrix`): its buffers, the row of a fact, rows
added, freed and compacted, and the filter masks a search applies.

Every row is kept as per-row scaled int8 codes, and below the float32 budget its float32 row
too; above the int8 budget, as sign bits only (`codes.pack`). A removed fact's row is zeroed
(codes and floats), never just unlisted, and a buffer given up is zeroed before it is freed:
freed memory holds no vector.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from custody_app.recall import codes as codes_mod
from store.rows import VecRow, filter_code

Matrix = npt.NDArray[np.float32]

STATUS_CODE = {"live": 0, "quarantined": 1}
FREE = -1  # the status code of a row that holds no vector (zeroed)
COLUMNS = ("_codes8", "_rows", "_factor", "_seqs", "_status", "_space", "_subject")


class CopyRows:
    """The rows of a vector copy of `dimensions` within `max_bytes`."""

    dimensions: int
    max_bytes: int
    quantized: bool  # no float32 rows kept: candidates re-scored from the store's rows
    bits: bool  # sign bits kept, not int8 codes (quantized too)
    _centre: Matrix  # what the sign bits are taken against (bits only)

    def _forget(self) -> None:
        """Zero every vector and code kept, then start empty."""
        self._rows.fill(0)
        self._codes8.fill(0)
        self._centre = np.zeros(self.dimensions, dtype=np.float32)
        self._clear()

    def _clear(self) -> None:
        # int8 codes of every row (what a search ranks first), and below the float32 budget the
        # float32 rows too (what it re-scores from; above it they are read from sqlite-vec).
        # (As sign bits, packed: uint8, a bit a dimension.)
        self._codes8: npt.NDArray[np.generic] = (
            np.zeros((0, -(-self.dimensions // 8)), dtype=np.uint8) if self.bits
            else np.zeros((0, self.dimensions), dtype=np.int8))
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
        int8 codes (or sign bits) when quantized (free rows included: a removed fact's row
        reads as zeros)."""
        return self._codes8 if self.quantized else self._rows

    def codes(self) -> npt.NDArray[np.generic]:
        """The whole buffer of int8 codes (or sign bits), kept in every mode."""
        return self._codes8

    def encode(self, vector: Matrix) -> npt.NDArray[np.generic]:
        """A vector as the copy stores it (its int8 codes, or sign bits, when quantized)."""
        return self._encode(vector[None, :])[0][0] if self.quantized else vector

    def _encode(self, block: Matrix) -> tuple[npt.NDArray[np.generic], Matrix]:
        """The codes of rows (int8, or sign bits) and their factors."""
        return codes_mod.pack(block, self._centre) if self.bits else codes_mod.encode(block)

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        return int(self._rows.nbytes + self._codes8.nbytes)

    def _capacity(self) -> int:
        """Rows the budget allows in the current mode."""
        per_row = (-(-self.dimensions // 8) if self.bits
                   else self.dimensions * (1 if self.quantized else 5))
        return self.max_bytes // max(per_row, 1)

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
        self._codes8[at:need], self._factor[at:need] = self._encode(block)
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
