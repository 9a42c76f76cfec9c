"""sqlite-vec 0.1 finds a cell's chunks by a column of its chunks table it never indexes: every
vector insert (a fact's, or a re-clustering's move) scanned one ~2 KB row per chunk, so the cost
of a write grew with the ledger, and at 180k facts the background re-clustering moved 0.58
vectors a fact written against the 0.5 it must to end before the next is due (issue 35). The
store now keeps an index on that column: made with the vector table, and at a read-write open
of a ledger that lacks it (made before it, or dropped by hand). Counted in pages read, not in
time: the same insert reads about as many pages beside 600 cells' chunks as beside 40."""

from __future__ import annotations

from pathlib import Path

import apsw
import numpy as np

from store.rows import vec_row
from store.sqlite import open_ledger
from store.sqlite.connection import LedgerFile
from store.sqlite.recall import CHUNK_LOOKUP

DIMS = 8
HAS_LOOKUP = "SELECT 1 FROM sqlite_schema WHERE type = 'index' AND name = ?"


def _vector(rng: np.random.Generator) -> bytes:
    v = rng.standard_normal(DIMS).astype(np.float32)
    return (v / np.linalg.norm(v)).tobytes()


def _fill_cells(db: LedgerFile, cells: range, rng: np.random.Generator) -> None:
    """One vector in each of `cells` (each cell its own chunk, as sqlite-vec partitions)."""
    with db.write():
        db.recall._insert_vectors([vec_row(10_000 + c, c, _vector(rng), "active", "org", "s")
                                   for c in cells])


def _pages_read_by_an_insert(db: LedgerFile, seq: int, cell: int,
                             rng: np.random.Generator) -> int:
    """Pages the insert of one vector into `cell` fetched (from the cache or the file)."""
    with db.write():
        before = sum(db.conn.status(op)[0] for op in (apsw.SQLITE_DBSTATUS_CACHE_HIT,
                                                        apsw.SQLITE_DBSTATUS_CACHE_MISS))
        db.recall._insert_vectors([vec_row(seq, cell, _vector(rng), "active", "org", "s")])
        after = sum(db.conn.status(op)[0] for op in (apsw.SQLITE_DBSTATUS_CACHE_HIT,
                                                       apsw.SQLITE_DBSTATUS_CACHE_MISS))
    return after - before


def _new_index(path: Path) -> LedgerFile:
    db = open_ledger(path)
    with db.write():
        db.recall.create("hashed-ngram", DIMS)
    return db


def test_a_vector_insert_reads_no_more_pages_as_the_cells_grow(tmp_path: Path) -> None:
    rng = np.random.default_rng(35)
    db = _new_index(tmp_path / "l.db")
    try:
        _fill_cells(db, range(40), rng)
        small = [_pages_read_by_an_insert(db, 1, 5, rng),  # a cell with a chunk
                 _pages_read_by_an_insert(db, 2, 5_000, rng)]  # a new cell: a new chunk
        _fill_cells(db, range(40, 600), rng)
        large = [_pages_read_by_an_insert(db, 3, 6, rng),
                 _pages_read_by_an_insert(db, 4, 5_001, rng)]
    finally:
        db.close()
    # Without the index each grew by about a page per chunk (560 more chunks); with it, by
    # a tenth of that at most (a level more in a few b-trees).
    assert large[0] - small[0] < 56, (small, large)
    assert large[1] - small[1] < 56, (small, large)


def test_a_ledger_without_the_lookup_gets_it_at_its_next_read_write_open(tmp_path: Path) -> None:
    """A ledger made before the index (or with it dropped by hand) opens read-only as it is
    and gets the index at its next read-write open; a rebuild's new table has it too."""
    rng = np.random.default_rng(36)
    path = tmp_path / "l.db"
    db = _new_index(path)
    _fill_cells(db, range(20), rng)
    assert db.conn.execute(HAS_LOOKUP, (CHUNK_LOOKUP,)).fetchone() is not None
    with db.write():
        db.conn.execute(f"DROP INDEX {CHUNK_LOOKUP}")
    db.close()
    readonly = open_ledger(path, readonly=True)
    try:
        assert readonly.conn.execute(HAS_LOOKUP, (CHUNK_LOOKUP,)).fetchone() is None
        assert readonly.recall.vector_count() == 20
    finally:
        readonly.close()
    db = open_ledger(path)
    try:
        assert db.conn.execute(HAS_LOOKUP, (CHUNK_LOOKUP,)).fetchone() is not None
        assert db.recall.vector_count() == 20
        rows = [(seq, cell, vec, "active", 0, 0) for (seq, vec, _, _, _), cell
                in zip(db.recall.vectors(), range(20), strict=True)]
        with db.write():
            db.recall.repartition(DIMS, [_vector(rng) for _ in range(4)], rows)
        assert db.conn.execute(HAS_LOOKUP, (CHUNK_LOOKUP,)).fetchone() is not None
        assert db.recall.vector_count() == 20
    finally:
        db.close()


def test_a_ledger_with_no_vector_table_opens_without_the_lookup(tmp_path: Path) -> None:
    """Nothing to index before the recall index exists: the open makes no table or index."""
    db = open_ledger(tmp_path / "l.db")
    try:
        assert db.conn.execute(HAS_LOOKUP, (CHUNK_LOOKUP,)).fetchone() is None
        assert db.conn.execute("SELECT 1 FROM sqlite_schema WHERE name = 'recall_vec_chunks'"
                               ).fetchone() is None
    finally:
        db.close()
