"""What verify proves beyond the hash chain (DESIGN 13): every event of a known kind; no
assert without its value and salt unless an erasure event says why; stored policy texts that
hash to their key; a projection equal to the fold of the events; tombstones that are exactly
their erasure events. Checked in the same walk as the chain."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from custody_app.core.projector import MemoryProjection, apply_event
from custody_app.core.reads import policy_matches
from custody_app.domain.errors import LedgerError
from custody_app.domain.models import EVENT_MODELS
from store.rows import EventRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


class EventAudit:
    """Fed every event in seq order (after its chain check); `finish` compares the rest."""

    def __init__(self) -> None:
        self.memory = MemoryProjection()
        self.valueless: dict[str, int] = {}
        self.erased: set[str] = set()
        self.subject_erasures: dict[int, dict[str, Any]] = {}
        self._body: tuple[int, dict[str, Any]] = (0, {})

    def note_body(self, seq: int, body: dict[str, Any]) -> None:
        """The body the chain check already parsed (spares a second parse of each assert)."""
        self._body = (seq, body)

    def check(self, row: EventRow) -> str | None:
        if row.kind not in EVENT_MODELS:
            return f"event {row.seq} has an unknown kind {row.kind!r}"
        body = self._body[1] if self._body[0] == row.seq else json.loads(row.body)
        if row.kind == "assert" and row.fact_id is not None and row.value is None:
            self.valueless[row.fact_id] = row.seq
        elif row.kind in ("forget", "expire") and row.fact_id is not None:
            self.erased.add(row.fact_id)
        elif row.kind == "forget_subject":
            self.subject_erasures[row.seq] = {**body, "tx_at": row.tx_at}
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
    """The first row where the stored projection differs from the fold of the events (rows
    compared by value, in order: both lists come sorted by the same keys)."""
    names = ("fact", "fact state", "source link")
    stored: tuple[list[Any], ...] = ledger.db.facts.dump()
    rebuilt: tuple[list[Any], ...] = memory.dump()
    for name, mine, folded in zip(names, stored, rebuilt, strict=True):
        if mine == folded:
            continue
        for have, want in zip(mine, folded, strict=False):
            if have != want:
                return f"projection: {name} row {_name(have)} differs from the fold of the events"
        row = mine[len(folded)] if len(mine) > len(folded) else folded[len(mine)]
        what = "is not in the fold of the events" if len(mine) > len(folded) else "is missing"
        return f"projection: {name} row {_name(row)} {what}"
    return None


def _name(row: object) -> str:
    fact_id = getattr(row, "fact_id", None)
    if fact_id is not None:
        return f"for fact {fact_id}"
    seq = getattr(row, "fact_seq", None)
    return f"for the fact asserted at seq {seq}" if seq is not None else repr(row)
