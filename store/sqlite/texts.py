"""SQL over the sealed free text of events (event_texts) and the upgrade that fills it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

import apsw

from store.errors import StoreIntegrityError
from store.rows import TextRow, text_row
from store.sqlite.schema import EVENTS_UPDATE_TRIGGER

INSERT = "INSERT INTO event_texts(seq, fact_id, subject_ref, sealed, salt) VALUES (?, ?, ?, ?, ?)"
GET = "SELECT fact_id, subject_ref, sealed, salt FROM event_texts WHERE seq = ?"
FOR_FACT = "SELECT seq, sealed FROM event_texts WHERE fact_id = ? ORDER BY seq"
ERASE_FACT = ("UPDATE event_texts SET sealed = NULL, salt = NULL "
              "WHERE fact_id = ? AND sealed IS NOT NULL")
# A re-key's re-seal (issue 34): the trigger allows only a blob of a higher key generation.
RESEAL = "UPDATE event_texts SET sealed = ? WHERE seq = ?"
FOR_FACTS = ("SELECT fact_id, seq, sealed FROM event_texts "
             "WHERE fact_id IN (SELECT value FROM json_each(?)) ORDER BY seq")
SEALED_OF = ("SELECT fact_id, seq FROM event_texts WHERE fact_id IN (SELECT value FROM json_each(?)) "
             "AND sealed IS NOT NULL ORDER BY seq")
ALL_SEQS = "SELECT seq FROM event_texts ORDER BY seq"
# verify's walk: every row in seq order, a page at a time (no cursor stays half-read for long).
_TEXT_COLS = "seq, fact_id, subject_ref, sealed, salt"
FIRST_PAGE = f"SELECT {_TEXT_COLS} FROM event_texts ORDER BY seq LIMIT ?"
NEXT_PAGE = f"SELECT {_TEXT_COLS} FROM event_texts WHERE seq > ? ORDER BY seq LIMIT ?"
COUNT = "SELECT count(*) FROM event_texts"
ERASED_FACTS = "SELECT DISTINCT fact_id FROM events WHERE kind IN ('forget', 'expire')"
# The one time an event body changes: the upgrade that takes free text out of it. The trigger
# that forbids it is dropped and recreated inside the same transaction.
DROP_UPDATE_TRIGGER = "DROP TRIGGER events_append_only_update"
REWRITE_BODY = "UPDATE events SET body = ? WHERE seq = ?"
SET_META = "INSERT OR REPLACE INTO ledger_meta(key, value) VALUES (?, ?)"
# Candidate events of the upgrade: those that may hold free text in their body.
WITH_TEXT = ("SELECT seq, kind, fact_id, subject, body FROM events WHERE seq > ? AND kind IN "
             "('assert', 'retract', 'confirm', 'reject', 'hold', 'release') ORDER BY seq LIMIT ?")




class TextStore:
    """Sealed free text, one row per event; the schema's triggers allow only erasure."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn

    def put(self, seq: int, fact_id: str, subject_ref: str, sealed: bytes | None,
            salt: str | None) -> None:
        try:
            self._conn.execute(INSERT, (seq, fact_id, subject_ref, sealed, salt))
        except apsw.ConstraintError as exc:
            raise StoreIntegrityError(f"sealed text of event {seq} refused: {exc}") from exc

    def get(self, seq: int) -> TextRow | None:
        """(fact_id, subject_ref, sealed, salt) of an event's sealed text, or None."""
        row = self._conn.execute(GET, (seq,)).fetchone()
        return None if row is None else text_row(row)

    def iter_all(self, batch: int = 5000) -> Iterator[tuple[int, TextRow]]:
        """(seq, the row as `get` gives it) of every row in seq order: what verify merges with
        its walk over the events, instead of one `get` per event."""
        rows = self._conn.execute(FIRST_PAGE, (batch,)).fetchall()
        while rows:
            for r in rows:
                yield int(r[0]), text_row(r[1:])  # type: ignore[arg-type]
            rows = self._conn.execute(NEXT_PAGE, (rows[-1][0], batch)).fetchall()

    def of_fact(self, fact_id: str) -> list[tuple[int, bytes | None]]:
        """(seq, sealed blob or None) of every event about the fact that has sealed text."""
        return [(int(s), None if b is None else bytes(b))
                for s, b in self._conn.execute(FOR_FACT, (fact_id,))]

    def erase_fact(self, fact_id: str) -> None:
        """Null the sealed text of every event about the fact (secure_delete zeroes the pages)."""
        self._conn.execute(ERASE_FACT, (fact_id,))

    def of_facts(self, fact_ids: list[str], chunk: int = 5000) -> dict[str, list[tuple[int, bytes | None]]]:
        """`of_fact` for several facts, a query per `chunk` of them (each fact's rows in seq order)."""
        out: dict[str, list[tuple[int, bytes | None]]] = {f: [] for f in fact_ids}
        for at in range(0, len(fact_ids), chunk):
            for f, s, b in self._conn.execute(FOR_FACTS, (json.dumps(fact_ids[at:at + chunk]),)):
                out[str(f)].append((int(s), None if b is None else bytes(b)))
        return out

    def still_sealed(self, fact_ids: list[str]) -> dict[str, list[int]]:
        """The seqs, in order, of the rows of `fact_ids` that still hold sealed text (only
        the facts that have any)."""
        out: dict[str, list[int]] = {}
        for f, s in self._conn.execute(SEALED_OF, (json.dumps(fact_ids),)):
            out.setdefault(str(f), []).append(int(s))
        return out

    def erase_facts(self, fact_ids: list[str]) -> None:
        """`erase_fact` for several facts, in order."""
        self._conn.executemany(ERASE_FACT, [(f,) for f in fact_ids])

    def reseal(self, rows: list[tuple[int, bytes]]) -> None:
        """Replace each (seq, sealed text) by the same text sealed under a newer key."""
        self._conn.executemany(RESEAL, [(blob, seq) for seq, blob in rows])

    def seqs(self) -> Iterator[int]:
        for row in self._conn.execute(ALL_SEQS).fetchall():
            yield int(row[0])  # type: ignore[arg-type]

    def erased_facts(self) -> set[str]:
        """Facts a forget or expire event erased."""
        return {str(r[0]) for r in self._conn.execute(ERASED_FACTS)}

    def count(self) -> int:
        row = self._conn.execute(COUNT).fetchone()
        return int(row[0]) if row else 0

    def candidates(self, after: int, limit: int) -> list[tuple[int, str, str | None, str | None, str]]:
        """(seq, kind, fact_id, subject, body) of events that may carry free text, a page."""
        return [(int(a), str(b), c, d, str(e))
                for a, b, c, d, e in self._conn.execute(WITH_TEXT, (after, limit))]

    def rewrite_bodies(self, bodies: Iterable[tuple[int, str]]) -> None:
        """Inside a write transaction: replace event bodies (the upgrade only)."""
        self._conn.execute(DROP_UPDATE_TRIGGER)
        self._conn.executemany(REWRITE_BODY, [(body, seq) for seq, body in bodies])
        self._conn.execute(EVENTS_UPDATE_TRIGGER)

    def set_meta(self, key: str, value: str) -> None:
        self._conn.execute(SET_META, (key, value))
