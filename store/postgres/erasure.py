"""SQL for erasure on PostgreSQL: digests of forgotten values, tombstones, pending scrubs, sweep
candidates (the twin of `store.sqlite.erasure`, same methods and results)."""

from __future__ import annotations

import json
from typing import Any

from store.postgres.projection import fact_rows
from store.postgres.residue import HORIZON
from store.postgres.subjects import named_rows, stored
from store.rows import FACT_COLUMNS, FactRow

# Text is compared and ordered byte for byte, as SQLite's BINARY collation does, whatever the
# database's own collation is.
C = 'COLLATE "C"'

DDL: tuple[str, ...] = (
    # Keyed digests (HMAC under the forget key, kept outside the database) of forgotten values,
    # so a write of the same value for the same subject and predicate does not silently come back.
    """CREATE TABLE forgotten_digests(
    subject_ref text COLLATE "C" NOT NULL,
    predicate   text COLLATE "C" NOT NULL,
    digest      text COLLATE "C" NOT NULL,
    PRIMARY KEY(subject_ref, predicate, digest))""",
    # Content-free erasure tombstones of data principals: written once, never changed (the
    # triggers refusing UPDATE, DELETE and TRUNCATE are schema.TOMBSTONE_TRIGGERS, added after
    # every module's DDL with the events module's custody_refuse()).
    """CREATE TABLE tombstones(
    seq          bigint PRIMARY KEY,
    subject_hash text COLLATE "C" NOT NULL,
    reason       text NOT NULL,
    counts       text NOT NULL,
    at           text COLLATE "C" NOT NULL)""",
    "CREATE INDEX tombstones_by_subject ON tombstones(subject_hash, at)",
    # Erasures whose clean-up could not complete yet: on a server, a place of its certificate
    # still pending (a transaction older than the erasure, old row versions not removed yet).
    """CREATE TABLE pending_scrubs(
    fact_id text COLLATE "C" PRIMARY KEY,
    since   text COLLATE "C" NOT NULL)""",
)

_FCOLS = ", ".join(f"f.{c}" for c in FACT_COLUMNS)
ADD_DIGEST = ("INSERT INTO forgotten_digests(subject_ref, predicate, digest) "
              "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING")
HAS_DIGEST = ("SELECT 1 FROM forgotten_digests WHERE subject_ref = %s AND predicate = %s "
              "AND digest = %s")
# In key order, as SQLite walks its WITHOUT ROWID table.
DIGEST_KEYS = ("SELECT DISTINCT subject_ref, predicate FROM forgotten_digests "
               "ORDER BY subject_ref, predicate")
DROP_DIGESTS = "DELETE FROM forgotten_digests WHERE subject_ref = %s"
# Bodies as text (`::text` is a no-op on the text column the chain hashes).
ERASURE_EVENTS = ("SELECT e.seq, e.kind, e.body::text, a.body::text FROM events e "
                  "LEFT JOIN events a ON a.fact_id = e.fact_id AND a.kind = 'assert' "
                  "WHERE e.kind IN ('forget', 'expire', 'forget_subject') ORDER BY e.seq")
# The lexical index's row of a fact (store.postgres.recall keeps its scope text there).
LEXICAL_SCOPE = "SELECT scope FROM recall_docs WHERE fact_seq = %s"
ADD_TOMBSTONE = ("INSERT INTO tombstones(seq, subject_hash, reason, counts, at) "
                 "VALUES (%s, %s, %s, %s, %s)")
LAST_TOMBSTONE = f"SELECT max(at {C}) FROM tombstones WHERE subject_hash = %s"
TOMBSTONES = "SELECT seq, subject_hash, reason, counts, at FROM tombstones ORDER BY seq"
ADD_PENDING = ("INSERT INTO pending_scrubs(fact_id, since) VALUES (%s, %s) "
               "ON CONFLICT DO NOTHING")
PENDING = f"SELECT fact_id, since FROM pending_scrubs ORDER BY since {C}, fact_id {C}"
CLEAR_PENDING = "DELETE FROM pending_scrubs"
# The erasure's own transaction id, beside its pending rows: a snapshot whose xmin is not after
# it may still read what it replaced (store.postgres.residue; the newest erasure's, which is
# the strictest, when several are pending).
RECORD_HORIZON = ("INSERT INTO ledger_meta(key, value) VALUES (%s, pg_current_xact_id()::text) "
                  "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value")
_NOT_ERASED = "(f.ended IS NULL OR f.ended NOT IN ('forgotten', 'expired'))"
FACTS_OF_SUBJECT = (f"SELECT {_FCOLS} FROM facts f WHERE f.subject = %s AND {_NOT_ERASED} "
                    "ORDER BY f.assert_seq")
ERASED_OF_SUBJECT = (f"SELECT {_FCOLS} FROM facts f WHERE f.subject = %s "
                     "AND f.ended IN ('forgotten', 'expired') ORDER BY f.assert_seq")
SET_SUBJECT = "UPDATE facts SET subject = %s WHERE assert_seq = %s"
SWEEP_CANDIDATES = (f"SELECT {_FCOLS} FROM facts f JOIN events e ON e.seq = f.assert_seq "
                    f"WHERE f.space = %s AND e.tx_at {C} < %s AND {_NOT_ERASED} "
                    "ORDER BY f.assert_seq")
SWEEP_ALL = (f"SELECT {_FCOLS} FROM facts f JOIN events e ON e.seq = f.assert_seq "
             f"WHERE e.tx_at {C} < %s AND {_NOT_ERASED} ORDER BY f.assert_seq")
SWEEP_LEARNED = ("SELECT f.fact_id, e.tx_at FROM facts f JOIN events e ON e.seq = f.assert_seq "
                 f"WHERE (%s::text IS NULL OR f.space = %s::text) AND e.tx_at {C} < %s "
                 f"AND {_NOT_ERASED}")
# Distinct spaces by a loose index scan (one index probe per space), in byte order.
SPACES = f"""
WITH RECURSIVE s(space) AS (
    SELECT min(space {C}) FROM facts
    UNION ALL
    SELECT (SELECT min(space {C}) FROM facts WHERE space {C} > s.space) FROM s
    WHERE s.space IS NOT NULL
)
SELECT space FROM s WHERE space IS NOT NULL"""
SPECIAL_EVENTS = "SELECT seq, body::text FROM events WHERE kind = %s ORDER BY seq"
# A fact's subject as stored (store.postgres.subjects), its space: names reads them apart.
NAMES = "SELECT DISTINCT subject, NULL FROM facts UNION SELECT NULL, space FROM facts"
IS_NAME = ("SELECT 1 FROM facts WHERE subject = %s UNION ALL "
           "SELECT 1 FROM facts WHERE space = %s LIMIT 1")
META_GET = "SELECT value FROM ledger_meta WHERE key = %s"
META_PUT = ("INSERT INTO ledger_meta(key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value")
META_DELETE = "DELETE FROM ledger_meta WHERE key = %s"
LEAKS = "erasure_leaks"
LEAKS_KEPT = 100
REWRITE = "erasure_rewrite_due"
HELD = f"SELECT {_FCOLS} FROM facts f WHERE f.held = 1 ORDER BY f.assert_seq"


class ErasureStore:
    """Rows that erasure reads and writes, beside the events and the projection."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def _rows(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, params).fetchall())

    def _one(self, sql: str, params: tuple[object, ...] = ()) -> tuple[Any, ...] | None:
        row = self._conn.execute(sql, params).fetchone()
        return None if row is None else tuple(row)

    def _many(self, sql: str, rows: list[tuple[object, ...]]) -> None:
        if rows:
            with self._conn.cursor() as cur:
                cur.executemany(sql, rows)

    def add_digest(self, subject_ref: str, predicate: str, digest: str) -> None:
        self._conn.execute(ADD_DIGEST, (subject_ref, predicate, digest))

    def add_digests(self, rows: list[tuple[str, str, str]]) -> None:
        """`add_digest` for each (subject_ref, predicate, digest), in order."""
        self._many(ADD_DIGEST, list(rows))

    def has_digest(self, subject_ref: str, predicate: str, digest: str) -> bool:
        return self._one(HAS_DIGEST, (subject_ref, predicate, digest)) is not None

    def drop_digests(self, subject_ref: str) -> None:
        """Every digest row of the subject (forget_subject: nothing of it may stay keyed)."""
        self._conn.execute(DROP_DIGESTS, (subject_ref,))

    def digest_keys(self) -> list[tuple[str, str]]:
        """(subject_ref, predicate) of every digest row."""
        return [(str(r), str(p)) for r, p in self._rows(DIGEST_KEYS)]

    def erasure_events(self) -> list[tuple[int, str, str, str | None]]:
        """(seq, kind, body, assert body of its fact) of every forget, expire and
        forget_subject event, oldest first."""
        return [(int(s), str(k), str(b), None if a is None else str(a))
                for s, k, b, a in self._rows(ERASURE_EVENTS)]

    def lexical_scope(self, fact_seq: int) -> str | None:
        """The keyed space and subject tokens of a fact's lexical index row (which key made
        them is checked above), None when it has none."""
        row = self._one(LEXICAL_SCOPE, (fact_seq,))
        return None if row is None else str(row[0])

    def erased_of_subject(self, subject: str) -> list[FactRow]:
        return fact_rows(self._conn, self._rows(ERASED_OF_SUBJECT, (stored(self._conn, subject),)))

    def set_subject(self, assert_seq: int, subject: str) -> None:
        self._conn.execute(SET_SUBJECT, (stored(self._conn, subject), assert_seq))

    def add_tombstone(self, seq: int, subject_hash: str, reason: str, counts: str, at: str) -> None:
        self._conn.execute(ADD_TOMBSTONE, (seq, subject_hash, reason, counts, at))

    def last_tombstone_at(self, subject_hash: str) -> str | None:
        """When the subject's latest erasure happened, as the ledger recorded it."""
        row = self._one(LAST_TOMBSTONE, (subject_hash,))
        return None if row is None or row[0] is None else str(row[0])

    def tombstones(self) -> list[tuple[int, str, str, str, str]]:
        return [(int(a), str(b), str(c), str(d), str(e)) for a, b, c, d, e in
                self._rows(TOMBSTONES)]

    def add_pending(self, fact_ids: list[str], since: str) -> None:
        """Pending rows of an erasure, in its transaction, with that transaction's id."""
        self._many(ADD_PENDING, [(f, since) for f in fact_ids])
        if fact_ids:
            self._conn.execute(RECORD_HORIZON, (HORIZON,))

    def pending(self) -> list[tuple[str, str]]:
        return [(str(f), str(s)) for f, s in self._rows(PENDING)]

    def clear_pending(self) -> None:
        """Drop every pending-scrub row and the rewrite-due mark with them."""
        self._conn.execute(CLEAR_PENDING)
        self._conn.execute(META_DELETE, (REWRITE,))
        self._conn.execute(META_DELETE, (HORIZON,))

    def rewrite_due(self) -> dict[str, str] | None:
        """The clean-up an erasure recorded as due and not yet finished, if any (on a server
        nothing records one: a pending place of its certificate keeps the pending rows, and
        store.postgres.residue re-checks it)."""
        row = self._one(META_GET, (REWRITE,))
        return None if row is None else dict(json.loads(row[0]))

    def set_rewrite_due(self, since: str, why: str) -> None:
        self._conn.execute(META_PUT, (REWRITE, json.dumps({"since": since, "why": why},
                                                          sort_keys=True)))

    def facts_of_subject(self, subject: str) -> list[FactRow]:
        return fact_rows(self._conn, self._rows(FACTS_OF_SUBJECT, (stored(self._conn, subject),)))

    def sweep_candidates(self, space: str, cutoff: str) -> list[FactRow]:
        return fact_rows(self._conn, self._rows(SWEEP_CANDIDATES, (space, cutoff)))

    def sweep_candidates_all(self, cutoff: str) -> list[FactRow]:
        """Every space at once (an explicit cutoff): one query, not one per space."""
        return fact_rows(self._conn, self._rows(SWEEP_ALL, (cutoff,)))

    def learned_before(self, space: str | None, cutoff: str) -> dict[str, str]:
        """fact_id -> tx_at of the sweep candidates of `space` (None: every space)."""
        return {str(f): str(t) for f, t in self._rows(SWEEP_LEARNED, (space, space, cutoff))}

    def spaces(self) -> list[str]:
        return [str(r[0]) for r in self._rows(SPACES)]

    def events_of_kind(self, kind: str) -> list[tuple[int, str]]:
        return [(int(s), str(b)) for s, b in self._rows(SPECIAL_EVENTS, (kind,))]

    def is_name(self, text: str) -> bool:
        """Is this string a subject or space of some fact (an identifier that stays)?"""
        return self._one(IS_NAME, (stored(self._conn, text), text)) is not None

    def names(self) -> set[str]:
        """Every subject and space of some fact: `is_name` for many strings at once."""
        rows = named_rows(self._conn, self._rows(NAMES), 0)
        return {str(r[0] if r[0] is not None else r[1]) for r in rows}

    def held(self) -> list[FactRow]:
        return fact_rows(self._conn, self._rows(HELD))

    def leaks(self) -> list[dict[str, object]]:
        """The recorded erasures whose certificate found erased bytes leaking (newest last)."""
        row = self._one(META_GET, (LEAKS,))
        return list(json.loads(row[0])) if row else []

    def add_leak(self, record: dict[str, object]) -> None:
        self._conn.execute(META_PUT, (LEAKS, json.dumps((self.leaks() + [record])[-LEAKS_KEPT:],
                                                        sort_keys=True)))
