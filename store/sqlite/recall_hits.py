"""What recall reads of the facts it returns: one statement for all of them."""

from __future__ import annotations

import json
from collections.abc import Sequence

import apsw

from store.rows import FACT_COLUMNS, FactRow

# What recall shows of its hits, in one statement: the fact, its assert event's subject ref and
# sealed value, and (seq, tx_at) of its assert and affirm events (salience).
HITS = ("SELECT " + ", ".join(f"f.{c}" for c in FACT_COLUMNS)
        + ", json_extract(e.body, '$.subject_ref'), e.value, "
        "(SELECT json_group_array(json_array(x.seq, x.tx_at)) FROM events x "
        "WHERE x.fact_id = f.fact_id AND x.kind IN ('assert', 'affirm')) "
        "FROM facts f LEFT JOIN events e ON e.seq = f.assert_seq "
        "WHERE f.assert_seq IN (SELECT value FROM json_each(?))")
# (fact, subject ref, sealed value, [(seq, tx_at) of its assert and affirm events])
Hit = tuple[FactRow, str | None, bytes | None, list[tuple[int, str]]]


class RecallHits:
    """Mixed into `RecallStore`."""

    _conn: apsw.Connection

    def hits(self, fact_seqs: Sequence[int]) -> dict[int, Hit]:
        """What recall reads of the facts it returns, by assert seq, in one statement (facts
        not found are left out)."""
        out: dict[int, Hit] = {}
        width = len(FACT_COLUMNS)
        for row in self._conn.execute(HITS, (json.dumps([int(s) for s in fact_seqs]),)):
            fact = FactRow(*row[:width])
            ref, value, times = row[width], row[width + 1], row[width + 2]
            stamps = sorted((int(q), str(t)) for q, t in json.loads(times or "[]"))
            out[fact.assert_seq] = (fact, None if ref is None else str(ref),
                                    None if value is None else bytes(value), stamps)
        return out
