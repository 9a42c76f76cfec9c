"""What verify proves beyond the hash chain (DESIGN 13): every event of a known kind; no
assert without its value and salt unless an erasure event says why; stored policy texts that
hash to their key; a projection equal to the fold of the events; tombstones that are exactly
their erasure events. Checked in the same walk as the chain."""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import islice, zip_longest
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from custody_app.core.projector import MemoryProjection, apply_event
from custody_app.core.reads import policy_matches
from custody_app.domain.errors import LedgerError
from custody_app.domain.models import EVENT_MODELS
from store.rows import FACT_COLUMNS, STATE_COLUMNS, EventRow, FactRow, StateRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


# The kinds `apply_event` folds into the projection; for every other kind (affirm, served,
# acted, policy, checkpoint...) it changes nothing, so the walk does not call it
# (tests/test_verify_fast.py holds that it is a no-op for them).
FOLDED = frozenset(("assert", "retract", "reject", "confirm", "forget", "expire", "hold",
                    "release"))
# Known kinds `check` does nothing for (neither folded nor a forget_subject to remember).
INERT = frozenset(EVENT_MODELS) - FOLDED - {"forget_subject"}


class EventAudit:
    """Fed every event in seq order (after its chain check); `finish` compares the rest."""

    def __init__(self) -> None:
        self.memory = MemoryProjection()
        self.valueless: dict[str, int] = {}
        self.erased: set[str] = set()
        self.subject_erasures: dict[int, dict[str, Any]] = {}

    def check(self, row: EventRow, body: dict[str, Any]) -> str | None:
        """`body`: the event's body as the chain walk parsed it."""
        kind = row.kind
        if kind not in EVENT_MODELS:
            return f"event {row.seq} has an unknown kind {kind!r}"
        if kind not in FOLDED:
            if kind == "forget_subject":
                self.subject_erasures[row.seq] = {**body, "tx_at": row.tx_at}
            return None
        if kind == "assert" and row.fact_id is not None and row.value is None:
            self.valueless[row.fact_id] = row.seq
        elif kind in ("forget", "expire") and row.fact_id is not None:
            self.erased.add(row.fact_id)
        try:
            apply_event(self.memory, row.kind, row.seq, row.tx_at, row.fact_id, body,
                        row.subject)
        except (LedgerError, KeyError, TypeError) as exc:
            return f"event {row.seq} cannot be folded: {exc}"
        return None

    def finish(self, ledger: LedgerCore) -> tuple[int | None, str | None]:
        """(seq or None, problem) of the first disagreement outside the chain, else (None, None)."""
        for fact_id, seq in self.valueless.items():
            if fact_id not in self.erased:
                return seq, (f"event {seq} (fact {fact_id}) has no value or salt, but no forget "
                             "or expire event erased it")
        problem = _policies(ledger) or _tombstones(ledger, self.subject_erasures)
        if problem is not None:
            return problem
        return None, _projection(ledger, self.memory)


def _policies(ledger: LedgerCore) -> tuple[int | None, str] | None:
    for policy_hash, canonical, source, _path in ledger.db.policies.all():
        if not policy_matches(policy_hash, canonical, source):
            return None, (f"the stored policy text {policy_hash[:12]}... does not hash to its "
                          "key: it was replaced after it was recorded")
    return None


def _tombstones(ledger: LedgerCore,
                erasures: dict[int, dict[str, Any]]) -> tuple[int | None, str] | None:
    stored = {seq: (h, r, c, at) for seq, h, r, c, at in ledger.db.erasure.tombstones()}
    for seq, (subject_hash, reason, counts, at) in stored.items():
        event = erasures.get(seq)
        if event is None:
            return seq, f"tombstone {seq} has no forget_subject event at that seq"
        expected = (event["subject_hash"], event["reason"],
                    json.dumps(event["counts"], sort_keys=True), event["tx_at"])
        if (subject_hash, reason, counts, at) != expected:
            return seq, (f"tombstone {seq} holds content beyond its erasure event's fixed "
                         "fields (subject hash, reason, counts, time)")
    for seq in erasures:
        if seq not in stored:
            return seq, f"the forget_subject event {seq} has no tombstone"
    return None


def _projection(ledger: LedgerCore, memory: MemoryProjection) -> str | None:
    """The first row where the stored projection differs from the fold of the events: both
    sides come sorted by the same keys and are compared as plain tuples, a page of rows at a
    time (one list comparison when the page agrees, row by row only in a page that does not),
    the stored rows streamed from the file (no row objects built for them)."""
    names = ("fact", "fact state", "source link")
    folded = memory.dump()
    as_tuples = (map(_FACT_FIELDS, folded[0]), map(_STATE_FIELDS, folded[1]), iter(folded[2]))
    row_types: tuple[Callable[..., object], ...] = (FactRow, StateRow, _link)
    for name, mine, want, row_type in zip(names, ledger.db.facts.dump_rows(), as_tuples,
                                          row_types, strict=True):
        while True:
            page, wanted = list(islice(mine, _PAGE)), list(islice(want, _PAGE))
            if page != wanted:
                break
            if not page:
                break
        for have, expected in zip_longest(page, wanted):
            if have == expected:
                continue
            if have is not None and expected is not None:
                return (f"projection: {name} row {_name(row_type(*have))} differs from the fold "
                        "of the events")
            row = row_type(*(have if expected is None else expected))
            what = "is not in the fold of the events" if expected is None else "is missing"
            return f"projection: {name} row {_name(row)} {what}"
    return None


_PAGE = 4096
_FACT_FIELDS = attrgetter(*FACT_COLUMNS)
_STATE_FIELDS = attrgetter(*STATE_COLUMNS)


def _link(*row: Any) -> tuple[Any, ...]:
    return row


def _name(row: object) -> str:
    fact_id = getattr(row, "fact_id", None)
    if fact_id is not None:
        return f"for fact {fact_id}"
    seq = getattr(row, "fact_seq", None)
    return f"for the fact asserted at seq {seq}" if seq is not None else repr(row)
