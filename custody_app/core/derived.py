"""What verify proves of the derived tables readers rely on (DESIGN 14, "Marks and derived tables
are checked"): the session index (served reads, session events, sessions), the actions index,
the events' fact index (what salience's presentations and a fact's history read), pending
retractions (what the review queue lists) and spent receipts (what a write citing a receipt
reads: the verified asserts that cite it), each equal to the fold of the events. Fed in
verify's chain walk; `finish` reads each stored table once and names the first differing row."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice, zip_longest
from typing import Any, Protocol

from custody_app.core.sessions import SESSION_KINDS, SessionFold
from store import LedgerFile
from store.rows import EventRow


class _Core(Protocol):
    db: LedgerFile


_PAGE = 4096
# The tables compared, by short name; the last three are read through indexes of the events.
TABLES = ("served_facts", "session_events", "sessions", "actions", "presentations", "pending",
          "spent")
EVENT_INDEXED = ("presentations", "pending", "spent")
_REVIEWS = ("confirm", "reject")


class DerivedAudit:
    """Fed every event in seq order (after its chain check); `finish` compares the tables."""

    def __init__(self) -> None:
        self.sessions = SessionFold()
        self.pending: dict[int, str] = {}
        self.spent: list[tuple[object, ...]] = []

    def check(self, row: EventRow, body: dict[str, Any]) -> str | None:
        kind = row.kind
        if kind in SESSION_KINDS:
            self.sessions.feed(row, body)
        if kind == "retract" and body.get("pending") is True and row.fact_id is not None:
            self.pending[row.seq] = row.fact_id
        elif kind == "assert" and body.get("provenance") == "verified":
            spent = _spends(body)
            if spent is not None:
                self.spent.append((row.seq, *spent))
        elif kind in _REVIEWS:
            settled = body.get("retraction")
            if isinstance(settled, int) and self.pending.get(settled) == row.fact_id:
                del self.pending[settled]
        return None

    def finish(self, ledger: _Core, only: tuple[str, ...] = TABLES
               ) -> tuple[int | None, str | None]:
        """(seq or None, problem) of the first derived row that differs, else (None, None);
        `only` names the tables to compare (all of TABLES by default)."""
        db = ledger.db
        served, events, summary = self.sessions.index()
        stored = db.sessions.dump()
        # (table, key width, stored rows, folded rows), both sides sorted by the key.
        tables: tuple[tuple[str, int, Iterable[tuple[object, ...]],
                            Iterable[tuple[object, ...]]], ...] = (
            ("served_facts (served reads)", 3, stored[0], served),
            ("session_events (a session's events)", 2, stored[1], events),
            ("sessions (one summary a session)", 1, stored[2], summary),
            ("actions (the actions index)", 1, db.actions.dump(), self.sessions.actions),
            # Salience reads a fact's asserts and affirms (their tx_at) through this index, a
            # history all its events. The index's (fact_id, seq) entries equal to those of the
            # table's rows, read apart from the index in the same read (the rows the walk
            # hashed, each fact_id checked against its body), prove those reads reach exactly
            # those rows (seq is the rowid): the index is read alone, no row looked up for its
            # kind and time. Compared a fact at a time: (fact_id, its seqs in order), both
            # sides by SQL (a dict fed by the walk cost a third of a million-event verify).
            ("salience presentations and fact histories (the events' fact index: a fact and "
             "the seqs of its events)", 1,
             db.events.fact_index(), db.events.fact_rows()),
            ("pending retractions (the review queue)", 1,
             ((s, f) for s, f, *_ in db.events.pending_retractions()),
             sorted(self.pending.items())),
            ("spent receipts (the verified asserts citing each receipt, which a write citing "
             "it reads)", 1, db.events.spent(), self.spent),
        )
        for short, (name, width, have, want) in zip(TABLES, tables, strict=True):
            if short not in only:
                continue
            problem = _first_difference(name, width, iter(have), iter(want))
            if problem is not None:
                return problem
        return None, None


def _spends(body: dict[str, Any]) -> tuple[object, ...] | None:
    """(issuer, receipt id, pointer or '') of the receipt a verified assert cites, or None:
    the key the store's index of them holds (store.sqlite.schema V11)."""
    cause = body.get("cause")
    receipt = cause.get("receipt") if isinstance(cause, dict) else None
    if not isinstance(cause, dict) or not isinstance(receipt, dict) \
            or receipt.get("receipt_id") is None:
        return None
    return receipt.get("issuer"), receipt["receipt_id"], cause.get("pointer") or ""


def _first_difference(name: str, width: int, have: Iterator[tuple[object, ...]],
                      want: Iterator[tuple[object, ...]]) -> tuple[int | None, str] | None:
    """Both sides sorted by the same key: compared a page at a time, row by row only in the
    page that differs."""
    while True:
        # Both backends hand up plain tuples (a row of another type would differ, never hide).
        page, wanted = list(islice(have, _PAGE)), list(islice(want, _PAGE))
        if page != wanted:
            break
        if not page:
            return None
    for stored, expected in zip_longest(page, wanted):
        if stored == expected:
            continue
        if stored is not None and expected is not None:
            if stored[:width] == expected[:width]:
                return _seq_of(stored), (f"derived table {name}: row {stored!r} differs from "
                                         f"the fold of the events, which has {expected!r}")
            # The sorted sides part here: the smaller row is the one the other side lacks.
            if stored[:width] < expected[:width]:
                expected = None
            else:
                stored = None
        row = stored if expected is None else expected
        what = ("is not in the fold of the events" if expected is None
                else "is missing (the fold of the events has it)")
        return _seq_of(row), f"derived table {name}: row {row!r} {what}"
    return None


def _seq_of(row: tuple[object, ...] | None) -> int | None:
    for item in row or ():
        if isinstance(item, int) and not isinstance(item, bool):
            return item
    return None
