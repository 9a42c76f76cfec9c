"""SQL over the append-only events table."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import starmap

import apsw

from store.errors import LedgerDamaged, StoreIntegrityError
from store.rows import EVENT_COLUMNS, EventRow, event_values

_COLS = ", ".join(EVENT_COLUMNS)
INSERT = f"INSERT INTO events({_COLS}) VALUES ({', '.join('?' * len(EVENT_COLUMNS))})"
INSERT_SIGNATURE = "INSERT INTO event_signatures(seq, signature) VALUES (?, ?)"
# An event row with its writer's signature (NULL when unsigned), in EventRow's field order.
_SELECT = (f"SELECT {', '.join('e.' + c for c in EVENT_COLUMNS)}, s.signature FROM events e "
           "LEFT JOIN event_signatures s ON s.seq = e.seq")
HEAD = "SELECT seq, hash, tx_at FROM events ORDER BY seq DESC LIMIT 1"
COUNT = "SELECT count(*) FROM events"
BY_SEQ = f"{_SELECT} WHERE e.seq = ?"
RANGE = f"{_SELECT} WHERE e.seq > ? ORDER BY e.seq LIMIT ?"
FOR_FACTS = f"{_SELECT} WHERE e.fact_id = ? ORDER BY e.seq"
LAST_POLICY = "SELECT policy_hash FROM events WHERE kind = 'policy' ORDER BY seq DESC LIMIT 1"
POLICY_EVENTS = "SELECT seq, tx_at, policy_hash FROM events WHERE kind = 'policy' ORDER BY seq"
_UNSETTLED = (
    "json_extract(r.body, '$.pending') = 1 AND NOT EXISTS (SELECT 1 FROM events d "
    "WHERE d.fact_id = r.fact_id AND d.seq > r.seq AND d.kind IN ('confirm', 'reject') "
    "AND json_extract(d.body, '$.retraction') = r.seq)")
PENDING_RETRACTIONS = (f"SELECT r.seq, r.fact_id, r.actor, r.tx_at, r.body, r.hash FROM events r "
                       f"WHERE r.kind = 'retract' AND {_UNSETTLED} ORDER BY r.seq")
PENDING_RETRACTIONS_OF = (f"SELECT r.seq, r.hash, r.actor FROM events r WHERE r.fact_id = ? "
                          f"AND r.kind = 'retract' AND {_UNSETTLED} ORDER BY r.seq")
RETRACTION_OF = "SELECT seq FROM events WHERE fact_id = ? AND hash = ? AND kind = 'retract'"
PENDING_RETRACTION_OF = (f"SELECT r.seq, r.fact_id, r.actor, r.tx_at, r.body FROM events r "
                         f"WHERE r.fact_id = ? AND r.kind = 'retract' AND {_UNSETTLED} "
                         f"ORDER BY r.seq DESC LIMIT 1")
BY_SEQS = (f"{_SELECT} WHERE e.seq IN (SELECT value FROM json_each(?)) ORDER BY e.seq")
# Through the index readers use (events_by_fact), so an index that lost rows is seen.
PRESENTATIONS = ("SELECT fact_id, seq, tx_at FROM events INDEXED BY events_by_fact "
                 "WHERE fact_id IS NOT NULL AND kind IN ('assert', 'affirm') ORDER BY fact_id, seq")
# The fact index alone (it holds fact_id and seq, the rowid): no table row is read; one row a
# fact, its seqs joined in SQLite (a million events are a hundred thousand rows up here).
FACT_INDEX = ("SELECT fact_id, group_concat(seq, ',' ORDER BY seq) FROM events "
              "INDEXED BY events_by_fact WHERE fact_id IS NOT NULL "
              "GROUP BY fact_id ORDER BY fact_id")
# The same pairs read from the events' rows themselves, never the index: the rows verify's walk
# hashed (one read, so the two agree unless the index was edited apart from the table).
FACT_ROWS = ("SELECT fact_id, group_concat(seq, ',' ORDER BY seq) FROM events "
             "NOT INDEXED WHERE fact_id IS NOT NULL GROUP BY fact_id ORDER BY fact_id")
REINDEX = "REINDEX events"
# A receipt's spending: the verified asserts citing it, by (issuer, receipt id, pointer), read
# through the index that holds them (schema V11), whose WHERE these repeat word for word.
_ISSUER = "json_extract(body, '$.cause.receipt.issuer')"
_RECEIPT_ID = "json_extract(body, '$.cause.receipt.receipt_id')"
_POINTER = "coalesce(json_extract(body, '$.cause.pointer'), '')"
_RAISED = (f"kind = 'assert' AND json_extract(body, '$.provenance') = 'verified' "
           f"AND {_RECEIPT_ID} IS NOT NULL")
# The planner takes the index for this (no INDEXED BY: a write stays right, if slower, on a
# file whose index was dropped by hand; doctor and verify name that).
SPENT_BY = (f"SELECT seq FROM events WHERE {_RAISED} "
            f"AND {_ISSUER} = ? AND {_RECEIPT_ID} = ? AND {_POINTER} = ? ORDER BY seq LIMIT 1")
SPENT_ALL = (f"SELECT seq, {_ISSUER}, {_RECEIPT_ID}, {_POINTER} FROM events "
             f"INDEXED BY events_receipts WHERE {_RAISED} ORDER BY seq")
# The proof's row checks, over tens of thousands of seqs in one statement each.
MISSING = ("SELECT j.value FROM json_each(?) j "
           "WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.seq = j.value)")
HOLDING_VALUE = ("SELECT seq FROM events WHERE seq IN (SELECT value FROM json_each(?)) "
                 "AND (length(value) > 0 OR length(salt) > 0)")
ERASE_VALUE = "UPDATE events SET value = NULL, salt = NULL WHERE seq = ? AND kind = 'assert'"
ERASE_SUBJECT = "UPDATE events SET subject = NULL WHERE seq = ? AND kind = 'assert'"
# A re-key's re-seal (issue 34): the trigger allows only a blob of a higher key generation.
RESEAL_VALUE = "UPDATE events SET value = ? WHERE seq = ? AND kind = 'assert'"


def _row(r: tuple[object, ...]) -> EventRow:
    return EventRow(*r)  # type: ignore[arg-type]


class EventStore:
    """Appends and reads events; the triggers in the schema keep them append-only."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn

    def append(self, row: EventRow) -> None:
        try:
            self._conn.execute(INSERT, event_values(row))
            if row.signature is not None:
                self._conn.execute(INSERT_SIGNATURE, (row.seq, row.signature))
        except apsw.ConstraintError as exc:
            raise StoreIntegrityError(f"event {row.seq} refused: {exc}") from exc

    def append_many(self, rows: list[EventRow]) -> None:
        """Several events in one statement, in order (the same rows as `append` for each)."""
        try:
            self._conn.executemany(INSERT, [event_values(r) for r in rows])
            signed = [(r.seq, r.signature) for r in rows if r.signature is not None]
            if signed:
                self._conn.executemany(INSERT_SIGNATURE, signed)
        except apsw.ConstraintError as exc:
            raise StoreIntegrityError(f"events {rows[0].seq}-{rows[-1].seq} refused: {exc}") from exc

    def head(self) -> tuple[int, str, str] | None:
        """(seq, hash, tx_at) of the newest event, or None for an empty ledger."""
        row = self._conn.execute(HEAD).fetchone()
        return None if row is None else (int(row[0]), str(row[1]), str(row[2]))

    def count(self) -> int:
        row = self._conn.execute(COUNT).fetchone()
        return int(row[0]) if row else 0

    def get(self, seq: int) -> EventRow | None:
        row = self._conn.execute(BY_SEQ, (seq,)).fetchone()
        return None if row is None else _row(row)

    def get_many(self, seqs: list[int], chunk: int = 5000) -> dict[int, EventRow]:
        """Events by seq, a query per `chunk` of them (unknown seqs are left out)."""
        out: dict[int, EventRow] = {}
        for at in range(0, len(seqs), chunk):
            for r in self._conn.execute(BY_SEQS, (json.dumps(seqs[at:at + chunk]),)):
                row = _row(r)
                out[row.seq] = row
        return out

    def missing(self, seqs: list[int]) -> list[int]:
        """Those of `seqs` no event has."""
        return [int(r[0]) for r in self._conn.execute(MISSING, (json.dumps(seqs),))]

    def holding_value(self, seqs: list[int]) -> set[int]:
        """Those of `seqs` whose event still holds a non-empty value or salt."""
        return {int(r[0]) for r in self._conn.execute(HOLDING_VALUE, (json.dumps(seqs),))}

    def for_fact(self, fact_id: str) -> list[EventRow]:
        return [_row(r) for r in self._conn.execute(FOR_FACTS, (fact_id,))]

    def iter_all(self, batch: int = 5000) -> Iterator[EventRow]:
        """Every event in seq order, fetched in pages so no cursor stays half-read for long."""
        after = 0
        while True:
            rows = self._conn.execute(RANGE, (after, batch)).fetchall()
            if not rows:
                return
            yield from starmap(EventRow, rows)  # no Python frame a row (verify reads them all)
            after = int(rows[-1][0])  # type: ignore[arg-type]

    def last_policy_hash(self) -> str | None:
        row = self._conn.execute(LAST_POLICY).fetchone()
        return None if row is None else str(row[0])

    def policy_changes(self) -> list[tuple[int, str, str]]:
        return [(int(s), str(t), str(h)) for s, t, h in self._conn.execute(POLICY_EVENTS)]

    def pending_retractions(self) -> list[tuple[int, str, str, str, str, str]]:
        """(seq, fact_id, actor, tx_at, body, hash) of every retraction still waiting for review."""
        return [(int(a), str(b), str(c), str(d), str(e), str(h))
                for a, b, c, d, e, h in self._conn.execute(PENDING_RETRACTIONS)]

    def pending_retractions_of(self, fact_id: str) -> list[tuple[int, str, str]]:
        """(seq, hash, actor) of each retraction of `fact_id` still waiting, oldest first."""
        return [(int(a), str(b), str(c))
                for a, b, c in self._conn.execute(PENDING_RETRACTIONS_OF, (fact_id,))]

    def retraction_of(self, fact_id: str, event_id: str) -> int | None:
        """The seq of the retraction of `fact_id` whose event id (hash) is `event_id`, if any."""
        row = self._conn.execute(RETRACTION_OF, (fact_id, event_id)).fetchone()
        return None if row is None else int(row[0])

    def pending_retraction(self, fact_id: str) -> tuple[int, str, str, str, str] | None:
        """The retraction of `fact_id` still waiting for review, if any."""
        row = self._conn.execute(PENDING_RETRACTION_OF, (fact_id,)).fetchone()
        return None if row is None else (int(row[0]), str(row[1]), str(row[2]), str(row[3]),
                                         str(row[4]))

    def erase_value(self, seq: int) -> None:
        self._conn.execute(ERASE_VALUE, (seq,))

    def erase_values(self, seqs: list[int]) -> None:
        self._conn.executemany(ERASE_VALUE, [(s,) for s in seqs])

    def erase_subject(self, seq: int) -> None:
        self._conn.execute(ERASE_SUBJECT, (seq,))

    def reseal_values(self, rows: list[tuple[int, bytes]]) -> None:
        """Replace each (seq, sealed value) by the same value sealed under a newer key."""
        self._conn.executemany(RESEAL_VALUE, [(blob, seq) for seq, blob in rows])

    def presentations(self) -> Iterator[tuple[str, int, str]]:
        """(fact_id, seq, tx_at) of every assert and affirm, read through the fact index as
        recall's salience and a fact's history read them, in (fact_id, seq) order."""
        for f, q, t in self._conn.execute(PRESENTATIONS):
            yield str(f), int(q), str(t)

    def fact_index(self) -> Iterator[tuple[str, str]]:
        """(fact_id, the seqs of its events in order, joined by commas) for every fact, in
        fact_id order, read from the fact index alone, which every read of a fact's events
        (salience's presentations, history) goes through; rows as SQLite returns them."""
        yield from self._conn.execute(FACT_INDEX)

    def fact_rows(self) -> Iterator[tuple[str, str]]:
        """`fact_index`'s rows read from the events table's rows, not through the index."""
        yield from self._conn.execute(FACT_ROWS)

    def spent_by(self, issuer: str, receipt_id: str, pointer: str) -> int | None:
        """The seq of the first verified assert citing this receipt for this pointer ('' for
        the whole output): the fact that spent it; None while it is unspent."""
        row = self._conn.execute(SPENT_BY, (issuer, receipt_id, pointer)).fetchone()
        return None if row is None else int(row[0])

    def spent(self) -> Iterator[tuple[int, str, str, str]]:
        """(seq, issuer, receipt id, pointer) of every verified assert citing a receipt, in seq
        order, read through the index `spent_by` reads (rows as SQLite returns them)."""
        try:
            yield from self._conn.execute(SPENT_ALL)
        except apsw.SQLError as exc:
            if "no such index" not in str(exc):
                raise
            raise LedgerDamaged("the ledger lacks the index of the receipts its facts cite "
                                "(events_receipts): it was dropped outside custody-app, so "
                                "`doctor` fails its schema") from None

    def reindex(self) -> None:
        """Rebuild every index of the events table from its rows (the events themselves are
        untouched): what repairs an index a hand-edited file emptied or forged."""
        self._conn.execute(REINDEX)
