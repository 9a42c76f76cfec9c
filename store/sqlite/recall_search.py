"""The recall indexes' searches: bm25 over the lexical rows, KNN over the vectors (partitioned
by cell), and the document frequencies that weigh query terms."""

from __future__ import annotations

import apsw

from store.rows import filter_code

DOC_FREQ = "SELECT doc FROM recall_vocab WHERE term = ?"
DATA_VERSION = "PRAGMA data_version"
VOCAB_EXISTS = "SELECT 1 FROM sqlite_schema WHERE name = 'recall_vocab'"
# The scope column is a filter only: weight 0, so a rare status, space or subject token does not
# lift its facts' bm25 (with include_claimed, a lone live fact outranked better quarantined ones).
FTS_SEARCH = ("SELECT rowid, bm25(recall_fts, 1.0, 0.0) FROM recall_fts WHERE recall_fts MATCH ? "
              "ORDER BY bm25(recall_fts, 1.0, 0.0) LIMIT ?")
# The same, live facts only: each matching row's status is read from the facts table by its
# assert seq (the facts table is the truth; the index holds believed facts only, so this
# drops the quarantined ones).
FTS_SEARCH_LIVE = ("SELECT rowid, bm25(recall_fts, 1.0, 0.0) FROM recall_fts WHERE recall_fts "
                   "MATCH ? AND EXISTS (SELECT 1 FROM facts f WHERE f.assert_seq = recall_fts.rowid "
                   "AND f.status = 'active') ORDER BY bm25(recall_fts, 1.0, 0.0) LIMIT ?")
# FTS5's averages record (id 1 of the data table) starts with the number of rows as a varint.
FTS_AVERAGES = "SELECT block FROM recall_fts_data WHERE id = 1"




class RecallSearch:
    """Mixed into `RecallStore`."""

    _conn: apsw.Connection
    _freq: dict[str, int]
    _freq_version: tuple[int, int] | None

    def doc_freq(self, terms: list[str]) -> dict[str, int] | None:
        """How many indexed facts contain each term (None when the vocabulary is missing).
        fts5vocab counts by walking a term's doclist, so counts are kept until this or another
        connection changes the database."""
        if self._conn.execute(VOCAB_EXISTS).fetchone() is None:
            return None
        row = self._conn.execute(DATA_VERSION).fetchone()
        version = (int(row[0]) if row else 0, self._conn.total_changes())
        if version != self._freq_version:
            self._freq.clear()
            self._freq_version = version
        out = {}
        for term in terms:
            if term not in self._freq:
                row = self._conn.execute(DOC_FREQ, (term,)).fetchone()
                if len(self._freq) > 50_000:
                    self._freq.clear()
                self._freq[term] = int(row[0]) if row else 0
            out[term] = self._freq[term]
        return out

    def lexical(self, match: str, limit: int, *, live_only: bool = False) -> list[tuple[int, float]]:
        """The `limit` best bm25 matches; `live_only`: of active facts only (their status read
        from the facts table inside the query, so quarantined rows take no place)."""
        sql = FTS_SEARCH_LIVE if live_only else FTS_SEARCH
        try:
            return [(int(r), float(s)) for r, s in self._conn.execute(sql, (match, limit))]
        except apsw.SQLError:
            return []

    def lexical_rows_count(self) -> int:
        """How many rows the lexical index holds, from FTS5's averages record (no scan)."""
        try:
            row = self._conn.execute(FTS_AVERAGES).fetchone()
        except apsw.SQLError:
            return 0
        if row is None or not row[0]:
            return 0
        # An SQLite varint: 7 bits a byte, most significant first, the 9th byte whole.
        value = 0
        for i, byte in enumerate(bytes(row[0])[:9]):
            if i == 8:
                return (value << 8) | byte
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        return value

    def vector(self, query: bytes, limit: int, statuses: tuple[str, ...], space: str | None,
               subject_ref: str | None, cells: list[int] | None = None) -> list[tuple[int, float]]:
        """KNN with the filters inside the search, so no filtered-out row takes a slot; with
        `cells`, only those partitions are read (each gives up to `limit`; the nearest
        `limit` of them all are returned)."""
        where = [f"status IN ({', '.join('?' * len(statuses))})"]
        params: list[object] = [query, limit, *statuses]
        if cells is not None:
            where.append(f"cell IN ({', '.join('?' * len(cells))})")
            params.extend(cells)
        if space is not None:
            where.append("space_code = ?")
            params.append(filter_code("space", space))
        if subject_ref is not None:
            where.append("subject_code = ?")
            params.append(filter_code("subject", subject_ref))
        sql = ("SELECT fact_seq, distance FROM recall_vec WHERE embedding MATCH ? AND k = ? AND "
               + " AND ".join(where))
        # Each cell yields its own k nearest: SQLite merges them and keeps the nearest `limit`.
        sql = (f"WITH hits AS MATERIALIZED ({sql}) "
               f"SELECT fact_seq, distance FROM hits ORDER BY distance LIMIT {int(limit)}")
        return [(int(r), float(d)) for r, d in self._conn.execute(sql, params)]
