"""The schema-6 rewrite of the lexical recall index's rows and the schema-7 copy of the vector
table without its auxiliary column (issue 17): run by the migration."""

from __future__ import annotations

import os

import apsw

from store.recall import FTS_TABLE, LAYOUT, VEC_TABLE, VOCAB
from store.recall_meta import META_GET, META_PUT, VEC_VERSION

# The layout whose vector table had the auxiliary `+embedder text` column.
LAYOUT_WITH_AUXILIARY = "ivf-l2-1"


def drop_status_scope(conn: apsw.Connection) -> int:
    """The schema-6 upgrade of the lexical index (inside the migration's transaction): every
    row rewritten into a new table without the status token that began its scope ("zslive" or
    "zsquarantined"; the space and subject tokens and the terms are kept as they are), the old
    table dropped (secure_delete zeroes its freed pages). Returns how many rows were rewritten;
    0 when the ledger has no lexical index yet (it is made at the first read-write open)."""
    if conn.execute("SELECT 1 FROM sqlite_schema WHERE name = 'recall_fts'").fetchone() is None:
        return 0
    conn.execute("DROP TABLE IF EXISTS recall_vocab")
    conn.execute("DROP TABLE IF EXISTS recall_fts_v6")
    conn.execute(f"CREATE VIRTUAL TABLE recall_fts_v6 USING {FTS_TABLE}")
    conn.execute("INSERT INTO recall_fts_v6(recall_fts_v6, rank) VALUES('secure-delete', 1)")
    conn.execute("INSERT INTO recall_fts_v6(rowid, terms, scope) SELECT rowid, terms, "
                 "CASE WHEN scope LIKE 'zs%' THEN ltrim(substr(scope, instr(scope || ' ', ' '))) "
                 "ELSE scope END FROM recall_fts ORDER BY rowid")
    count = conn.changes()
    conn.execute("DROP TABLE recall_fts")
    conn.execute("ALTER TABLE recall_fts_v6 RENAME TO recall_fts")
    conn.execute(VOCAB)
    return int(count)


def drop_vec_auxiliary(conn: apsw.Connection) -> int:
    """The schema-7 upgrade of the vector index (inside the migration's transaction): its rows
    (fact_seq, cell, vector, status, space, subject_ref) copied into a plain table, the vec0
    table dropped (never renamed: a rename breaks it) and made anew without the auxiliary
    column, the rows put back in fact_seq order in the same cells, the copy dropped
    (secure_delete zeroes the freed pages of both). Nothing is re-embedded; the cells'
    centroids are kept. Returns how many rows were copied; 0 when there is no vector table of
    the layout that had the column (none yet, or an older layout, rebuilt at open anyway)."""
    layout = conn.execute(META_GET, ("recall_layout",)).fetchone()
    exists = conn.execute("SELECT 1 FROM sqlite_schema WHERE name = 'recall_vec'").fetchone()
    dims = conn.execute(META_GET, ("embedder_dims",)).fetchone()
    if exists is None or layout is None or layout[0] != LAYOUT_WITH_AUXILIARY or dims is None:
        return 0
    conn.execute("DROP TABLE IF EXISTS recall_vec_v7")
    conn.execute("CREATE TABLE recall_vec_v7(fact_seq INTEGER PRIMARY KEY, cell INTEGER NOT NULL, "
                 "embedding BLOB NOT NULL, status TEXT, space TEXT, subject_ref TEXT)")
    conn.execute("INSERT INTO recall_vec_v7 SELECT fact_seq, cell, embedding, status, space, "
                 "subject_ref FROM recall_vec")
    count = conn.changes()
    conn.execute("DROP TABLE recall_vec")
    conn.execute("CREATE VIRTUAL TABLE recall_vec USING "
                 + VEC_TABLE.format(dimensions=int(dims[0])))
    conn.execute("INSERT INTO recall_vec(fact_seq, cell, embedding, status, space, subject_ref) "
                 "SELECT fact_seq, cell, embedding, status, space, subject_ref FROM recall_vec_v7 "
                 "ORDER BY fact_seq")
    conn.execute("DROP TABLE recall_vec_v7")
    conn.execute(META_PUT, ("recall_layout", LAYOUT))
    # A new version token: a copy of the vectors another process holds is reloaded.
    conn.execute(META_PUT, (VEC_VERSION, os.urandom(8).hex()))
    return int(count)
