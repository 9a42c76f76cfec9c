"""SQL for erasure: digests of forgotten values, tombstones, pending scrubs, sweep candidates."""

from __future__ import annotations

import json

import apsw

from store.rows import FACT_COLUMNS, FactRow

_FCOLS = ", ".join(f"f.{c}" for c in FACT_COLUMNS)
ADD_DIGEST = ("INSERT OR IGNORE INTO forgotten_digests(subject_ref, predicate, digest) "
              "VALUES (?, ?, ?)")
HAS_DIGEST = ("SELECT 1 FROM forgotten_digests WHERE subject_ref = ? AND predicate = ? "
              "AND digest = ?")
DIGEST_KEYS = "SELECT DISTINCT subject_ref, predicate FROM forgotten_digests"
DROP_DIGESTS = "DELETE FROM forgotten_digests WHERE subject_ref = ?"
# The erasure events in order, each forget/expire with its fact's assert body (subject, predicate).
ERASURE_EVENTS = ("SELECT e.seq, e.kind, e.body, a.body FROM events e "
                  "LEFT JOIN events a ON a.fact_id = e.fact_id AND a.kind = 'assert' "
                  "WHERE e.kind IN ('forget', 'expire', 'forget_subject') ORDER BY e.seq")
LEXICAL_SCOPE = "SELECT scope FROM recall_fts WHERE rowid = ?"
ADD_TOMBSTONE = ("INSERT INTO tombstones(seq, subject_hash, reason, counts, at) "
                 "VALUES (?, ?, ?, ?, ?)")
LAST_TOMBSTONE = "SELECT max(at) FROM tombstones WHERE subject_hash = ?"
TOMBSTONES = "SELECT seq, subject_hash, reason, counts, at FROM tombstones ORDER BY seq"
ADD_PENDING = "INSERT OR IGNORE INTO pending_scrubs(fact_id, since) VALUES (?, ?)"
PENDING = "SELECT fact_id, since FROM pending_scrubs ORDER BY since, fact_id"
CLEAR_PENDING = "DELETE FROM pending_scrubs"
FACTS_OF_SUBJECT = (f"SELECT {_FCOLS} FROM facts f WHERE f.subject = ? "
                    "AND (f.ended IS NULL OR f.ended NOT IN ('forgotten', 'expired')) "
                    "ORDER BY f.assert_seq")
# Facts of a subject erased earlier (by forget or sweep) that still carry its plaintext id.
ERASED_OF_SUBJECT = (f"SELECT {_FCOLS} FROM facts f WHERE f.subject = ? "
                     "AND f.ended IN ('forgotten', 'expired') ORDER BY f.assert_seq")
SET_SUBJECT = "UPDATE facts SET subject = ? WHERE assert_seq = ?"
# Facts of a space learned (asserted) strictly before a cutoff, not yet erased.
SWEEP_CANDIDATES = (f"SELECT {_FCOLS} FROM facts f JOIN events e ON e.seq = f.assert_seq "
                    "WHERE f.space = ? AND e.tx_at < ? "
                    "AND (f.ended IS NULL OR f.ended NOT IN ('forgotten', 'expired')) "
                    "ORDER BY f.assert_seq")
SWEEP_ALL = (f"SELECT {_FCOLS} FROM facts f JOIN events e ON e.seq = f.assert_seq "
             "WHERE e.tx_at < ? "
             "AND (f.ended IS NULL OR f.ended NOT IN ('forgotten', 'expired')) "
             "ORDER BY f.assert_seq")
# When each of those candidates was learned (its assert's transaction time): one query per
# sweep space, for the reason the sweep gives each fact it expires.
SWEEP_LEARNED = ("SELECT f.fact_id, e.tx_at FROM facts f JOIN events e ON e.seq = f.assert_seq "
                 "WHERE (? IS NULL OR f.space = ?) AND e.tx_at < ? "
                 "AND (f.ended IS NULL OR f.ended NOT IN ('forgotten', 'expired'))")
# Distinct spaces by a loose index scan: one index probe per space, not a scan of all facts.
SPACES = """
WITH RECURSIVE s(space) AS (
    SELECT min(space) FROM facts
    UNION ALL
    SELECT (SELECT min(space) FROM facts WHERE space > s.space) FROM s WHERE s.space IS NOT NULL
)
SELECT space FROM s WHERE space IS NOT NULL"""
SPECIAL_EVENTS = "SELECT seq, body FROM events WHERE kind = ? ORDER BY seq"
# The same for a kind the partial index events_special holds: SQLite uses a partial index only
# where the query states its condition (a bound `kind = ?` alone scans every event).
INDEXED_KINDS = ("forget_subject", "checkpoint")
SPECIAL_INDEXED = ("SELECT seq, body FROM events WHERE kind IN ('forget_subject', 'checkpoint') "
                   "AND kind = ? ORDER BY seq")
NAMES = "SELECT subject FROM facts UNION SELECT space FROM facts"
IS_NAME = ("SELECT 1 FROM facts WHERE subject = ?1 UNION ALL "
           "SELECT 1 FROM facts WHERE space = ?1 LIMIT 1")
# Erasures whose certificate found leaks: a JSON list in ledger_meta (no schema step needed).
LEAKS_GET = "SELECT value FROM ledger_meta WHERE key = 'erasure_leaks'"
LEAKS_PUT = "INSERT OR REPLACE INTO ledger_meta(key, value) VALUES ('erasure_leaks', ?)"
LEAKS_KEPT = 100
# A file rewrite an erasure needs and has not finished (its VACUUM or checkpoint not done, or
# the process killed): JSON {since, why}, committed before the VACUUM starts, cleared with the
# pending rows once the rewrite's checkpoint completed.
REWRITE_GET = "SELECT value FROM ledger_meta WHERE key = 'erasure_rewrite_due'"
REWRITE_PUT = "INSERT OR REPLACE INTO ledger_meta(key, value) VALUES ('erasure_rewrite_due', ?)"
REWRITE_CLEAR = "DELETE FROM ledger_meta WHERE key = 'erasure_rewrite_due'"
HELD = f"SELECT {_FCOLS} FROM facts f WHERE f.held = 1 ORDER BY f.assert_seq"


class ErasureStore:
    """Rows that erasure reads and writes, beside the events and the projection."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn

    def add_digest(self, subject_ref: str, predicate: str, digest: str) -> None:
        self._conn.execute(ADD_DIGEST, (subject_ref, predicate, digest))

    def add_digests(self, rows: list[tuple[str, str, str]]) -> None:
        """`add_digest` for each (subject_ref, predicate, digest), in order."""
        self._conn.executemany(ADD_DIGEST, rows)

    def has_digest(self, subject_ref: str, predicate: str, digest: str) -> bool:
        return self._conn.execute(HAS_DIGEST, (subject_ref, predicate, digest)).fetchone() is not None

    def drop_digests(self, subject_ref: str) -> None:
        """Every digest row of the subject (forget_subject: nothing of it may stay keyed)."""
        self._conn.execute(DROP_DIGESTS, (subject_ref,))

    def digest_keys(self) -> list[tuple[str, str]]:
        """(subject_ref, predicate) of every digest row."""
        return [(str(r), str(p)) for r, p in self._conn.execute(DIGEST_KEYS)]

    def erasure_events(self) -> list[tuple[int, str, str, str | None]]:
        """(seq, kind, body, assert body of its fact) of every forget, expire and
        forget_subject event, oldest first."""
        return [(int(s), str(k), str(b), None if a is None else str(a))
                for s, k, b, a in self._conn.execute(ERASURE_EVENTS)]

    def lexical_scope(self, fact_seq: int) -> str | None:
        """The keyed space and subject tokens of a fact's lexical index row (which key made
        them is checked above), None when it has none."""
        row = self._conn.execute(LEXICAL_SCOPE, (fact_seq,)).fetchone()
        return None if row is None else str(row[0])

    def erased_of_subject(self, subject: str) -> list[FactRow]:
        return [FactRow(*r) for r in self._conn.execute(ERASED_OF_SUBJECT, (subject,))]

    def set_subject(self, assert_seq: int, subject: str) -> None:
        self._conn.execute(SET_SUBJECT, (subject, assert_seq))

    def add_tombstone(self, seq: int, subject_hash: str, reason: str, counts: str, at: str) -> None:
        self._conn.execute(ADD_TOMBSTONE, (seq, subject_hash, reason, counts, at))

    def last_tombstone_at(self, subject_hash: str) -> str | None:
        """When the subject's latest erasure happened, as the ledger recorded it."""
        row = self._conn.execute(LAST_TOMBSTONE, (subject_hash,)).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def tombstones(self) -> list[tuple[int, str, str, str, str]]:
        return [(int(a), str(b), str(c), str(d), str(e)) for a, b, c, d, e in
                self._conn.execute(TOMBSTONES)]

    def add_pending(self, fact_ids: list[str], since: str) -> None:
        self._conn.executemany(ADD_PENDING, [(f, since) for f in fact_ids])

    def pending(self) -> list[tuple[str, str]]:
        return [(str(f), str(s)) for f, s in self._conn.execute(PENDING)]

    def clear_pending(self) -> None:
        """Drop every pending-scrub row and the rewrite-due mark with them."""
        self._conn.execute(CLEAR_PENDING)
        self._conn.execute(REWRITE_CLEAR)

    def rewrite_due(self) -> dict[str, str] | None:
        """The file rewrite an erasure recorded as due and not yet finished, if any."""
        row = self._conn.execute(REWRITE_GET).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def set_rewrite_due(self, since: str, why: str) -> None:
        self._conn.execute(REWRITE_PUT, (json.dumps({"since": since, "why": why},
                                                    sort_keys=True),))

    def facts_of_subject(self, subject: str) -> list[FactRow]:
        return [FactRow(*r) for r in self._conn.execute(FACTS_OF_SUBJECT, (subject,))]

    def sweep_candidates(self, space: str, cutoff: str) -> list[FactRow]:
        return [FactRow(*r) for r in self._conn.execute(SWEEP_CANDIDATES, (space, cutoff))]

    def sweep_candidates_all(self, cutoff: str) -> list[FactRow]:
        """Every space at once (an explicit cutoff): one query, not one per space."""
        return [FactRow(*r) for r in self._conn.execute(SWEEP_ALL, (cutoff,))]

    def learned_before(self, space: str | None, cutoff: str) -> dict[str, str]:
        """fact_id -> tx_at of the sweep candidates of `space` (None: every space)."""
        return {str(f): str(t) for f, t in
                self._conn.execute(SWEEP_LEARNED, (space, space, cutoff))}

    def spaces(self) -> list[str]:
        return [str(r[0]) for r in self._conn.execute(SPACES)]

    def events_of_kind(self, kind: str) -> list[tuple[int, str]]:
        sql = SPECIAL_INDEXED if kind in INDEXED_KINDS else SPECIAL_EVENTS
        return [(int(s), str(b)) for s, b in self._conn.execute(sql, (kind,))]

    def is_name(self, text: str) -> bool:
        """Is this string a subject or space of some fact (an identifier that stays)?"""
        return self._conn.execute(IS_NAME, (text,)).fetchone() is not None

    def names(self) -> set[str]:
        """Every subject and space of some fact: `is_name` for many strings at once."""
        return {str(r[0]) for r in self._conn.execute(NAMES)}

    def held(self) -> list[FactRow]:
        return [FactRow(*r) for r in self._conn.execute(HELD)]

    def leaks(self) -> list[dict[str, object]]:
        """The recorded erasures whose certificate found erased bytes leaking (newest last)."""
        row = self._conn.execute(LEAKS_GET).fetchone()
        return list(json.loads(row[0])) if row else []

    def add_leak(self, record: dict[str, object]) -> None:
        self._conn.execute(LEAKS_PUT, (json.dumps((self.leaks() + [record])[-LEAKS_KEPT:],
                                                  sort_keys=True),))
