"""The schema-6 rewrite of the lexical recall index's rows, and the schema-7 and schema-8 copy of
the vector table into the layout sqlite-vec does not leak memory on (issue 17): run by the
migration."""

from __future__ import annotations

import os

import apsw

from store.rows import filter_code
from store.sqlite.recall import FTS_TABLE, LAYOUT, VEC_COLUMNS, VEC_TABLE, VOCAB
from store.sqlite.recall_meta import META_GET, META_PUT, VEC_VERSION

# The layouts the upgrade copies from: "ivf-l2-1" had the auxiliary `+embedder text` column
# (schema 6 and older), "ivf-l2-2" the space and the subject reference as text (schema 7).
OLDER_LAYOUTS = ("ivf-l2-1", "ivf-l2-2")


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


def _filter_code(*args: apsw.SQLiteValue) -> int:
    kind, value = args
    return filter_code(str(kind), str(value))


def recode_vec_table(conn: apsw.Connection) -> int:
    """The schema-7 and schema-8 upgrade of the vector index (inside the migration's
    transaction), from either older layout: "ivf-l2-1" (an auxiliary `+embedder` column) or
    "ivf-l2-2" (the space and the subject reference as text). Its rows are copied into a plain
    table, the space and subject turned into their filter codes on the way; the vec0 table is
    dropped (never renamed: a rename breaks it) and made anew in today's layout; the rows go
    back in fact_seq order in the same cells; the copy is dropped (secure_delete zeroes the
    freed pages of both). Nothing is re-embedded; the cells' centroids are kept. Returns how
    many rows were copied; 0 when there is no vector table of those layouts (none yet, already
    current, or a layout older still, rebuilt at open anyway)."""
    layout = conn.execute(META_GET, ("recall_layout",)).fetchone()
    exists = conn.execute("SELECT 1 FROM sqlite_schema WHERE name = 'recall_vec'").fetchone()
    dims = conn.execute(META_GET, ("embedder_dims",)).fetchone()
    if exists is None or layout is None or layout[0] not in OLDER_LAYOUTS or dims is None:
        return 0
    conn.create_scalar_function("custody_filter_code", _filter_code, 2, deterministic=True)
    try:
        conn.execute("DROP TABLE IF EXISTS recall_vec_copy")
        conn.execute("CREATE TABLE recall_vec_copy(fact_seq INTEGER PRIMARY KEY, "
                     "cell INTEGER NOT NULL, embedding BLOB NOT NULL, status TEXT, "
                     "space_code INTEGER NOT NULL, subject_code INTEGER NOT NULL)")
        conn.execute("INSERT INTO recall_vec_copy SELECT fact_seq, cell, embedding, status, "
                     "custody_filter_code('space', space), "
                     "custody_filter_code('subject', subject_ref) FROM recall_vec")
    finally:
        conn.create_scalar_function("custody_filter_code", None, 2)
    count = conn.changes()
    conn.execute("DROP TABLE recall_vec")
    conn.execute("CREATE VIRTUAL TABLE recall_vec USING "
                 + VEC_TABLE.format(dimensions=int(dims[0])))
    conn.execute(f"INSERT INTO recall_vec({VEC_COLUMNS}) SELECT {VEC_COLUMNS} "
                 "FROM recall_vec_copy ORDER BY fact_seq")
    conn.execute("DROP TABLE recall_vec_copy")
    conn.execute(META_PUT, ("recall_layout", LAYOUT))
    # A new version token: a copy of the vectors another process holds is reloaded.
    conn.execute(META_PUT, (VEC_VERSION, os.urandom(8).hex()))
    return int(count)
