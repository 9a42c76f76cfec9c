"""The recall indexes: FTS5 over keyed word hashes, and a sqlite-vec table filtered by status
and partitioned into k-means cells (an inverted-file index: a query reads the nearest cells)."""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable, Iterator, Sequence

import apsw

from store.errors import StoreFull
from store.rows import RecallEngines, VecRow, VectorSeal, vec_row
from store.sqlite.recall_backlog import RecallBacklog
from store.sqlite.recall_hits import RecallHits
from store.sqlite.recall_meta import CELLS_INSERT, META_GET, META_PUT, RecallMeta
from store.sqlite.recall_search import RecallSearch
from store.sqlite.vec_chunks import VecChunks

# The lexical index stores keyed hashes of words, never words: `terms` for the text, `scope`
# for the space and subject tokens (which never change for a fact) so those filters act inside
# the MATCH, not after the limit. A fact's status is not in its row (schema 6): a confirm or
# any other move between live and quarantined never rewrites the lexical row (a secure-delete
# FTS5 delete and re-insert, 3-5 ms at 10k facts); the live-only filter reads the status from
# the facts table inside the query (LEXICAL_LIVE).
FTS_TABLE = "fts5(terms, scope, tokenize='unicode61')"
VOCAB = "CREATE VIRTUAL TABLE IF NOT EXISTS recall_vocab USING fts5vocab(recall_fts, 'row')"
CREATE_FTS = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS recall_fts USING {FTS_TABLE};
INSERT INTO recall_fts(recall_fts, rank) VALUES('secure-delete', 1);
{VOCAB};
"""
# Documents containing a term (fts5vocab 'row'): used to drop near-universal query terms.
FTS_INSERT = "INSERT INTO recall_fts(rowid, terms, scope) VALUES (?, ?, ?)"
# Which of a JSON array of fact seqs either index holds: a point lookup per seq (an IN list
# would scan the vector table).
FTS_HOLDS = ("SELECT j.value FROM json_each(?) j "
             "WHERE EXISTS (SELECT 1 FROM recall_fts WHERE rowid = j.value)")
VEC_HOLDS = ("SELECT j.value FROM json_each(?) j "
             "WHERE EXISTS (SELECT 1 FROM recall_vec WHERE fact_seq = j.value)")
FTS_DELETE = "DELETE FROM recall_fts WHERE rowid = ?"
FTS_SECURE = "INSERT INTO recall_fts(recall_fts, rank) VALUES('secure-delete', ?)"
FTS_OPTIMIZE = "INSERT INTO recall_fts(recall_fts) VALUES('optimize')"
FTS_ROWS = "SELECT count(*) FROM recall_fts_docsize"
# A secure delete rewrites the doclist pages of each of the row's terms (~2-5 ms a row at 10k to
# 100k facts here); an 'optimize' rewrites the whole index once (~6 us per indexed row). Past
# this ratio of rows removed to rows indexed, plain deletes and one merge cost less.
BULK_REMOVE_RATIO = 1 / 200
BULK_REMOVE_MIN = 16
FTS_COUNT = "SELECT count(*) FROM recall_fts"
FTS_ROWIDS = "SELECT rowid FROM recall_fts ORDER BY rowid"
VEC_COLUMNS = "fact_seq, cell, embedding, status, space_code, subject_code"
VEC_INSERT = f"INSERT INTO recall_vec({VEC_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
VEC_ALL = "SELECT fact_seq, embedding, status, space_code, subject_code FROM recall_vec"
CELLS_CREATE = ("CREATE TABLE IF NOT EXISTS recall_cells(cell INTEGER PRIMARY KEY, "
                "centroid BLOB NOT NULL)")
FTS_OF = ("SELECT rowid, terms, scope FROM recall_fts "
          "WHERE rowid IN (SELECT value FROM json_each(?))")
VEC_CELLS = "SELECT fact_seq, cell FROM recall_vec"
VEC_META_ONE = ("SELECT cell, status, space_code, subject_code FROM recall_vec "
                "WHERE fact_seq = ?")
VEC_SAMPLE = "SELECT embedding FROM recall_vec WHERE fact_seq = ?"
# Bumped when the index layout changes: an older layout is rebuilt at open like an embedder change
# (the schema-7 and schema-8 migrations move "ivf-l2-1" and "ivf-l2-2" tables to "ivf-l2-3"
# without re-embedding).
LAYOUT = "ivf-l2-3"
# The vector table. sqlite-vec 0.1.9 leaks memory on two of its write paths, and this layout
# keeps off both (each leak still allocated after the connection closes, so a long ingest grew
# with the ledger):
# - an auxiliary (`+name`) column: the SQL text of its row's INSERT, 80-120 bytes a vector
#   (the embedder's name, the same for every row, is in the index's meta row instead);
# - a text metadata value over 12 bytes (stored in a shadow table through SQL that is never
#   freed), ~40-70 bytes a row: the space and the subject are filter codes (`filter_code`), 64-bit
#   integers kept in the chunk itself; status ("live", "quarantined") stays text.
VEC_TABLE = ("vec0(fact_seq integer primary key, "
             # The cell (a k-means partition; 0 while the index is small and searched whole)
             # lets a KNN read only the chunks of the cells nearest the query.
             "cell integer partition key, "
             # Embedders give unit vectors, so L2 ranks exactly as cosine (and is ~25% faster
             # in sqlite-vec 0.1.9 here).
             "embedding float[{dimensions}] distance_metric=L2, status text, "
             "space_code integer, subject_code integer, "
             # Chunks of 256 vectors: every insert rewrites a chunk's blob, and at the default
             # 1024 that cost 200 us per 1024-dim insert here.
             "chunk_size=256)")
StoredVec = tuple[int, bytes, str, int, int]  # fact_seq, vector, status, space/subject codes




VEC_DELETE = "DELETE FROM recall_vec WHERE fact_seq = ?"
# Many deletes as one statement each (a caller may run them on a thread of its own: apsw
# releases the GIL for a statement's whole run, not between the rows of an executemany). FTS5
# takes the seqs in any order; the vectors go in the order given (stored order), through a
# trigger on a temporary table, one row at a time as VEC_DELETE would.
FTS_DELETE_MANY = "DELETE FROM recall_fts WHERE rowid IN (SELECT value FROM json_each(?))"
VEC_GONE = (
    "CREATE TEMP TABLE IF NOT EXISTS recall_vec_gone(fact_seq INTEGER);"
    "CREATE TEMP TRIGGER IF NOT EXISTS recall_vec_gone_delete AFTER INSERT ON recall_vec_gone "
    "BEGIN DELETE FROM main.recall_vec WHERE fact_seq = NEW.fact_seq; END;")
VEC_DELETE_IN_ORDER = ("INSERT INTO temp.recall_vec_gone(fact_seq) "
                       "SELECT value FROM json_each(?) ORDER BY key")
VEC_GONE_CLEAR = "DELETE FROM temp.recall_vec_gone"
# A JSON array of fact seqs in the order sqlite-vec stores their vectors (chunk, then slot),
# from its rowids table (an integer primary key is that table's rowid).
VEC_STORED_ORDER = ("SELECT r.rowid FROM json_each(?) j JOIN recall_vec_rowids r "
                    "ON r.rowid = j.value ORDER BY r.chunk_id, r.chunk_offset")
VEC_STATUS = "UPDATE recall_vec SET status = ? WHERE fact_seq = ?"
# How many vectors: counted in sqlite-vec's own table of their rowids (one row a vector, deleted
# with it). The vec0 table's count(*) reads every chunk: at the end of a 1M-fact ingest's
# re-clustering it took ~0.5 s and 24 MB more anonymous memory, the ingest's peak
# (bench/results_memory.md). VEC_COUNT_SCAN is the fallback for a vec0 without that table.
VEC_COUNT = "SELECT count(*) FROM recall_vec_rowids"
VEC_COUNT_SCAN = "SELECT count(*) FROM recall_vec"
# sqlite-vec numbers its chunks in the order it makes them: a new chunk (256 vectors' worth of
# pages, written out by the COMMIT) shows as a larger max(rowid).
VEC_LAST_CHUNK = "SELECT max(rowid) FROM recall_vec_chunks"
VEC_ROWIDS = "SELECT fact_seq, status FROM recall_vec ORDER BY fact_seq"
VEC_EXISTS = "SELECT 1 FROM sqlite_schema WHERE name = 'recall_vec'"
# sqlite-vec 0.1 looks a cell's chunks up by its partition column with no index: each insert
# asks for the cell's newest chunk (`SELECT max(rowid) FROM recall_vec_chunks WHERE partition00
# = ?`) and a query of a cell for its chunks, each a scan of every chunk row (a ~2 KB row of slot
# rowids per chunk: ~900 at 200k vectors, ~4,000 at 1M). So every vector written, by a fact or
# by a re-clustering's move, cost more as the ledger grew (an insert at 200k vectors: 0.65 ms,
# 0.10 ms with this index), and the re-clustering begun at 180k facts moved 0.58 vectors a fact
# written, barely the 0.5 it must (issue 35, bench/results_recluster.md). This index on its
# chunks table serves both lookups; SQLite keeps it in step, and drops it with the table.
CHUNK_LOOKUP = "recall_vec_chunks_cell"
CHUNK_LOOKUP_CREATE = (f"CREATE INDEX IF NOT EXISTS {CHUNK_LOOKUP} "
                       "ON recall_vec_chunks(partition00)")
CHUNK_LOOKUP_MISSING = (
    "SELECT 1 FROM pragma_table_info('recall_vec_chunks') WHERE name = 'partition00' "
    f"AND NOT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'index' AND name = '{CHUNK_LOOKUP}')")


def add_chunk_lookup(conn: apsw.Connection) -> bool:
    """Give a ledger's vector table the index on its chunks' cell if it lacks it (one made
    before it, or a file edited by hand): a read of the schema, and a write only then. True
    when it was made; False too when another process holds the write lock past the busy
    timeout (the next open makes it)."""
    if conn.execute(CHUNK_LOOKUP_MISSING).fetchone() is None:
        return False
    try:
        conn.execute("BEGIN IMMEDIATE")
    except apsw.BusyError:
        return False
    try:
        conn.execute(CHUNK_LOOKUP_CREATE)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return True


# What recall says of these indexes.
ENGINES = RecallEngines(
    lexical="FTS5 bm25", vectors="sqlite-vec's table", float_rows="sqlite-vec's float32 rows",
    knn="sqlite-vec KNN", inside=" inside SQLite", places="FTS5, sqlite-vec")


class RecallStore(RecallMeta, RecallHits, RecallSearch, RecallBacklog, VecChunks):
    """Rows of the two recall indexes, keyed by the fact's assert seq."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn
        self._freq: dict[str, int] = {}
        self._freq_version: tuple[int, int] | None = None

    def engines(self) -> RecallEngines:
        """What these indexes are, in recall's own words."""
        return ENGINES

    def seal_vectors(self, seal: VectorSeal | None) -> None:
        """Nothing to do here: a file ledger's vectors stay in the clear (sqlite-vec searches
        them), and its erasure's byte scan and file rewrite cover them."""

    def vector_form(self) -> str:
        return "clear"

    def reseal(self, old: VectorSeal, new: VectorSeal) -> int:
        """Nothing to re-seal in a file ledger."""
        return 0

    def refresh_statistics(self) -> None:
        """Nothing to do here: FTS5 and vec0 keep the counts their searches use themselves."""

    def embedder(self) -> tuple[str, int] | None:
        """(name, dimensions) of the embedder the vectors were made with, if any."""
        name = self._conn.execute(META_GET, ("embedder",)).fetchone()
        dims = self._conn.execute(META_GET, ("embedder_dims",)).fetchone()
        layout = self._conn.execute(META_GET, ("recall_layout",)).fetchone()
        if name is None or dims is None or layout is None or layout[0] != LAYOUT:
            return None
        return (str(name[0]), int(dims[0]))

    def create(self, embedder: str, dimensions: int) -> None:
        """(Re)create both indexes empty for an embedder (inside the caller's transaction).
        vec0 tables are dropped and made anew, never renamed (a rename breaks them)."""
        self._conn.execute("DROP TABLE IF EXISTS recall_vocab")
        self._conn.execute("DROP TABLE IF EXISTS recall_fts")
        self._conn.execute(CREATE_FTS)
        self._create_vec(dimensions)
        self._conn.execute(META_PUT, ("embedder", embedder))
        self._conn.execute(META_PUT, ("embedder_dims", str(int(dimensions))))
        self._conn.execute(META_PUT, ("recall_layout", LAYOUT))
        self._new_cells(0)

    def recreate_lexical(self, rows: list[tuple[int, str, str]]) -> None:
        """Replace the lexical index with `rows` (fact_seq, terms, scope), inside the caller's
        transaction. The old table is dropped: secure_delete zeroes its pages."""
        self._conn.execute("DROP TABLE IF EXISTS recall_vocab")
        self._conn.execute("DROP TABLE IF EXISTS recall_fts")
        self._conn.execute(CREATE_FTS)
        self._conn.executemany(FTS_INSERT, rows)
        self._freq.clear()

    def vector_cells(self) -> list[tuple[int, int]]:
        """(fact_seq, cell) of every vector."""
        return [(int(s), int(c)) for s, c in self._conn.execute(VEC_CELLS)]

    def vector_seqs(self, below: int | None = None) -> array[int]:
        """The fact seqs of every vector (in a cell below `below`, if given), as 8 bytes each:
        a list of (seq, cell) tuples took ~90 MB at 1M vectors."""
        out = array("q")
        for seq, cell in self._conn.execute(VEC_CELLS):
            if below is None or cell < below:
                out.append(seq)
        return out

    def vector_seqs_by_cell(self, below: int) -> tuple[array[int], array[int]]:
        """(fact seqs, cells) of the vectors in a cell below `below`, two parallel arrays of 8
        bytes an entry (the caller orders them: the scan gives them in rowid order)."""
        seqs, cells = array("q"), array("q")
        for seq, cell in self._conn.execute(VEC_CELLS):
            if cell < below:
                seqs.append(seq)
                cells.append(cell)
        return seqs, cells

    def lexical_of(self, fact_seqs: Sequence[int]) -> dict[int, tuple[str, str]]:
        """(terms, scope) of the lexical rows of those of `fact_seqs` indexed."""
        return {int(q): (str(t), str(s)) for q, t, s in
                self._conn.execute(FTS_OF, (_json_ints(fact_seqs),))}

    def vectors_of(self, fact_seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        """(fact_seq, vector) of those of `fact_seqs` indexed (a fact's vector never changes
        while its table lives, so these may be read before the write that moves them)."""
        rows = ((seq, self._conn.execute(VEC_SAMPLE, (seq,)).fetchone()) for seq in fact_seqs)
        return [(seq, bytes(row[0])) for seq, row in rows if row is not None]

    def move(self, vectors: list[tuple[int, bytes]], cell_of: Callable[[bytes], int],
             below: int, enough: Callable[[int], bool] | None = None) -> tuple[int, int]:
        """Move those of `vectors` whose row is still in a cell below `below` into the cell
        `cell_of` gives (inside the caller's transaction; status and the other columns are
        read afresh here). A vec0 DELETE zeroes the old slot in place, so no copy of a moved
        vector stays behind. Only the cell changes, so the version token is kept (an
        in-process copy of the vectors stays valid). `enough`, asked after each row with the
        number of chunks sqlite-vec has made so far in this call, ends the move there (the
        first row is always gone through). Returns how many of `vectors` it went through,
        moved or found gone (the rest are left for the next call), and how many chunks it
        made."""
        used = 0
        first = self._last_chunk()
        made = 0
        for seq, vector in vectors:
            used += 1
            row = self._conn.execute(VEC_META_ONE, (seq,)).fetchone()
            if row is not None and int(row[0]) < below:
                self._conn.execute(VEC_DELETE, (seq,))
                # Row by row, so `enough` sees what each costs in all.
                self._insert_vectors([(seq, cell_of(vector), vector, str(row[1]), int(row[2]),
                                       int(row[3]))])
                made = max(0, self._last_chunk() - first)
            if enough is not None and enough(made):
                break
        return used, made

    def _last_chunk(self) -> int:
        """The newest chunk's number (0 when there is none, or sqlite-vec keeps no such
        table: then no chunk is ever counted as made)."""
        try:
            row = self._conn.execute(VEC_LAST_CHUNK).fetchone()
        except apsw.SQLError:
            return 0
        return int(row[0]) if row and row[0] is not None else 0

    def _create_vec(self, dimensions: int) -> None:
        self._bump()
        self._conn.execute("DROP TABLE IF EXISTS recall_vec")
        self._conn.execute("DROP TABLE IF EXISTS recall_cells")
        self._conn.execute(CELLS_CREATE)
        self._conn.execute("CREATE VIRTUAL TABLE recall_vec USING "
                           + VEC_TABLE.format(dimensions=int(dimensions)))
        self._conn.execute(CHUNK_LOOKUP_CREATE)

    def repartition(self, dimensions: int, centroids: list[bytes],
                    rows: list[VecRow]) -> None:
        """Replace the vector table with `rows` (fact_seq, cell, vector, status, space code,
        subject code) under new centroids (inside the caller's transaction). The old
        table is dropped, not renamed; secure_delete zeroes its pages."""
        self._create_vec(dimensions)
        self._conn.executemany(CELLS_INSERT, enumerate(centroids))
        self._insert_vectors(rows)
        self._new_cells(len(rows))

    def iter_vectors(self, chunk: int = 4096) -> Iterator[list[StoredVec]]:
        """Every row of the vector index as `vectors` gives them, `chunk` rows at a time (a
        reader copying them elsewhere never holds them all as Python objects at once)."""
        rows: list[StoredVec] = []
        for r in self._conn.execute(VEC_ALL):
            rows.append((int(r[0]), bytes(r[1]), str(r[2]), int(r[3]), int(r[4])))
            if len(rows) == chunk:
                yield rows
                rows = []
        if rows:
            yield rows

    def vectors(self) -> list[StoredVec]:
        """Every row of the vector index: (fact_seq, vector, status, space code, subject code)."""
        return [(int(r[0]), bytes(r[1]), str(r[2]), int(r[3]), int(r[4]))
                for r in self._conn.execute(VEC_ALL)]

    def add(self, fact_seq: int, terms: str, scope: str, cell: int, vector: bytes, status: str,
            space: str, subject_ref: str) -> tuple[str, str]:
        self._conn.execute(FTS_INSERT, (fact_seq, terms, scope))
        self._insert_vectors([vec_row(fact_seq, cell, vector, status, space, subject_ref)])
        return self._bump()

    def add_many(self, lexical: list[tuple[int, str, str]],
                 vectors: list[VecRow]) -> tuple[str, str]:
        """Several facts at once: (fact_seq, terms, scope) and the vector rows. Returns the
        vector table's version tokens (before, after): the same token twice when no vector
        was written (lexical rows only, their vectors made later off the write path: an
        in-process copy of the vectors stays valid)."""
        self._conn.executemany(FTS_INSERT, lexical)
        if not vectors:
            version = self.vec_version()
            return version, version
        self._insert_vectors(vectors)
        return self._bump()

    def _insert_vectors(self, rows: list[VecRow]) -> None:
        try:
            self._conn.executemany(VEC_INSERT, rows)
        except apsw.SQLError as exc:
            # sqlite-vec reports a full disk as its own error when a new vector chunk (room
            # for a whole chunk of vectors at once) cannot be allocated.
            if "vector chunk" in str(exc) and _no_room(self._conn):
                raise StoreFull("the disk is full (or the ledger reached its page limit): "
                                "the recall index could not grow, and the write was rolled "
                                "back and nothing of it was stored") from exc
            raise

    def apply(self, removed: list[int], restatus: list[tuple[int, str]],
              lexical: list[tuple[int, str, str]],
              vectors: list[VecRow]) -> tuple[str, str]:
        """A batch of index changes: facts `removed`, facts moved to a status (the vector row's
        status column only: the lexical row holds no status), and new rows of facts removed in
        the same batch. The deletes go first, the inserts after them in rowid order (FTS5 writes
        its pending rows out when an insert goes below the last rowid written)."""
        self._conn.executemany(FTS_DELETE, [(s,) for s in removed])
        self._conn.executemany(VEC_DELETE, [(s,) for s in removed])
        self._conn.executemany(VEC_STATUS, [(status, seq) for seq, status in restatus])
        self._conn.executemany(FTS_INSERT, sorted(lexical))
        if vectors:
            self._insert_vectors(vectors)
        return self._bump()

    def remove(self, fact_seq: int) -> tuple[str, str]:
        self._conn.execute(FTS_DELETE, (fact_seq,))
        self._conn.execute(VEC_DELETE, (fact_seq,))
        return self._bump()

    def remove_many(self, fact_seqs: list[int]) -> tuple[str, str]:
        """Remove several facts from both indexes (inside the caller's transaction), a
        statement for each index. Many at once: plain FTS5 deletes (delete markers) and then an
        'optimize', which merges every segment into one without the deleted rows, so no token
        of them stays in the index, as with secure-delete; the old segment rows are freed, and
        secure_delete zeroes them."""
        rows = [(seq,) for seq in fact_seqs]
        if not rows:
            version = self.vec_version()
            return version, version
        bulk = False
        if len(rows) >= BULK_REMOVE_MIN:
            indexed = self._conn.execute(FTS_ROWS).fetchone()
            bulk = len(rows) >= BULK_REMOVE_RATIO * int(indexed[0] if indexed else 0)
        if bulk:
            self._conn.execute(FTS_SECURE, (0,))
            self._conn.execute(FTS_DELETE_MANY, (_json_ints(fact_seqs),))
            self._conn.execute(FTS_OPTIMIZE)
            self._conn.execute(FTS_SECURE, (1,))
        else:
            self._conn.execute(FTS_DELETE_MANY, (_json_ints(fact_seqs),))
        self._conn.execute(VEC_GONE)
        self._conn.execute(VEC_DELETE_IN_ORDER, (_json_ints(self._stored_order(fact_seqs)),))
        self._conn.execute(VEC_GONE_CLEAR)
        self._freq.clear()
        return self._bump()

    def _stored_order(self, fact_seqs: list[int]) -> list[int]:
        """`fact_seqs` in the order their vectors are stored: deleted in that order, each
        chunk's blobs are rewritten while its pages are hot (20k of 84k vectors: 0.7-1.0 s
        against 1.8-1.9 s in seq order). Only the order comes from sqlite-vec's rowids table:
        seqs it does not list keep their turn at the end, and without the table (another
        sqlite-vec) the order is the given one, so every seq is deleted either way."""
        if len(fact_seqs) < 2:
            return fact_seqs
        try:
            stored = [int(r[0]) for r in self._conn.execute(VEC_STORED_ORDER,
                                                            (_json_ints(fact_seqs),))]
        except apsw.SQLError:
            return fact_seqs
        listed = set(stored)
        return stored + [seq for seq in fact_seqs if seq not in listed]

    def set_status(self, fact_seq: int, status: str) -> tuple[str, str]:
        """Move an indexed fact between live and quarantined (its vector row; the lexical row
        holds no status)."""
        self._conn.execute(VEC_STATUS, (status, fact_seq))
        return self._bump()

    def counts(self) -> tuple[int, int]:
        """Rows of the lexical and of the vector index (each a scan of its table)."""
        fts = self._conn.execute(FTS_COUNT).fetchone()
        return (int(fts[0]) if fts else 0, self.vector_count())

    def vector_count(self) -> int:
        """Rows of the vector index (from sqlite-vec's rowids table: no vector is read)."""
        try:
            vec = self._conn.execute(VEC_COUNT).fetchone()
        except apsw.SQLError:  # another sqlite-vec, without that table: scan the vectors
            vec = self._conn.execute(VEC_COUNT_SCAN).fetchone()
        return int(vec[0]) if vec else 0

    def indexed(self) -> tuple[list[int], list[tuple[int, str]]]:
        """Fact seqs in the lexical index; (fact seq, status) in the vector index."""
        return ([int(r[0]) for r in self._conn.execute(FTS_ROWIDS)],
                [(int(s), str(t)) for s, t in self._conn.execute(VEC_ROWIDS)])

    def which_indexed(self, fact_seqs: list[int]) -> set[int]:
        """Those of `fact_seqs` still present in either index (one point lookup per seq in
        each, in two statements: a sweep checks tens of thousands)."""
        if not fact_seqs:
            return set()
        seqs = _json_ints(fact_seqs)
        return {int(r[0]) for sql in (FTS_HOLDS, VEC_HOLDS) for r in self._conn.execute(sql, (seqs,))}

    def exists(self) -> bool:
        return self._conn.execute(VEC_EXISTS).fetchone() is not None


def _json_ints(values: Sequence[int]) -> str:
    """A JSON array of integers, for json_each (one statement over many seqs)."""
    return "[" + ",".join(str(int(v)) for v in values) + "]"


def _no_room(conn: apsw.Connection) -> bool:
    """The page limit is (nearly) reached, or the file system has less than 64 MB free."""
    pages, limit = int(conn.pragma("page_count")), int(conn.pragma("max_page_count"))
    if limit - pages < 1024:
        return True
    path = conn.filename
    try:
        stat = os.statvfs(os.path.dirname(os.path.abspath(path)) if path else ".")
    except OSError:
        return False
    return stat.f_bavail * stat.f_frsize < 64 << 20
