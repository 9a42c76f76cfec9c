"""SQL over the sealed free text of events (event_texts, PostgreSQL) and the upgrade that
fills it. Mirrors store.sqlite.texts call for call and row for row."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import psycopg
from psycopg import sql

from store.errors import StoreIntegrityError
from store.postgres.bulk import no_limit
from store.postgres.events import resealed
from store.postgres.failures import later, queues
from store.postgres.subjects import named_rows
from store.rows import TextRow, text_row

# Written here: event_texts. Only erasure changes a row (sealed and salt to NULL), as the
# SQLite triggers say; each refusal is events.DDL's `custody_refuse` (SQLSTATE 23000, an
# integrity error), with SQLite's message. TRUNCATE fires no row trigger, so it is refused by
# a statement trigger of its own; an INSERT ... ON CONFLICT DO UPDATE fires the UPDATE
# trigger (SQLite's "no replace" trigger guards its INSERT OR REPLACE, which has no PostgreSQL
# twin: a second row of a seq is refused by the primary key).
# Erased (sealed and salt to NULL) or re-sealed under a newer key (issue 34), nothing else.
TEXTS_ERASE_ONLY = """CREATE TRIGGER event_texts_erase_only BEFORE UPDATE ON event_texts FOR EACH ROW
WHEN (NOT (NEW.seq IS NOT DISTINCT FROM OLD.seq
           AND NEW.fact_id IS NOT DISTINCT FROM OLD.fact_id
           AND NEW.subject_ref IS NOT DISTINCT FROM OLD.subject_ref
           AND ((NEW.sealed IS NULL AND NEW.salt IS NULL) OR """ + resealed("sealed") + """)))
EXECUTE FUNCTION custody_refuse('sealed free text can only be erased or re-sealed')"""
DDL: tuple[str, ...] = (
    """CREATE TABLE event_texts(
    seq         bigint PRIMARY KEY,
    fact_id     text COLLATE "C" NOT NULL,
    subject_ref text COLLATE "C" NOT NULL,
    sealed      bytea,
    salt        text COLLATE "C"
)""",
    "CREATE INDEX event_texts_by_fact ON event_texts(fact_id, seq)",
    TEXTS_ERASE_ONLY,
    """CREATE TRIGGER event_texts_no_delete BEFORE DELETE ON event_texts FOR EACH ROW
EXECUTE FUNCTION custody_refuse('sealed free text cannot be deleted, only erased')""",
    """CREATE TRIGGER event_texts_no_truncate BEFORE TRUNCATE ON event_texts FOR EACH STATEMENT
EXECUTE FUNCTION custody_refuse('sealed free text cannot be truncated, only erased')""",
)

# A second row of a seq inserts nothing (and put raises StoreIntegrityError) instead of an
# error that would abort the caller's whole transaction (SQLite refuses the one statement).
INSERT = ("INSERT INTO event_texts(seq, fact_id, subject_ref, sealed, salt) "
          "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING seq")
# Inside a ledger write transaction the row goes with the next statement (`later`): no answer
# is read then, so a second row of a seq is the primary key's refusal, failing that
# statement (the savepoint or transaction is rolled back whole: nothing of it is stored).
INSERT_QUEUED = ("INSERT INTO event_texts(seq, fact_id, subject_ref, sealed, salt) "
                 "VALUES (%s, %s, %s, %s, %s)")
GET = "SELECT fact_id, subject_ref, sealed, salt FROM event_texts WHERE seq = %s"
# A re-key's re-seal (issue 34): the trigger allows only a blob of a higher key generation.
RESEAL = "UPDATE event_texts SET sealed = %s WHERE seq = %s"
FOR_FACT = "SELECT seq, sealed FROM event_texts WHERE fact_id = %s ORDER BY seq"
ERASE_FACTS = ("UPDATE event_texts SET sealed = NULL, salt = NULL "
               "WHERE fact_id = ANY(%s::text[]) AND sealed IS NOT NULL")
FOR_FACTS = ("SELECT fact_id, seq, sealed FROM event_texts "
             "WHERE fact_id = ANY(%s::text[]) ORDER BY seq")
SEALED_OF = ("SELECT fact_id, seq FROM event_texts WHERE fact_id = ANY(%s::text[]) "
             "AND sealed IS NOT NULL ORDER BY seq")
ALL_SEQS = "SELECT seq FROM event_texts ORDER BY seq"
# verify's walk: every row in seq order, a page at a time (no cursor stays half-read for long).
_TEXT_COLS = "seq, fact_id, subject_ref, sealed, salt"
FIRST_PAGE = f"SELECT {_TEXT_COLS} FROM event_texts ORDER BY seq LIMIT %s"
NEXT_PAGE = f"SELECT {_TEXT_COLS} FROM event_texts WHERE seq > %s ORDER BY seq LIMIT %s"
COUNT = "SELECT count(*) FROM event_texts"
ERASED_FACTS = "SELECT DISTINCT fact_id FROM events WHERE kind IN ('forget', 'expire')"
# The one time an event body changes: the upgrade that takes free text out of it. SQLite drops
# the trigger that forbids it and recreates it in the same transaction; here the events
# table's row triggers that fire on UPDATE (whatever events.py names them) are disabled and
# then enabled again in the mode each had, inside the caller's transaction (DDL is
# transactional: no other session ever sees them off, and the lock ALTER TABLE takes holds
# every other writer of events until the transaction ends).
UPDATE_TRIGGERS = """
SELECT tgname, tgenabled FROM pg_trigger
WHERE tgrelid = 'events'::regclass AND NOT tgisinternal AND tgtype & 16 <> 0
  AND tgenabled <> 'D'
ORDER BY tgname"""
_ENABLE = {"O": "ENABLE TRIGGER", "A": "ENABLE ALWAYS TRIGGER", "R": "ENABLE REPLICA TRIGGER"}
REWRITE_BODY = "UPDATE events SET body = %s WHERE seq = %s"
# ledger_meta is declared by schema.py (read by connection.meta); SQLite's INSERT OR REPLACE.
SET_META = ("INSERT INTO ledger_meta(key, value) VALUES (%s, %s) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value")
# Candidate events of the upgrade: those that may hold free text in their body.
WITH_TEXT = ("SELECT seq, kind, fact_id, subject, body FROM events WHERE seq > %s AND kind IN "
             "('assert', 'retract', 'confirm', 'reject', 'hold', 'release') ORDER BY seq LIMIT %s")



class TextStore:
    """Sealed free text, one row per event; the schema's triggers allow only erasure."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def put(self, seq: int, fact_id: str, subject_ref: str, sealed: bytes | None,
            salt: str | None) -> None:
        if queues(self._conn):
            later(self._conn, INSERT_QUEUED, (seq, fact_id, subject_ref, sealed, salt))
            return
        try:
            row = self._conn.execute(INSERT, (seq, fact_id, subject_ref, sealed, salt)).fetchone()
        except psycopg.IntegrityError as exc:
            raise StoreIntegrityError(f"sealed text of event {seq} refused: {exc}") from exc
        if row is None:
            raise StoreIntegrityError(
                f"sealed text of event {seq} refused: the event has sealed text already")

    def get(self, seq: int) -> TextRow | None:
        """(fact_id, subject_ref, sealed, salt) of an event's sealed text, or None."""
        row = self._conn.execute(GET, (seq,)).fetchone()
        return None if row is None else text_row(row)

    def iter_all(self, batch: int = 5000) -> Iterator[tuple[int, TextRow]]:
        """(seq, the row as `get` gives it) of every row in seq order: what verify merges with
        its walk over the events, instead of one `get` per event."""
        rows = self._conn.execute(FIRST_PAGE, (no_limit(batch),)).fetchall()
        while rows:
            for r in rows:
                yield int(r[0]), text_row(r[1:])
            rows = self._conn.execute(NEXT_PAGE, (rows[-1][0], no_limit(batch))).fetchall()

    def of_fact(self, fact_id: str) -> list[tuple[int, bytes | None]]:
        """(seq, sealed blob or None) of every event about the fact that has sealed text."""
        return [(int(s), None if b is None else bytes(b))
                for s, b in self._conn.execute(FOR_FACT, (fact_id,))]

    def erase_fact(self, fact_id: str) -> None:
        """Null the sealed text of every event about the fact (the old row versions stay in
        the table's files until VACUUM: the erasure's certificate VACUUMs and inspects them,
        store.postgres.residue)."""
        self._conn.execute(ERASE_FACTS, ([fact_id],))

    def of_facts(self, fact_ids: list[str], chunk: int = 5000) -> dict[str, list[tuple[int, bytes | None]]]:
        """`of_fact` for several facts, a query per `chunk` of them (each fact's rows in seq order)."""
        out: dict[str, list[tuple[int, bytes | None]]] = {f: [] for f in fact_ids}
        for at in range(0, len(fact_ids), chunk):
            for f, s, b in self._conn.execute(FOR_FACTS, (fact_ids[at:at + chunk],)):
                out[str(f)].append((int(s), None if b is None else bytes(b)))
        return out

    def still_sealed(self, fact_ids: list[str]) -> dict[str, list[int]]:
        """The seqs, in order, of the rows of `fact_ids` that still hold sealed text (only
        the facts that have any)."""
        out: dict[str, list[int]] = {}
        for f, s in self._conn.execute(SEALED_OF, (fact_ids,)):
            out.setdefault(str(f), []).append(int(s))
        return out

    def reseal(self, rows: list[tuple[int, bytes]]) -> None:
        """Replace each (seq, sealed text) by the same text sealed under a newer key."""
        if rows:
            with self._conn.cursor() as cur:
                cur.executemany(RESEAL, [(blob, seq) for seq, blob in rows])

    def erase_facts(self, fact_ids: list[str]) -> None:
        """`erase_fact` for several facts, in one statement."""
        if fact_ids:
            self._conn.execute(ERASE_FACTS, (fact_ids,))

    def seqs(self) -> Iterator[int]:
        for row in self._conn.execute(ALL_SEQS).fetchall():
            yield int(row[0])

    def erased_facts(self) -> set[str]:
        """Facts a forget or expire event erased."""
        return {str(r[0]) for r in self._conn.execute(ERASED_FACTS)}

    def count(self) -> int:
        row = self._conn.execute(COUNT).fetchone()
        return int(row[0]) if row else 0

    def candidates(self, after: int, limit: int) -> list[tuple[int, str, str | None, str | None, str]]:
        """(seq, kind, fact_id, subject, body) of events that may carry free text, a page."""
        return [(int(a), str(b), c, d, str(e))
                for a, b, c, d, e in named_rows(self._conn, self._conn.execute(
                    WITH_TEXT, (after, no_limit(limit))).fetchall(), 3)]

    def rewrite_bodies(self, bodies: Iterable[tuple[int, str]]) -> None:
        """Inside a write transaction: replace event bodies (the upgrade only)."""
        rows = [(body, seq) for seq, body in bodies]
        if not rows:
            return
        triggers = self._conn.execute(UPDATE_TRIGGERS).fetchall()
        for name, _ in triggers:
            self._conn.execute(sql.SQL("ALTER TABLE events DISABLE TRIGGER {}").format(
                sql.Identifier(name)))
        with self._conn.cursor() as cur:
            cur.executemany(REWRITE_BODY, rows)
        for name, mode in triggers:
            self._conn.execute(sql.SQL("ALTER TABLE events {} {}").format(
                sql.SQL(_ENABLE[mode]), sql.Identifier(name)))

    def set_meta(self, key: str, value: str) -> None:
        later(self._conn, SET_META, (key, value))
