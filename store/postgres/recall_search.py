"""The recall indexes' searches on PostgreSQL: BM25 over the postings of the (already keyed)
terms with stored statistics, computed as SQLite FTS5's bm25() computes it, and an exact KNN
over the stored vectors in this process (the twin of `store.sqlite.recall_search`)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from store.errors import StoreError
from store.rows import filter_code

# FTS5's bm25() constants (fts5_aux.c): k1, b, and the IDF given to a term found in half the
# rows or more.
K1, B, IDF_FLOOR = 1.2, 0.75, 1e-6
# The expression is FTS5's, operation for operation, in double precision, and each row's sum
# runs over the query's phrases in their order, so the scores are FTS5's to the last bit:
#   idf = log((N - nHit + 0.5) / (nHit + 0.5)), 1e-6 when <= 0 (nHit: rows with the term in
#         the `terms` column);
#   score = -sum(idf * (f * (k1 + 1)) / (f + k1 * (1 - b + b * D / avgdl)))
# with D the row's tokens in both columns and avgdl the mean of D over every row.
# The `scope` column weighs 0 (only a filter), so its phrases add exactly 0 and are left out.
LEXICAL = """
WITH st AS (SELECT docs::float8 AS n, tokens::float8 / docs::float8 AS avgdl
            FROM recall_stats WHERE docs > 0),
q AS (SELECT q.term, q.i, t.hits FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS q(term, i)
      LEFT JOIN recall_terms t ON t.term = q.term),
w AS (SELECT q.term, q.i, ln(((st.n - coalesce(q.hits, 0)) + 0.5::float8)
                             / (coalesce(q.hits, 0) + 0.5::float8)) AS idf
      FROM q CROSS JOIN st)
SELECT p.fact_seq,
       -sum(CASE WHEN w.idf <= 0 THEN %(floor)s::float8 ELSE w.idf END
            * ((p.tf::float8 * (%(k1)s::float8 + 1.0::float8))
               / (p.tf::float8 + %(k1)s::float8 * (1.0::float8 - %(b)s::float8
                                                   + %(b)s::float8 * d.length::float8
                                                   / st.avgdl)))
            ORDER BY w.i) AS score
FROM w JOIN recall_postings p ON p.term = w.term AND p.tf > 0
JOIN recall_docs d ON d.fact_seq = p.fact_seq CROSS JOIN st
WHERE {where}
GROUP BY p.fact_seq
ORDER BY score, p.fact_seq
LIMIT %(limit)s"""
# Each scope token must be in the row's scope column.
IN_SCOPE = ("EXISTS (SELECT 1 FROM recall_postings s WHERE s.term = %({name})s "
            "AND s.fact_seq = p.fact_seq AND s.sf > 0)")
LIVE = "EXISTS (SELECT 1 FROM facts f WHERE f.assert_seq = p.fact_seq AND f.status = 'active')"
DOC_FREQ = "SELECT term, docs FROM recall_terms WHERE term = ANY(%s::text[])"
ROWS = "SELECT docs FROM recall_stats"
CREATED = "SELECT 1 FROM ledger_meta WHERE key = 'recall_layout'"
# A page of the rows passing the filters, in fact seq order (the search keeps only its best
# `limit` between pages, so its memory does not grow with the index).
VEC_SEARCH = ("SELECT fact_seq, embedding FROM recall_vec WHERE {where} AND fact_seq > %s "
              "ORDER BY fact_seq LIMIT %s")
VEC_PAGE = 8192

# The MATCH expressions the layer above builds (custody_app.recall.search.lexical_match):
# `terms: (t1 OR t2 ...)` then any number of ` AND scope: s`.
_MATCH = re.compile(r"\s*terms\s*:\s*\(([^()]*)\)((?:\s+AND\s+scope\s*:\s*[^\s()]+)*)\s*")
_SCOPE = re.compile(r"AND\s+scope\s*:\s*([^\s()]+)")
_OR = re.compile(r"\s+OR\s+")
# One token as FTS5's unicode61 tokenizer reads one (letters and digits; folded to lower case).
_TOKEN = re.compile(r"[^\W_]+")


def tokens(text: str) -> list[str]:
    """The tokens of a lexical column: unicode61's for the text the layer above writes (keyed
    hashes `h` + hex, space-separated; its diacritic folding is not repeated here)."""
    return _TOKEN.findall(text.casefold())


def parse_match(match: str) -> tuple[list[str], list[str]] | None:
    """(terms, scope tokens) of a MATCH expression; None when it is not of the form above (FTS5
    would refuse it as a syntax error, or it needs more than this reading)."""
    found = _MATCH.fullmatch(match)
    if found is None:
        return None
    terms = [t.casefold() for t in _OR.split(found.group(1).strip())]
    scope = [s.casefold() for s in _SCOPE.findall(found.group(2))]
    if not all(_TOKEN.fullmatch(t) for t in terms + scope):
        return None
    return terms, scope


class RecallSearch:
    """Mixed into `RecallStore`."""

    _conn: Any

    def _out(self, fact_seq: int, blob: bytes) -> bytes:  # the vector of a stored row
        raise NotImplementedError

    def doc_freq(self, terms: list[str]) -> dict[str, int] | None:
        """How many indexed facts contain each term, in either column (None when the index
        was never created). One statement; the counts are stored, not walked."""
        if self._conn.execute(CREATED).fetchone() is None:
            return None
        found = {str(t): int(n) for t, n in
                 self._conn.execute(DOC_FREQ, (list(terms),)).fetchall()}
        return {term: found.get(term, 0) for term in terms}

    def lexical(self, match: str, limit: int, *, live_only: bool = False) -> list[tuple[int, float]]:
        """The `limit` best bm25 matches, best (most negative) first, ties by fact seq;
        `live_only`: of active facts only (their status read from the facts table inside the
        query, so quarantined rows take no place). A MATCH this store cannot read: none."""
        parsed = parse_match(match)
        if parsed is None:
            return []
        terms, scope = parsed
        where = ["TRUE"]
        params: dict[str, object] = {"terms": terms, "floor": IDF_FLOOR, "k1": K1, "b": B,
                                     "limit": None if limit < 0 else int(limit)}
        for i, token in enumerate(scope):
            params[f"scope{i}"] = token
            where.append(IN_SCOPE.format(name=f"scope{i}"))
        if live_only:
            where.append(LIVE)
        sql = LEXICAL.format(where=" AND ".join(where))
        return [(int(r), float(s)) for r, s in self._conn.execute(sql, params).fetchall()]

    def lexical_rows_count(self) -> int:
        """How many rows the lexical index holds (the stored count: no scan)."""
        row = self._conn.execute(ROWS).fetchone()
        return 0 if row is None else int(row[0])

    def vector(self, query: bytes, limit: int, statuses: tuple[str, ...], space: str | None,
               subject_ref: str | None, cells: list[int] | None = None) -> list[tuple[int, float]]:
        """Exact KNN (L2, float32 as sqlite-vec computes it) over the rows passing the filters,
        in this process; with `cells`, over those partitions only. Nearest first, ties by
        fact seq."""
        where = ["status = ANY(%s::text[])"]
        params: list[object] = [list(statuses)]
        if cells is not None:
            where.append("cell = ANY(%s::bigint[])")
            params.append([int(c) for c in cells])
        if space is not None:
            where.append("space_code = %s")
            params.append(filter_code("space", space))
        if subject_ref is not None:
            where.append("subject_code = %s")
            params.append(filter_code("subject", subject_ref))
        if limit <= 0:
            return []
        target = np.frombuffer(query, dtype=np.float32)
        statement = VEC_SEARCH.format(where=" AND ".join(where))
        best_seqs, best = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        after = -(2**63)
        while True:
            rows = [(r[0], self._out(int(r[0]), bytes(r[1]))) for r in
                    self._conn.execute(statement, [*params, after, VEC_PAGE]).fetchall()]
            if not rows:
                break
            seqs, distance = _distances(rows, target)
            seqs, distance = np.concatenate((best_seqs, seqs)), np.concatenate((best, distance))
            keep = np.lexsort((seqs, distance))[:limit]
            best_seqs, best = seqs[keep], distance[keep]
            if len(rows) < VEC_PAGE:
                break
            after = int(rows[-1][0])
        return [(int(q), float(d)) for q, d in zip(best_seqs, best, strict=True)]


def _distances(rows: list[Any], target: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any],
                                                                       np.ndarray[Any, Any]]:
    """(fact seqs, L2 distances in float32) of a page of (fact_seq, vector) rows."""
    width = target.size * 4
    if any(len(r[1]) != width for r in rows):
        raise StoreError(f"a stored vector and the query ({target.size} dimensions) differ "
                         "in length", "recall_dimensions")
    seqs = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
    matrix = np.frombuffer(b"".join(bytes(r[1]) for r in rows),
                           dtype=np.float32).reshape(len(rows), target.size)
    square = matrix - target
    square *= square
    # sqlite-vec's L2 (its portable loop: one float32 sum, dimension after dimension, then the
    # square root) to the last bit: a sum in another order (einsum's pairwise one) differs in
    # the last bits, and then vectors at equal true distance (orthogonal to the query, say)
    # came out in another order than on SQLite.
    total = np.zeros(len(rows), dtype=np.float32)
    for column in square.T:
        total += column
    return seqs, np.sqrt(total.astype(np.float64)).astype(np.float32)
