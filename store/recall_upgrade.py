"""The schema-6 rewrite of the lexical recall index's rows (issue 17): run by the migration."""

from __future__ import annotations

import apsw

from store.recall import FTS_TABLE, VOCAB


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
