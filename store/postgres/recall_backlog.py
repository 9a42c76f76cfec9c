"""The vector backlog of a server ledger: believed facts whose lexical row is written and whose
vector is not yet (a model embedder's vectors are made off the write path, by
custody_app/recall/embedding.py, in a worker of every process that has the ledger open for
writing, on any host), and the claims that keep two of those workers from embedding the same
facts (the twin of `store.sqlite.recall_backlog`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

# Facts from a seq on (below another), in one of the given statuses, with a lexical row and
# no vector, in seq order (point lookups in both tables' primary keys).
BACKLOG = ("SELECT f.assert_seq FROM facts f "
           "WHERE f.assert_seq >= %s AND f.assert_seq < %s AND f.status = ANY(%s::text[]) "
           "AND EXISTS (SELECT 1 FROM recall_docs d WHERE d.fact_seq = f.assert_seq) "
           "AND NOT EXISTS (SELECT 1 FROM recall_vec v WHERE v.fact_seq = f.assert_seq) "
           "ORDER BY f.assert_seq LIMIT %s")
# Of the given seqs, (seq, status) of those still with a lexical row and no vector: read inside
# the write that adds their vectors (after the ledger's lock, READ COMMITTED: every write that
# ended a belief or added a vector before it is seen), so a fact forgotten, retracted,
# superseded or erased since the vectors were computed gets none, and no fact gets two.
EMBEDDABLE = ("SELECT f.assert_seq, f.status FROM facts f "
              "WHERE f.assert_seq = ANY(%s::bigint[]) "
              "AND EXISTS (SELECT 1 FROM recall_docs d WHERE d.fact_seq = f.assert_seq) "
              "AND NOT EXISTS (SELECT 1 FROM recall_vec v WHERE v.fact_seq = f.assert_seq)")
LAST_FACT = "SELECT max(assert_seq) FROM facts"
# A claim is a session-level advisory lock of the claiming connection, one per fact, taken only
# if free (never waiting): no writer ever takes one, so a claim never holds up a write; the
# server drops a connection's claims when it ends (a killed worker's too). Keyed by the ledger's
# schema and the fact's seq (the 64-bit form of the key; the ledger's write lock is another
# 64-bit key of the same kind, a collision as likely as a 64-bit hash's).
CLAIM = ("SELECT s FROM unnest(%s::bigint[], %s::bigint[]) AS c(s, k) "
         "WHERE pg_try_advisory_lock(k) ORDER BY s")
RELEASE = "SELECT count(*) FILTER (WHERE pg_advisory_unlock(k)) FROM unnest(%s::bigint[]) AS k"
SCHEMA = "SELECT current_schema()"


def claim_key(schema: str, fact_seq: int) -> int:
    """The advisory lock key of a claim on a fact of the ledger in `schema`: signed 64 bits."""
    digest = hashlib.blake2b(f"custody-embed:{schema}:{int(fact_seq)}".encode(),
                             digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class RecallBacklog:
    """The part of `RecallStore` that finds facts waiting for their vector and claims them."""

    _conn: Any
    _claim_schema: str | None = None  # the ledger's schema, read once

    def backlog(self, start: int, stop: int, statuses: Sequence[str], limit: int) -> list[int]:
        """Seqs in [start, stop) of facts in `statuses` indexed lexically without a vector."""
        return [int(r[0]) for r in self._conn.execute(
            BACKLOG, (int(start), int(stop), [str(s) for s in statuses], int(limit))).fetchall()]

    def embeddable(self, fact_seqs: Sequence[int]) -> dict[int, str]:
        """(seq -> fact status) of those of `fact_seqs` indexed lexically without a vector."""
        return {int(s): str(t) for s, t in self._conn.execute(
            EMBEDDABLE, ([int(s) for s in fact_seqs],)).fetchall()}

    def last_fact(self) -> int:
        """The highest assert seq of any fact (0: none)."""
        row = self._conn.execute(LAST_FACT).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def claim(self, fact_seqs: Sequence[int]) -> list[int]:
        """Those of `fact_seqs` this connection now holds a claim on (outside any transaction):
        the ones no other connection (another process's worker, on any host) holds. Held until
        `release`, or until this connection ends."""
        seqs = sorted({int(s) for s in fact_seqs})
        if not seqs:
            return []
        schema = self._schema()
        return [int(r[0]) for r in self._conn.execute(
            CLAIM, (seqs, [claim_key(schema, s) for s in seqs])).fetchall()]

    def release(self, fact_seqs: Sequence[int]) -> None:
        """Give up this connection's claims on `fact_seqs` (outside any transaction)."""
        if fact_seqs:
            schema = self._schema()
            self._conn.execute(RELEASE, ([claim_key(schema, int(s)) for s in fact_seqs],))

    def _schema(self) -> str:
        if self._claim_schema is None:
            row = self._conn.execute(SCHEMA).fetchone()
            self._claim_schema = str(row[0])
        return self._claim_schema
