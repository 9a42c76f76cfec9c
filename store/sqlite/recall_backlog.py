"""The vector backlog of a file ledger: believed facts whose lexical row is written and whose
vector is not yet (a model embedder's vectors are made off the write path, by
custody_app/recall/embedding.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import apsw

# Facts from a seq on (below another), in one of the given statuses, with a lexical row and
# no vector: a point lookup in each index per fact, in seq order (the facts' primary key).
BACKLOG = ("SELECT f.assert_seq FROM facts f "
           "WHERE f.assert_seq >= ? AND f.assert_seq < ? "
           "AND f.status IN (SELECT value FROM json_each(?)) "
           "AND EXISTS (SELECT 1 FROM recall_fts WHERE rowid = f.assert_seq) "
           "AND NOT EXISTS (SELECT 1 FROM recall_vec WHERE fact_seq = f.assert_seq) "
           "ORDER BY f.assert_seq LIMIT ?")
# Of the given seqs, (seq, status) of those still with a lexical row and no vector: read inside
# the write that adds their vectors, so a fact forgotten, retracted, superseded or erased since
# the vectors were computed (its lexical row gone with its belief) gets none.
EMBEDDABLE = ("SELECT f.assert_seq, f.status FROM json_each(?) j "
              "JOIN facts f ON f.assert_seq = j.value "
              "WHERE EXISTS (SELECT 1 FROM recall_fts WHERE rowid = f.assert_seq) "
              "AND NOT EXISTS (SELECT 1 FROM recall_vec WHERE fact_seq = f.assert_seq)")
LAST_FACT = "SELECT max(assert_seq) FROM facts"


class RecallBacklog:
    """The part of `RecallStore` that finds facts waiting for their vector."""

    _conn: apsw.Connection

    def backlog(self, start: int, stop: int, statuses: Sequence[str], limit: int) -> list[int]:
        """Seqs in [start, stop) of facts in `statuses` indexed lexically without a vector."""
        return [int(r[0]) for r in self._conn.execute(
            BACKLOG, (start, stop, json.dumps(list(statuses)), limit))]

    def embeddable(self, fact_seqs: Sequence[int]) -> dict[int, str]:
        """(seq -> fact status) of those of `fact_seqs` indexed lexically without a vector."""
        return {int(s): str(t) for s, t in self._conn.execute(
            EMBEDDABLE, (json.dumps([int(s) for s in fact_seqs]),))}

    def claim(self, fact_seqs: Sequence[int]) -> list[int]:
        """All of `fact_seqs`: a file's writers are processes of one host, each with its
        worker, and nothing is claimed between them (two that embed the same facts waste the
        work only: the re-check inside the write gives no fact two vectors)."""
        return sorted({int(s) for s in fact_seqs})

    def release(self, fact_seqs: Sequence[int]) -> None:
        """Nothing to give up (no claims in a file)."""

    def last_fact(self) -> int:
        """The highest assert seq of any fact (0: none)."""
        row = self._conn.execute(LAST_FACT).fetchone()
        return int(row[0]) if row and row[0] is not None else 0
