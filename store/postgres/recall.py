"""The recall indexes on PostgreSQL: a postings table of the keyed terms the layer above hands in,
with the statistics BM25 needs stored beside it, and the vectors as bytea rows filtered by
status and partitioned into k-means cells (the twin of `store.sqlite.recall`: same methods,
same results)."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from store.postgres.failures import later
from store.postgres.recall_backlog import RecallBacklog
from store.postgres.recall_meta import CELLS_ALL, CELLS_INSERT, VEC_FORM, RecallMeta
from store.postgres.recall_search import RecallSearch, tokens
from store.postgres.subjects import named_rows
from store.rows import FACT_COLUMNS, FactRow, RecallEngines, VecBlock, VecRow, VectorSeal, blocks_of, vec_row

DDL: tuple[str, ...] = (
    # One row per indexed fact: its terms and scope as handed in (keyed hashes, never words)
    # and its length in tokens (both columns, as FTS5 counts a row's size).
    """CREATE TABLE recall_docs(
    fact_seq bigint PRIMARY KEY,
    terms    text NOT NULL,
    scope    text NOT NULL,
    length   integer NOT NULL)""",
    # A term of a row and how often it occurs there: `tf` in the terms, `sf` in the scope.
    """CREATE TABLE recall_postings(
    term     text COLLATE "C" NOT NULL,
    fact_seq bigint NOT NULL,
    tf       integer NOT NULL,
    sf       integer NOT NULL,
    PRIMARY KEY(term, fact_seq))""",
    "CREATE INDEX recall_postings_by_fact ON recall_postings(fact_seq)",
    # Per term: rows holding it in either column (fts5vocab's 'doc') and in the terms column
    # (bm25's nHit). A term no row holds any more is deleted.
    """CREATE TABLE recall_terms(
    term text COLLATE "C" PRIMARY KEY,
    docs bigint NOT NULL,
    hits bigint NOT NULL)""",
    # Rows and their tokens in all (bm25's N and average length): one row, absent while empty.
    """CREATE TABLE recall_stats(
    one    boolean PRIMARY KEY CHECK (one),
    docs   bigint NOT NULL,
    tokens bigint NOT NULL)""",
    # The vectors (float32, as the SQLite backend stores them), their cell and filters.
    """CREATE TABLE recall_vec(
    fact_seq     bigint PRIMARY KEY,
    cell         bigint NOT NULL,
    embedding    bytea NOT NULL,
    status       text NOT NULL,
    space_code   bigint NOT NULL,
    subject_code bigint NOT NULL)""",
    "CREATE INDEX recall_vec_by_cell ON recall_vec(cell)",
    # `embedding` and `centroid` are sealed (AES-GCM under a key derived from the word index
    # key, bound to the row) unless the policy keeps them in the clear (ledger_meta's
    # recall_vec_form says which).
    """CREATE TABLE recall_cells(
    cell     bigint PRIMARY KEY,
    centroid bytea NOT NULL)""",
)

# Not SQLite's layout name: a ledger copied from SQLite with its ledger_meta has no index
# here yet, and must read as one to build.
LAYOUT = "pg-postings-1"
StoredVec = tuple[int, bytes, str, int, int]  # fact_seq, vector, status, space/subject codes

META_GET = "SELECT value FROM ledger_meta WHERE key = %s"
META_PUT = ("INSERT INTO ledger_meta(key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value")
# A batch of lexical rows, one statement: the rows, their postings, the terms' counts, the
# totals.
LEX_INSERT = """
WITH d AS (INSERT INTO recall_docs(fact_seq, terms, scope, length)
           SELECT * FROM unnest(%(seqs)s::bigint[], %(terms)s::text[], %(scopes)s::text[],
                                %(lengths)s::integer[])),
p AS (INSERT INTO recall_postings(term, fact_seq, tf, sf)
      SELECT * FROM unnest(%(p_terms)s::text[], %(p_seqs)s::bigint[], %(p_tf)s::integer[],
                           %(p_sf)s::integer[])),
t AS (INSERT INTO recall_terms(term, docs, hits)
      SELECT * FROM unnest(%(t_terms)s::text[], %(t_docs)s::bigint[], %(t_hits)s::bigint[])
      ON CONFLICT (term) DO UPDATE SET docs = recall_terms.docs + EXCLUDED.docs,
                                       hits = recall_terms.hits + EXCLUDED.hits)
INSERT INTO recall_stats(one, docs, tokens) VALUES (TRUE, %(n)s, %(tokens)s)
ON CONFLICT (one) DO UPDATE SET docs = recall_stats.docs + EXCLUDED.docs,
                                tokens = recall_stats.tokens + EXCLUDED.tokens"""
# The lexical rows of some facts out, with their postings, terms' counts (a term left in no
# row is deleted) and totals. Each part changes other rows, so one statement does it all.
LEX_DELETE = """
WITH d AS (DELETE FROM recall_docs WHERE fact_seq = ANY(%(seqs)s::bigint[]) RETURNING length),
p AS (DELETE FROM recall_postings WHERE fact_seq = ANY(%(seqs)s::bigint[]) RETURNING term, tf),
c AS (SELECT term, count(*) AS docs, count(*) FILTER (WHERE tf > 0) AS hits FROM p
      GROUP BY term),
u AS (UPDATE recall_terms t SET docs = t.docs - c.docs, hits = t.hits - c.hits FROM c
      WHERE t.term = c.term AND t.docs > c.docs),
x AS (DELETE FROM recall_terms t USING c WHERE t.term = c.term AND t.docs <= c.docs)
UPDATE recall_stats SET docs = docs - (SELECT count(*) FROM d),
                        tokens = tokens - (SELECT coalesce(sum(length), 0) FROM d)
WHERE (SELECT count(*) FROM d) > 0"""
LEX_CLEAR = ("DELETE FROM recall_postings", "DELETE FROM recall_terms",
             "DELETE FROM recall_docs", "DELETE FROM recall_stats")
LEX_OF = "SELECT fact_seq, terms, scope FROM recall_docs WHERE fact_seq = ANY(%s::bigint[])"
LEX_COUNT = "SELECT count(*) FROM recall_docs"
LEX_SEQS = "SELECT fact_seq FROM recall_docs ORDER BY fact_seq"
HOLDS = ("SELECT fact_seq FROM recall_docs WHERE fact_seq = ANY(%(s)s::bigint[]) UNION "
         "SELECT fact_seq FROM recall_vec WHERE fact_seq = ANY(%(s)s::bigint[])")
VEC_INSERT = ("INSERT INTO recall_vec(fact_seq, cell, embedding, status, space_code, "
              "subject_code) SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bytea[], "
              "%s::text[], %s::bigint[], %s::bigint[])")
VEC_DELETE = "DELETE FROM recall_vec WHERE fact_seq = ANY(%s::bigint[])"
VEC_CLEAR = ("DELETE FROM recall_vec", "DELETE FROM recall_cells")
VEC_STATUS = ("UPDATE recall_vec v SET status = m.status FROM unnest(%s::bigint[], %s::text[]) "
              "AS m(fact_seq, status) WHERE v.fact_seq = m.fact_seq")
# Keyset pages, so a reader may use the connection between pages.
VEC_PAGE = ("SELECT fact_seq, embedding, status, space_code, subject_code FROM recall_vec "
            "WHERE fact_seq > %s ORDER BY fact_seq LIMIT %s")
VEC_CELLS = "SELECT fact_seq, cell FROM recall_vec WHERE cell < %s ORDER BY fact_seq"
VEC_OF = "SELECT fact_seq, embedding FROM recall_vec WHERE fact_seq = ANY(%s::bigint[])"
VEC_MOVE = ("UPDATE recall_vec v SET cell = m.cell FROM unnest(%s::bigint[], %s::bigint[]) "
            "AS m(fact_seq, cell) WHERE v.fact_seq = m.fact_seq AND v.cell < %s")
VEC_COUNT = "SELECT count(*) FROM recall_vec"
VEC_ROWIDS = "SELECT fact_seq, status FROM recall_vec ORDER BY fact_seq"
VEC_ALL = "SELECT fact_seq, embedding FROM recall_vec ORDER BY fact_seq"
VEC_RESEAL = ("UPDATE recall_vec v SET embedding = m.embedding FROM unnest(%s::bigint[], "
              "%s::bytea[]) AS m(fact_seq, embedding) WHERE v.fact_seq = m.fact_seq")
CELLS_RESEAL = ("UPDATE recall_cells c SET centroid = m.centroid FROM unnest(%s::bigint[], "
                "%s::bytea[]) AS m(cell, centroid) WHERE c.cell = m.cell")
# Rows re-sealed a statement at a time.
RESEAL_BATCH = 2000
CREATED = "SELECT 1 FROM ledger_meta WHERE key = 'recall_layout'"
ANALYZE = "ANALYZE recall_docs, recall_postings, recall_terms, recall_stats, recall_vec"
# What recall shows of its hits, in one statement: the fact, its assert event's subject ref and
# sealed value, and (seq, tx_at) of its assert and affirm events (salience).
HITS = ("SELECT " + ", ".join(f"f.{c}" for c in FACT_COLUMNS)
        + ", e.body::json ->> 'subject_ref', e.value, "
        "ARRAY(SELECT x.seq FROM events x WHERE x.fact_id = f.fact_id "
        "AND x.kind IN ('assert', 'affirm') ORDER BY x.seq), "
        "ARRAY(SELECT x.tx_at FROM events x WHERE x.fact_id = f.fact_id "
        "AND x.kind IN ('assert', 'affirm') ORDER BY x.seq) "
        "FROM facts f LEFT JOIN events e ON e.seq = f.assert_seq "
        "WHERE f.assert_seq = ANY(%s::bigint[])")
# Rows moved a statement at a time by `move` (`enough` is asked after each of them).
MOVE_BATCH = 32
# A batch of lexical rows of more terms than this is written in several statements.
LEX_BATCH = 5000
Hit = tuple[FactRow, str | None, bytes | None, list[tuple[int, str]]]


# What recall says of these indexes: the lexical ranking is BM25 computed by the server over
# the postings table (FTS5's formula, not FTS5), the vectors are rows of recall_vec, ranked in
# this process (never by the server, never by sqlite-vec).
ENGINES = RecallEngines(
    lexical="BM25 inside PostgreSQL (FTS5's bm25 formula over a postings table of keyed terms "
            "with stored statistics)",
    vectors="the server's recall_vec table", float_rows="the server's float32 rows",
    knn="exact KNN in this process on vectors read from the server's recall_vec table",
    inside="", places="the server's recall_docs, recall_postings, recall_terms, recall_vec")


class RecallStore(RecallMeta, RecallSearch, RecallBacklog):
    """Rows of the two recall indexes, keyed by the fact's assert seq."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._seal: VectorSeal | None = None

    # ---- how vectors are stored ---------------------------------------------------------
    def seal_vectors(self, seal: VectorSeal | None) -> None:
        """Store and read vectors and centroids through `seal` from now on (None: in the
        clear). The layer above chooses, by the form recorded with the index."""
        self._seal = seal

    def vector_form(self) -> str:
        """How the stored vectors are kept: "sealed", or "clear" (also every index built
        before vectors were sealed)."""
        return self._meta(VEC_FORM) or "clear"

    def reseal(self, old: VectorSeal, new: VectorSeal) -> int:
        """Every vector and centroid opened with `old` and sealed again with `new`, and the
        form recorded `new`'s (inside the caller's transaction: a key rotation's, or a change
        between sealed and clear). Returns how many vectors."""
        rows = [(int(s), old.open(int(s), bytes(b)))
                for s, b in self._conn.execute(VEC_ALL).fetchall()]
        for i in range(0, len(rows), RESEAL_BATCH):
            batch = rows[i:i + RESEAL_BATCH]
            self._conn.execute(VEC_RESEAL, ([s for s, _ in batch],
                                            [new.seal(s, v) for s, v in batch]))
        cells = [(int(c), old.open_centroid(int(c), bytes(b)))
                 for c, b in self._conn.execute(CELLS_ALL).fetchall()]
        if cells:
            self._conn.execute(CELLS_RESEAL, ([c for c, _ in cells],
                                              [new.seal_centroid(c, v) for c, v in cells]))
        self._put(VEC_FORM, new.form)
        return len(rows)

    def _out(self, fact_seq: int, blob: bytes) -> bytes:
        return blob if self._seal is None else self._seal.open(fact_seq, blob)

    def _in(self, fact_seq: int, vector: bytes) -> bytes:
        return vector if self._seal is None else self._seal.seal(fact_seq, vector)

    # ---- the index as a whole -----------------------------------------------------------
    def engines(self) -> RecallEngines:
        """What these indexes are, in recall's own words."""
        return ENGINES

    def refresh_statistics(self) -> None:
        """After the indexes were rebuilt in bulk (inside the caller's transaction: ANALYZE
        counts that transaction's own rows): the planner's statistics of the recall tables.
        Without them, until autovacuum gets there, the planner guessed a few rows a table and
        the BM25 query joined every posting with every believed fact (158 ms a query at 10k
        facts right after a copy, bench/results_recall.md section s)."""
        self._conn.execute(ANALYZE)

    def embedder(self) -> tuple[str, int] | None:
        """(name, dimensions) of the embedder the vectors were made with, if any."""
        name, dims, layout = (self._meta(k) for k in ("embedder", "embedder_dims",
                                                      "recall_layout"))
        if name is None or dims is None or layout != LAYOUT:
            return None
        return (name, int(dims))

    def create(self, embedder: str, dimensions: int) -> None:
        """(Re)create both indexes empty for an embedder (inside the caller's transaction).
        The rows are deleted (DELETE, not TRUNCATE: a snapshot older than this transaction
        still reads the index it began with)."""
        self._clear_lexical()
        self._clear_vectors()
        self._put("embedder", embedder)
        self._put("embedder_dims", str(int(dimensions)))
        self._put("recall_layout", LAYOUT)
        self._put(VEC_FORM, "clear" if self._seal is None else self._seal.form)
        self._new_cells(0)

    def exists(self) -> bool:
        """Whether the indexes were created (the tables are always there on a server)."""
        return self._conn.execute(CREATED).fetchone() is not None

    def recreate_lexical(self, rows: list[tuple[int, str, str]]) -> None:
        """Replace the lexical index with `rows` (fact_seq, terms, scope), inside the caller's
        transaction."""
        self._clear_lexical()
        self._insert_lexical(rows)

    def _clear_lexical(self) -> None:
        for sql in LEX_CLEAR:
            self._conn.execute(sql)

    def _clear_vectors(self) -> None:
        self._bump()
        for sql in VEC_CLEAR:
            self._conn.execute(sql)

    # ---- lexical rows -------------------------------------------------------------------
    def _insert_lexical(self, rows: Sequence[tuple[int, str, str]]) -> None:
        """Rows (fact_seq, terms, scope) with their postings and the stored statistics."""
        start = 0
        while start < len(rows):
            batch: list[tuple[int, str, str]] = []
            postings = 0
            while start < len(rows) and (not batch or postings < LEX_BATCH):
                batch.append(rows[start])
                postings += len(rows[start][1]) // 14 + 3  # a keyed term and a space: 14
                start += 1
            later(self._conn, LEX_INSERT, _lexical_params(batch))

    def _delete_lexical(self, fact_seqs: Sequence[int]) -> None:
        if fact_seqs:
            self._conn.execute(LEX_DELETE, {"seqs": [int(s) for s in fact_seqs]})

    def lexical_of(self, fact_seqs: Sequence[int]) -> dict[int, tuple[str, str]]:
        """(terms, scope) of the lexical rows of those of `fact_seqs` indexed."""
        return {int(q): (str(t), str(s)) for q, t, s in
                self._conn.execute(LEX_OF, ([int(s) for s in fact_seqs],)).fetchall()}

    # ---- vectors ------------------------------------------------------------------------
    def _insert_vectors(self, rows: Sequence[VecRow]) -> None:
        if rows:
            columns = list(zip(*rows, strict=True))
            later(self._conn, VEC_INSERT, (
                [int(v) for v in columns[0]], [int(v) for v in columns[1]],
                [self._in(int(s), bytes(v)) for s, v in zip(columns[0], columns[2],
                                                             strict=True)],
                [str(v) for v in columns[3]],
                [int(v) for v in columns[4]], [int(v) for v in columns[5]]))

    def vector_cells(self) -> list[tuple[int, int]]:
        """(fact_seq, cell) of every vector."""
        return [(int(s), int(c)) for s, c in
                self._conn.execute(VEC_CELLS, (2**63 - 1,)).fetchall()]

    def vector_seqs(self, below: int | None = None) -> array[int]:
        """The fact seqs of every vector (in a cell below `below`, if given), as 8 bytes each."""
        return self.vector_seqs_by_cell(2**63 - 1 if below is None else below)[0]

    def vector_seqs_by_cell(self, below: int) -> tuple[array[int], array[int]]:
        """(fact seqs, cells) of the vectors in a cell below `below`, two parallel arrays of 8
        bytes an entry, in fact seq order."""
        seqs, cells = array("q"), array("q")
        with self._conn.cursor() as cur:
            cur.execute(VEC_CELLS, (int(below),))
            while page := cur.fetchmany(8192):
                for seq, cell in page:
                    seqs.append(seq)
                    cells.append(cell)
        return seqs, cells

    def vectors_of(self, fact_seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        """(fact_seq, vector) of those of `fact_seqs` indexed, in the order asked."""
        found = {int(s): self._out(int(s), bytes(v)) for s, v in
                 self._conn.execute(VEC_OF, ([int(s) for s in fact_seqs],)).fetchall()}
        return [(seq, found[seq]) for seq in fact_seqs if seq in found]

    def move(self, vectors: list[tuple[int, bytes]], cell_of: Callable[[bytes], int],
             below: int, enough: Callable[[int], bool] | None = None) -> tuple[int, int]:
        """Move those of `vectors` whose row is still in a cell below `below` into the cell
        `cell_of` gives (inside the caller's transaction); only the cell changes, so the
        version token is kept. A statement per batch of rows (1, 2, 4, ... up to MOVE_BATCH:
        a round trip a row would cost more than the move); `enough` is asked after each row
        with the chunks made so far (always 0: a server table has no vector chunks), and once
        it says so the move ends with that batch. Returns how many of `vectors` it went
        through, moved or found gone (the rest are left for the next call), and 0."""
        used, size = 0, 1
        while used < len(vectors):
            batch = vectors[used:used + size]
            self._conn.execute(VEC_MOVE, ([int(s) for s, _ in batch],
                                          [int(cell_of(v)) for _, v in batch], int(below)))
            asked = 0
            while enough is not None and asked < len(batch):
                asked += 1
                if enough(0):
                    return used + len(batch), 0
            used += len(batch)
            size = min(size * 2, MOVE_BATCH)
        return used, 0

    def repartition(self, dimensions: int, centroids: list[bytes],
                    rows: list[VecRow]) -> None:
        """Replace the vector rows with `rows` (fact_seq, cell, vector, status, space code,
        subject code) under new centroids (inside the caller's transaction)."""
        self._clear_vectors()
        if centroids:
            with self._conn.cursor() as cur:
                cur.executemany(CELLS_INSERT, [(i, self._centroid_in(i, c))
                                               for i, c in enumerate(centroids)])
        self._insert_vectors(rows)
        self._new_cells(len(rows))

    def iter_vectors(self, chunk: int = 4096) -> Iterator[list[StoredVec]]:
        """Every row of the vector index as `vectors` gives them, `chunk` rows at a time (a
        page a statement: the connection is free between pages)."""
        after = -(2**63)
        while True:
            page = self._conn.execute(VEC_PAGE, (after, int(chunk))).fetchall()
            if not page:
                return
            yield [(int(r[0]), self._out(int(r[0]), bytes(r[1])), str(r[2]), int(r[3]),
                    int(r[4])) for r in page]
            if len(page) < chunk:
                return
            after = int(page[-1][0])

    def vectors(self) -> list[StoredVec]:
        """Every row of the vector index: (fact_seq, vector, status, space code, subject code)."""
        return [row for page in self.iter_vectors() for row in page]

    def iter_vector_blocks(self, dimensions: int) -> Iterator[VecBlock]:
        """Every row of the vector index as numpy blocks (`store.rows.VecBlock`)."""
        return blocks_of(self.iter_vectors(), dimensions)

    # ---- writes of both indexes ---------------------------------------------------------
    def add(self, fact_seq: int, terms: str, scope: str, cell: int, vector: bytes, status: str,
            space: str, subject_ref: str) -> tuple[str, str]:
        self._insert_lexical([(fact_seq, terms, scope)])
        self._insert_vectors([vec_row(fact_seq, cell, vector, status, space, subject_ref)])
        return self._bump()

    def add_many(self, lexical: list[tuple[int, str, str]],
                 vectors: list[VecRow]) -> tuple[str, str]:
        """Several facts at once: (fact_seq, terms, scope) and the vector rows. Returns the
        vector table's version tokens (before, after): the same token twice when no vector
        was written (lexical rows only, their vectors made later off the write path: every
        process's copy of the vectors stays valid)."""
        self._insert_lexical(lexical)
        if not vectors:
            version = self.vec_version()
            return version, version
        self._insert_vectors(vectors)
        return self._bump()

    def apply(self, removed: list[int], restatus: list[tuple[int, str]],
              lexical: list[tuple[int, str, str]],
              vectors: list[VecRow]) -> tuple[str, str]:
        """A batch of index changes: facts `removed`, facts moved to a status (the vector row's
        status column only), and new rows of facts removed in the same batch (the deletes go
        first)."""
        self._delete_lexical(removed)
        if removed:
            self._conn.execute(VEC_DELETE, ([int(s) for s in removed],))
        if restatus:
            self._conn.execute(VEC_STATUS, ([int(s) for s, _ in restatus],
                                            [str(t) for _, t in restatus]))
        self._insert_lexical(sorted(lexical))
        self._insert_vectors(vectors)
        return self._bump()

    def remove(self, fact_seq: int) -> tuple[str, str]:
        return self.remove_many([fact_seq])

    def remove_many(self, fact_seqs: list[int]) -> tuple[str, str]:
        """Remove several facts from both indexes (inside the caller's transaction), a
        statement for each index."""
        if not fact_seqs:
            version = self.vec_version()
            return version, version
        self._delete_lexical(fact_seqs)
        self._conn.execute(VEC_DELETE, ([int(s) for s in fact_seqs],))
        return self._bump()

    def set_status(self, fact_seq: int, status: str) -> tuple[str, str]:
        """Move an indexed fact between live and quarantined (its vector row; the lexical row
        holds no status)."""
        self._conn.execute(VEC_STATUS, ([int(fact_seq)], [str(status)]))
        return self._bump()

    # ---- what the indexes hold ----------------------------------------------------------
    def counts(self) -> tuple[int, int]:
        """Rows of the lexical and of the vector index (each a count of its table)."""
        row = self._conn.execute(LEX_COUNT).fetchone()
        return (int(row[0]) if row else 0, self.vector_count())

    def vector_count(self) -> int:
        row = self._conn.execute(VEC_COUNT).fetchone()
        return int(row[0]) if row else 0

    def indexed(self) -> tuple[list[int], list[tuple[int, str]]]:
        """Fact seqs in the lexical index; (fact seq, status) in the vector index."""
        return ([int(r[0]) for r in self._conn.execute(LEX_SEQS).fetchall()],
                [(int(s), str(t)) for s, t in self._conn.execute(VEC_ROWIDS).fetchall()])

    def which_indexed(self, fact_seqs: list[int]) -> set[int]:
        """Those of `fact_seqs` still present in either index (one statement)."""
        if not fact_seqs:
            return set()
        return {int(r[0]) for r in
                self._conn.execute(HOLDS, {"s": [int(s) for s in fact_seqs]}).fetchall()}

    def hits(self, fact_seqs: Sequence[int]) -> dict[int, Hit]:
        """What recall reads of the facts it returns, by assert seq, in one statement (facts
        not found are left out)."""
        out: dict[int, Hit] = {}
        width = len(FACT_COLUMNS)
        fetched = self._conn.execute(HITS, ([int(s) for s in fact_seqs],)).fetchall()
        for row in named_rows(self._conn, fetched, FACT_COLUMNS.index("subject")):
            fact = FactRow(*row[:width])
            ref, value, seqs, times = row[width:width + 4]
            stamps = sorted((int(q), str(t)) for q, t in zip(seqs, times, strict=True))
            out[fact.assert_seq] = (fact, None if ref is None else str(ref),
                                    None if value is None else bytes(value), stamps)
        return out


def _lexical_params(rows: Sequence[tuple[int, str, str]]) -> dict[str, object]:
    """LEX_INSERT's arrays for lexical rows: tokens counted as FTS5 counts them."""
    seqs, terms, scopes, lengths = [], [], [], []
    p_terms: list[str] = []
    p_seqs: list[int] = []
    p_tf: list[int] = []
    p_sf: list[int] = []
    docs: Counter[str] = Counter()
    hits: Counter[str] = Counter()
    total = 0
    for seq, text, scope in rows:
        in_text, in_scope = Counter(tokens(text)), Counter(tokens(scope))
        length = sum(in_text.values()) + sum(in_scope.values())
        seqs.append(int(seq))
        terms.append(str(text))
        scopes.append(str(scope))
        lengths.append(length)
        total += length
        for term in sorted(in_text.keys() | in_scope.keys()):
            p_terms.append(term)
            p_seqs.append(int(seq))
            p_tf.append(in_text[term])
            p_sf.append(in_scope[term])
            docs[term] += 1
            hits[term] += in_text[term] > 0
    order = sorted(docs)
    return {"seqs": seqs, "terms": terms, "scopes": scopes, "lengths": lengths,
            "p_terms": p_terms, "p_seqs": p_seqs, "p_tf": p_tf, "p_sf": p_sf,
            "t_terms": order, "t_docs": [docs[t] for t in order],
            "t_hits": [hits[t] for t in order], "n": len(rows), "tokens": total}
