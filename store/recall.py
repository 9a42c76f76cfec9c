"""The recall indexes: FTS5 over keyed word hashes, and a sqlite-vec table filtered by status."""

from __future__ import annotations

import os

import apsw

from store.errors import StoreFull

# The lexical index stores keyed hashes of words, never words: `terms` for the text, `scope`
# for status, space and subject tokens so filters act inside the MATCH, not after the limit.
CREATE_FTS = """
CREATE VIRTUAL TABLE IF NOT EXISTS recall_fts USING fts5(terms, scope, tokenize='unicode61');
INSERT INTO recall_fts(recall_fts, rank) VALUES('secure-delete', 1);
CREATE VIRTUAL TABLE IF NOT EXISTS recall_vocab USING fts5vocab(recall_fts, 'row');
"""
# Documents containing a term (fts5vocab 'row'): used to drop near-universal query terms.
DOC_FREQ = "SELECT doc FROM recall_vocab WHERE term = ?"
VOCAB_EXISTS = "SELECT 1 FROM sqlite_schema WHERE name = 'recall_vocab'"
FTS_INSERT = "INSERT INTO recall_fts(rowid, terms, scope) VALUES (?, ?, ?)"
FTS_DELETE = "DELETE FROM recall_fts WHERE rowid = ?"
# The scope column is a filter only: weight 0, so a rare status, space or subject token does not
# lift its facts' bm25 (with include_claimed, a lone live fact outranked better quarantined ones).
FTS_SEARCH = ("SELECT rowid, bm25(recall_fts, 1.0, 0.0) FROM recall_fts WHERE recall_fts MATCH ? "
              "ORDER BY bm25(recall_fts, 1.0, 0.0) LIMIT ?")
FTS_COUNT = "SELECT count(*) FROM recall_fts"
FTS_ROWIDS = "SELECT rowid FROM recall_fts ORDER BY rowid"
VEC_INSERT = ("INSERT INTO recall_vec(fact_seq, embedding, status, space, subject_ref, embedder) "
              "VALUES (?, ?, ?, ?, ?, ?)")
VEC_DELETE = "DELETE FROM recall_vec WHERE fact_seq = ?"
VEC_STATUS = "UPDATE recall_vec SET status = ? WHERE fact_seq = ?"
VEC_COUNT = "SELECT count(*) FROM recall_vec"
VEC_ROWIDS = "SELECT fact_seq, status FROM recall_vec ORDER BY fact_seq"
VEC_EXISTS = "SELECT 1 FROM sqlite_schema WHERE name = 'recall_vec'"
META_GET = "SELECT value FROM ledger_meta WHERE key = ?"
META_PUT = "INSERT OR REPLACE INTO ledger_meta(key, value) VALUES (?, ?)"


class RecallStore:
    """Rows of the two recall indexes, keyed by the fact's assert seq."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn

    def embedder(self) -> tuple[str, int] | None:
        """(name, dimensions) of the embedder the vectors were made with, if any."""
        name = self._conn.execute(META_GET, ("embedder",)).fetchone()
        dims = self._conn.execute(META_GET, ("embedder_dims",)).fetchone()
        return None if name is None or dims is None else (str(name[0]), int(dims[0]))

    def create(self, embedder: str, dimensions: int) -> None:
        """(Re)create both indexes empty for an embedder (inside the caller's transaction).
        vec0 tables are dropped and made anew, never renamed (a rename breaks them)."""
        self._conn.execute("DROP TABLE IF EXISTS recall_vocab")
        self._conn.execute("DROP TABLE IF EXISTS recall_fts")
        self._conn.execute("DROP TABLE IF EXISTS recall_vec")
        self._conn.execute(CREATE_FTS)
        self._conn.execute(
            "CREATE VIRTUAL TABLE recall_vec USING vec0(fact_seq integer primary key, "
            f"embedding float[{int(dimensions)}] distance_metric=cosine, status text, space text, "
            # Chunks of 256 vectors: every insert rewrites a chunk's blob, and at the default
            # 1024 that cost 200 us per 1024-dim insert here.
            "subject_ref text, +embedder text, chunk_size=256)")
        self._conn.execute(META_PUT, ("embedder", embedder))
        self._conn.execute(META_PUT, ("embedder_dims", str(int(dimensions))))

    def add(self, fact_seq: int, terms: str, scope: str, vector: bytes, status: str, space: str,
            subject_ref: str, embedder: str) -> None:
        self._conn.execute(FTS_INSERT, (fact_seq, terms, scope))
        try:
            self._conn.execute(VEC_INSERT, (fact_seq, vector, status, space, subject_ref,
                                            embedder))
        except apsw.SQLError as exc:
            # sqlite-vec reports a full disk as its own error when a new vector chunk (room
            # for a whole chunk of vectors at once) cannot be allocated.
            if "vector chunk" in str(exc) and _no_room(self._conn):
                raise StoreFull("the disk is full (or the ledger reached its page limit): "
                                "the recall index could not grow, and the write was rolled "
                                "back and nothing of it was stored") from exc
            raise

    def remove(self, fact_seq: int) -> None:
        self._conn.execute(FTS_DELETE, (fact_seq,))
        self._conn.execute(VEC_DELETE, (fact_seq,))

    def set_status(self, fact_seq: int, status: str, scope: str) -> None:
        """Move an indexed fact between live and quarantined in both indexes."""
        row = self._conn.execute("SELECT terms FROM recall_fts WHERE rowid = ?",
                                 (fact_seq,)).fetchone()
        if row is not None:
            self._conn.execute(FTS_DELETE, (fact_seq,))
            self._conn.execute(FTS_INSERT, (fact_seq, row[0], scope))
        self._conn.execute(VEC_STATUS, (status, fact_seq))

    def doc_freq(self, terms: list[str]) -> dict[str, int] | None:
        """How many indexed facts contain each term (None when the vocabulary is missing)."""
        if self._conn.execute(VOCAB_EXISTS).fetchone() is None:
            return None
        out = {}
        for term in terms:
            row = self._conn.execute(DOC_FREQ, (term,)).fetchone()
            out[term] = int(row[0]) if row else 0
        return out

    def lexical(self, match: str, limit: int) -> list[tuple[int, float]]:
        try:
            return [(int(r), float(s)) for r, s in self._conn.execute(FTS_SEARCH, (match, limit))]
        except apsw.SQLError:
            return []

    def vector(self, query: bytes, limit: int, statuses: tuple[str, ...], space: str | None,
               subject_ref: str | None) -> list[tuple[int, float]]:
        """KNN with the filters inside the search, so no filtered-out row takes a slot."""
        where = [f"status IN ({', '.join('?' * len(statuses))})"]
        params: list[object] = [query, limit, *statuses]
        if space is not None:
            where.append("space = ?")
            params.append(space)
        if subject_ref is not None:
            where.append("subject_ref = ?")
            params.append(subject_ref)
        sql = ("SELECT fact_seq, distance FROM recall_vec WHERE embedding MATCH ? AND k = ? AND "
               + " AND ".join(where) + " ORDER BY distance")
        return [(int(r), float(d)) for r, d in self._conn.execute(sql, params)]

    def counts(self) -> tuple[int, int]:
        fts = self._conn.execute(FTS_COUNT).fetchone()
        vec = self._conn.execute(VEC_COUNT).fetchone()
        return (int(fts[0]) if fts else 0, int(vec[0]) if vec else 0)

    def indexed(self) -> tuple[list[int], list[tuple[int, str]]]:
        """Fact seqs in the lexical index; (fact seq, status) in the vector index."""
        return ([int(r[0]) for r in self._conn.execute(FTS_ROWIDS)],
                [(int(s), str(t)) for s, t in self._conn.execute(VEC_ROWIDS)])

    def which_indexed(self, fact_seqs: list[int]) -> set[int]:
        """Those of `fact_seqs` still present in either index."""
        out: set[int] = set()
        for seq in fact_seqs:
            if self._conn.execute("SELECT 1 FROM recall_fts WHERE rowid = ?", (seq,)).fetchone() \
                    or self._conn.execute("SELECT 1 FROM recall_vec WHERE fact_seq = ?",
                                          (seq,)).fetchone():
                out.add(seq)
        return out

    def exists(self) -> bool:
        return self._conn.execute(VEC_EXISTS).fetchone() is not None


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
