"""SQL over the append-only events table on PostgreSQL; the table and the triggers that keep the
chain whole and the events append-only are declared here (`DDL`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg

from store.errors import StoreIntegrityError
from store.postgres import subjects
from store.postgres.failures import later, queues
from store.rows import EVENT_COLUMNS, EventRow, event_values


# A re-seal (issue 34): a sealed blob replaced by one of a higher key generation ("CV1", then
# the generation as a big-endian u32: bytes 4-7 compare as the numbers do), salt untouched.
def resealed(col: str) -> str:
    return (f"(OLD.{col} IS NOT NULL AND NEW.{col} IS NOT NULL AND length(NEW.{col}) >= 35 "
            f"AND substring(NEW.{col} from 1 for 3) = '\\x435631'::bytea "
            f"AND substring(OLD.{col} from 1 for 3) = '\\x435631'::bytea "
            f"AND substring(NEW.{col} from 4 for 4) > substring(OLD.{col} from 4 for 4) "
            "AND NEW.salt IS NOT DISTINCT FROM OLD.salt)")


EVENTS_ERASE_ONLY = """FUNCTION events_erase_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (
        OLD.kind = 'assert'
        AND (NEW.value IS NULL OR NEW.value IS NOT DISTINCT FROM OLD.value OR """ + resealed("value") + """)
        AND (NEW.salt IS NULL OR NEW.salt IS NOT DISTINCT FROM OLD.salt)
        AND ((NEW.value IS NULL) = (NEW.salt IS NULL))
        AND (NEW.subject IS NULL OR NEW.subject IS NOT DISTINCT FROM OLD.subject
             OR NEW.subject IS NOT DISTINCT FROM (OLD.body::jsonb ->> 'subject_ref'))
        AND NEW.seq IS NOT DISTINCT FROM OLD.seq AND NEW.kind IS NOT DISTINCT FROM OLD.kind
        AND NEW.tx_at IS NOT DISTINCT FROM OLD.tx_at AND NEW.actor IS NOT DISTINCT FROM OLD.actor
        AND NEW.policy_hash IS NOT DISTINCT FROM OLD.policy_hash
        AND NEW.fact_id IS NOT DISTINCT FROM OLD.fact_id AND NEW.body IS NOT DISTINCT FROM OLD.body
        AND NEW.prev_hash IS NOT DISTINCT FROM OLD.prev_hash
        AND NEW.hash IS NOT DISTINCT FROM OLD.hash
    ) THEN
        RAISE EXCEPTION 'custody: events are append-only; only erasure may null parts of an assert'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$"""

# A receipt's spending (docs/evidence.md, "spent"): the verified asserts citing a receipt, by
# (issuer, receipt id, pointer: '' for the whole output), found through this index of the
# events themselves (store.sqlite.schema V11); the queries below repeat its WHERE word for word.
_ISSUER = "(body::jsonb #>> '{cause,receipt,issuer}')"
_RECEIPT_ID = "(body::jsonb #>> '{cause,receipt,receipt_id}')"
_POINTER = "coalesce(body::jsonb #>> '{cause,pointer}', '')"
_RAISED = (f"kind = 'assert' AND (body::jsonb ->> 'provenance') = 'verified' "
           f"AND {_RECEIPT_ID} IS NOT NULL")
RECEIPTS_INDEX = (f"CREATE INDEX IF NOT EXISTS events_receipts ON events({_ISSUER}, "
                  f"{_RECEIPT_ID}, ({_POINTER})) WHERE {_RAISED}")

# Every text column compares and sorts byte by byte (COLLATE "C"), as SQLite's do, whatever
# the database's locale: the same ORDER BY gives the same order on both backends.
DDL: tuple[str, ...] = (
    """CREATE TABLE events(
    seq         bigint PRIMARY KEY,
    kind        text COLLATE "C" NOT NULL,
    tx_at       text COLLATE "C" NOT NULL,
    actor       text COLLATE "C" NOT NULL,
    policy_hash text COLLATE "C" NOT NULL,
    fact_id     text COLLATE "C",
    subject     text COLLATE "C", -- the subject's ref (store.postgres.subjects), NULL once erased
    body        text COLLATE "C" NOT NULL,
    value       bytea,
    salt        text COLLATE "C",
    prev_hash   text COLLATE "C" NOT NULL UNIQUE,
    hash        text COLLATE "C" NOT NULL
)""",
    "CREATE INDEX events_by_fact ON events(fact_id, seq) WHERE fact_id IS NOT NULL",
    "CREATE INDEX events_policy ON events(seq) WHERE kind = 'policy'",
    "CREATE INDEX events_special ON events(kind, seq) WHERE kind IN ('forget_subject', 'checkpoint')",
    "CREATE INDEX events_retractions ON events(seq) WHERE kind = 'retract'",
    RECEIPTS_INDEX,
    # The chain, checked by the database for every writer (a hand-written psql session too):
    # the next seq, linked to the head's hash (the genesis hash for the first), a transaction
    # time not before the head's, and a hash that is sha256(prev_hash || body) (an event sealed
    # by the SQLite schema upgrade, copied here, hashes its body as it was before: verify checks
    # those). UNIQUE(prev_hash) refuses a fork even from a writer that skipped the lock.
    """CREATE FUNCTION events_chain() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    head_seq bigint;
    head_hash text;
    head_tx text;
BEGIN
    SELECT seq, hash, tx_at INTO head_seq, head_hash, head_tx
    FROM events ORDER BY seq DESC LIMIT 1;
    IF head_seq IS NULL THEN
        head_seq := 0;
        head_hash := repeat('0', 64);
        head_tx := '';
    END IF;
    IF NEW.seq IS DISTINCT FROM head_seq + 1 THEN
        RAISE EXCEPTION 'custody: event % is not the next one (the head is event %)',
            NEW.seq, head_seq USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.prev_hash IS DISTINCT FROM head_hash THEN
        RAISE EXCEPTION 'custody: event % does not link to the head''s hash', NEW.seq
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.tx_at < head_tx THEN
        RAISE EXCEPTION 'custody: event % has a transaction time before the head''s', NEW.seq
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF strpos(NEW.body, '"upgraded":true') = 0 AND NEW.hash IS DISTINCT FROM
            encode(sha256(convert_to(NEW.prev_hash || NEW.body, 'UTF8')), 'hex') THEN
        RAISE EXCEPTION 'custody: event % does not match its hash', NEW.seq
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$""",
    """CREATE TRIGGER events_chain BEFORE INSERT ON events
FOR EACH ROW EXECUTE FUNCTION events_chain()""",
    # Only an assert's value with its salt, and its subject, may change, and only to NULL
    # (erasure), the value to a re-seal of it (issue 34), or the subject to the ref its own
    # hashed body names (the sealing of a ledger's plaintext ids, store.postgres.subjects): the
    # condition of store.sqlite.schema.EVENTS_UPDATE_TRIGGER, and that last one.
    "CREATE " + EVENTS_ERASE_ONLY,
    """CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
FOR EACH ROW EXECUTE FUNCTION events_erase_only()""",
    # One refusal for every DELETE and TRUNCATE of an append-only table (its message names it).
    """CREATE FUNCTION custody_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'custody: %', TG_ARGV[0] USING ERRCODE = 'integrity_constraint_violation';
END $$""",
    """CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
FOR EACH ROW EXECUTE FUNCTION custody_refuse('events are append-only; an event cannot be deleted')""",
    """CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
FOR EACH STATEMENT EXECUTE FUNCTION custody_refuse('events are append-only; they cannot be truncated')""",
    # Writer signatures (issue 31): one row per signed event, never changed or removed.
    """CREATE TABLE event_signatures(
    seq       bigint PRIMARY KEY REFERENCES events(seq),
    signature bytea NOT NULL
)""",
    """CREATE TRIGGER event_signatures_no_update BEFORE UPDATE ON event_signatures
FOR EACH ROW EXECUTE FUNCTION custody_refuse('an event signature cannot be changed')""",
    """CREATE TRIGGER event_signatures_no_delete BEFORE DELETE ON event_signatures
FOR EACH ROW EXECUTE FUNCTION custody_refuse('an event signature cannot be deleted')""",
    """CREATE TRIGGER event_signatures_no_truncate BEFORE TRUNCATE ON event_signatures
FOR EACH STATEMENT EXECUTE FUNCTION custody_refuse('event signatures cannot be truncated')""",
)

_COLS = ", ".join(EVENT_COLUMNS)
INSERT = f"INSERT INTO events({_COLS}) VALUES ({', '.join(['%s'] * len(EVENT_COLUMNS))})"
INSERT_SIGNATURE = "INSERT INTO event_signatures(seq, signature) VALUES (%s, %s)"
_SELECT = (f"SELECT {', '.join('e.' + c for c in EVENT_COLUMNS)}, s.signature FROM events e "
           "LEFT JOIN event_signatures s ON s.seq = e.seq")
HEAD = "SELECT seq, hash, tx_at FROM events ORDER BY seq DESC LIMIT 1"
COUNT = "SELECT count(*) FROM events"
BY_SEQ = f"{_SELECT} WHERE e.seq = %s"
RANGE = f"{_SELECT} WHERE e.seq > %s ORDER BY e.seq LIMIT %s"
FOR_FACTS = f"{_SELECT} WHERE e.fact_id = %s ORDER BY e.seq"
LAST_POLICY = "SELECT policy_hash FROM events WHERE kind = 'policy' ORDER BY seq DESC LIMIT 1"
POLICY_EVENTS = "SELECT seq, tx_at, policy_hash FROM events WHERE kind = 'policy' ORDER BY seq"
# SQLite's json_extract(body, '$.pending') = 1 holds for JSON true and for the number 1.
_UNSETTLED = (
    "(r.body::jsonb -> 'pending') IN ('true'::jsonb, '1'::jsonb) AND NOT EXISTS (SELECT 1 "
    "FROM events d WHERE d.fact_id = r.fact_id AND d.seq > r.seq "
    "AND d.kind IN ('confirm', 'reject') AND (d.body::jsonb -> 'retraction') = to_jsonb(r.seq))")
PENDING_RETRACTIONS = (f"SELECT r.seq, r.fact_id, r.actor, r.tx_at, r.body, r.hash FROM events r "
                       f"WHERE r.kind = 'retract' AND {_UNSETTLED} ORDER BY r.seq")
PENDING_RETRACTIONS_OF = (f"SELECT r.seq, r.hash, r.actor FROM events r WHERE r.fact_id = %s "
                          f"AND r.kind = 'retract' AND {_UNSETTLED} ORDER BY r.seq")
RETRACTION_OF = "SELECT seq FROM events WHERE fact_id = %s AND hash = %s AND kind = 'retract'"
PENDING_RETRACTION_OF = (f"SELECT r.seq, r.fact_id, r.actor, r.tx_at, r.body FROM events r "
                         f"WHERE r.fact_id = %s AND r.kind = 'retract' AND {_UNSETTLED} "
                         f"ORDER BY r.seq DESC LIMIT 1")
BY_SEQS = f"{_SELECT} WHERE e.seq = ANY(%s::bigint[]) ORDER BY e.seq"
PRESENTATIONS = ("SELECT fact_id, seq, tx_at FROM events WHERE fact_id IS NOT NULL "
                 "AND kind IN ('assert', 'affirm') ORDER BY fact_id, seq")
FACT_INDEX = ("SELECT fact_id, string_agg(seq::text, ',' ORDER BY seq) FROM events "
              "WHERE fact_id IS NOT NULL GROUP BY fact_id ORDER BY fact_id")
# The same pairs from the table's rows: a condition no index on fact_id can serve.
FACT_ROWS = ("SELECT fact_id, string_agg(seq::text, ',' ORDER BY seq) FROM events "
             "WHERE (fact_id || '') IS NOT NULL GROUP BY fact_id ORDER BY fact_id")
REINDEX = "REINDEX TABLE events"
SPENT_BY = (f"SELECT seq FROM events WHERE {_RAISED} AND {_ISSUER} = %s AND {_RECEIPT_ID} = %s "
            f"AND {_POINTER} = %s ORDER BY seq LIMIT 1")
SPENT_ALL = f"SELECT seq, {_ISSUER}, {_RECEIPT_ID}, {_POINTER} FROM events WHERE {_RAISED} ORDER BY seq"
# In the order asked, as SQLite's json_each gives them.
MISSING = ("SELECT j.s FROM unnest(%s::bigint[]) WITH ORDINALITY AS j(s, n) "
           "WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.seq = j.s) ORDER BY j.n")
HOLDING_VALUE = ("SELECT seq FROM events WHERE seq = ANY(%s::bigint[]) "
                 "AND (length(value) > 0 OR length(salt) > 0)")
ERASE_VALUE = "UPDATE events SET value = NULL, salt = NULL WHERE seq = %s AND kind = 'assert'"
# The same, with the subject's sealed id (one statement: no round trip more).
ERASE_SUBJECT_SEALED = (
    "WITH gone AS (UPDATE subjects SET sealed = NULL WHERE sealed IS NOT NULL AND subject_ref = "
    "(SELECT subject FROM events WHERE seq = %s AND kind = 'assert') RETURNING 1) "
    "UPDATE events SET subject = NULL WHERE seq = %s AND kind = 'assert'")
ERASE_SUBJECT = "UPDATE events SET subject = NULL WHERE seq = %s AND kind = 'assert'"
# A re-key's re-seal (issue 34): the trigger allows only a blob of a higher key generation.
RESEAL_VALUE = "UPDATE events SET value = %s WHERE seq = %s AND kind = 'assert'"


# EventRow.subject's column (its stored form: store.postgres.subjects).
_SUBJECT = EVENT_COLUMNS.index("subject")


def _row(r: tuple[Any, ...]) -> EventRow:
    row = EventRow(*r)
    # bytea comes back as bytes already; memoryview only under a binary cursor.
    if isinstance(row.value, memoryview):
        row.value = bytes(row.value)
    if isinstance(row.signature, memoryview):
        row.signature = bytes(row.signature)
    return row


class EventStore:
    """Appends and reads events; the triggers in `DDL` keep them chained and append-only."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def append(self, row: EventRow) -> None:
        """Inside a write transaction the row goes with the next statement (`later`): the
        chain trigger's refusal fails that statement, at the latest the savepoint's end or
        the commit, and rolls back what the savepoint or transaction wrote."""
        values = self._stored(row)
        if queues(self._conn):
            later(self._conn, INSERT, values)
            if row.signature is not None:
                later(self._conn, INSERT_SIGNATURE, (row.seq, row.signature))
            return
        try:
            self._conn.execute(INSERT, values)
            if row.signature is not None:
                self._conn.execute(INSERT_SIGNATURE, (row.seq, row.signature))
        except StoreIntegrityError as exc:
            raise StoreIntegrityError(f"event {row.seq} refused: {exc}") from exc

    def append_many(self, rows: list[EventRow]) -> None:
        """Several events, in order (the same rows as `append` for each)."""
        if not rows:
            return
        try:
            values = [self._stored(r) for r in rows]
            with self._conn.cursor() as cur:
                cur.executemany(INSERT, values)
                signed = [(r.seq, r.signature) for r in rows if r.signature is not None]
                if signed:
                    cur.executemany(INSERT_SIGNATURE, signed)
        except StoreIntegrityError as exc:
            raise StoreIntegrityError(f"events {rows[0].seq}-{rows[-1].seq} refused: {exc}") from exc

    def _stored(self, row: EventRow) -> tuple[Any, ...]:
        """The row's values as stored: an assert's subject by its ref, its id sealed into
        `subjects` (queued with the event: no round trip of its own)."""
        values = tuple(event_values(row))
        names = subjects.names_of(self._conn)
        if row.subject is None or names is None or not names.sealed:
            return values
        ref, blob = names.seal(row.subject, row.value)
        later(self._conn, subjects.PUT, (ref, blob))
        return values[:_SUBJECT] + (ref,) + values[_SUBJECT + 1:]

    def _rows(self, rows: list[tuple[Any, ...]]) -> list[EventRow]:
        return [_row(r) for r in subjects.named_rows(self._conn, rows, _SUBJECT)]

    def head(self) -> tuple[int, str, str] | None:
        """(seq, hash, tx_at) of the newest event, or None for an empty ledger."""
        row = self._conn.execute(HEAD).fetchone()
        return None if row is None else (int(row[0]), str(row[1]), str(row[2]))

    def count(self) -> int:
        row = self._conn.execute(COUNT).fetchone()
        return int(row[0]) if row else 0

    def get(self, seq: int) -> EventRow | None:
        row = self._conn.execute(BY_SEQ, (seq,)).fetchone()
        return None if row is None else self._rows([row])[0]

    def get_many(self, seqs: list[int], chunk: int = 5000) -> dict[int, EventRow]:
        """Events by seq, a query per `chunk` of them (unknown seqs are left out)."""
        out: dict[int, EventRow] = {}
        for at in range(0, len(seqs), chunk):
            for row in self._rows(self._conn.execute(BY_SEQS, (list(seqs[at:at + chunk]),))
                                  .fetchall()):
                out[row.seq] = row
        return out

    def missing(self, seqs: list[int]) -> list[int]:
        """Those of `seqs` no event has."""
        return [int(r[0]) for r in self._conn.execute(MISSING, (list(seqs),))]

    def holding_value(self, seqs: list[int]) -> set[int]:
        """Those of `seqs` whose event still holds a non-empty value or salt."""
        return {int(r[0]) for r in self._conn.execute(HOLDING_VALUE, (list(seqs),))}

    def for_fact(self, fact_id: str) -> list[EventRow]:
        return self._rows(self._conn.execute(FOR_FACTS, (fact_id,)).fetchall())

    def iter_all(self, batch: int = 5000) -> Iterator[EventRow]:
        """Every event in seq order, fetched in pages so no cursor stays half-read for long."""
        after = 0
        while True:
            rows = self._conn.execute(RANGE, (after, batch)).fetchall()
            if not rows:
                return
            yield from self._rows(rows)
            after = int(rows[-1][0])

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
        if seqs:
            with self._conn.cursor() as cur:
                cur.executemany(ERASE_VALUE, [(s,) for s in seqs])

    def erase_subject(self, seq: int) -> None:
        """The assert's subject goes; on a server its sealed id goes with it (the subject's
        key is destroyed by the same erasure: store.postgres.subjects)."""
        names = subjects.names_of(self._conn)
        if names is not None and names.sealed:
            self._conn.execute(ERASE_SUBJECT_SEALED, (seq, seq))
        else:
            self._conn.execute(ERASE_SUBJECT, (seq,))

    def reseal_values(self, rows: list[tuple[int, bytes]]) -> None:
        """Replace each (seq, sealed value) by the same value sealed under a newer key."""
        if rows:
            with self._conn.cursor() as cur:
                cur.executemany(RESEAL_VALUE, [(blob, seq) for seq, blob in rows])

    def presentations(self) -> Iterator[tuple[str, int, str]]:
        """(fact_id, seq, tx_at) of every assert and affirm, in (fact_id, seq) order."""
        for f, q, t in self._conn.execute(PRESENTATIONS):
            yield str(f), int(q), str(t)

    def fact_index(self) -> Iterator[tuple[str, str]]:
        """(fact_id, the seqs of its events in order, joined by commas), in fact_id order."""
        for f, q in self._conn.execute(FACT_INDEX):
            yield str(f), str(q)

    def fact_rows(self) -> Iterator[tuple[str, str]]:
        """`fact_index`'s rows read from the events table's rows, not through the index."""
        for f, q in self._conn.execute(FACT_ROWS):
            yield str(f), str(q)

    def spent_by(self, issuer: str, receipt_id: str, pointer: str) -> int | None:
        """The seq of the first verified assert citing this receipt for this pointer ('' for
        the whole output): the fact that spent it; None while it is unspent."""
        row = self._conn.execute(SPENT_BY, (issuer, receipt_id, pointer)).fetchone()
        return None if row is None else int(row[0])

    def spent(self) -> Iterator[tuple[int, str, str, str]]:
        """(seq, issuer, receipt id, pointer) of every verified assert citing a receipt, in seq
        order."""
        for q, i, r, p in self._conn.execute(SPENT_ALL):
            yield int(q), str(i), str(r), str(p)

    def reindex(self) -> None:
        """Rebuild every index of the events table from its rows (the events are untouched)."""
        self._conn.execute(REINDEX)
