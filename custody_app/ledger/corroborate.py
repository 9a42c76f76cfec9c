"""Corroboration (`[quarantine] corroborate = N`): a claimed value asserted independently in N
distinct sessions is confirmed by system:custody, the confirm naming the corroborating facts.
Values are matched by the sha256 of their canonical text, opened from the sealed values at
write time; nothing more is stored. Rejected, retracted, forgotten and expired facts never count."""

from __future__ import annotations

import hashlib

from custody_app.core.ledger_core import SYSTEM_ACTOR, LedgerCore
from store.rows import FactRow


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def corroborating(ledger: LedgerCore, fact: FactRow, value_text: str) -> list[FactRow]:
    """The believed or pending facts, written in a session, whose value is this one."""
    wanted = _digest(value_text)
    found = []
    for other in ledger.db.facts.in_sessions(fact.subject, fact.predicate):
        row = ledger.db.events.get(other.assert_seq)
        if row is None or row.value is None:
            continue  # erased: a forgotten value never counts
        text = ledger.values.open_subject(other.fact_id, other.subject, row.value)
        if text is not None and _digest(text) == wanted:
            found.append(other)
    return found


def corroborate(ledger: LedgerCore, fact: FactRow, value_text: str) -> list[str]:
    """Inside the assert's transaction: confirm every quarantined fact of the group once N
    distinct sessions assert the value; returns the fact ids confirmed."""
    needed = ledger.policy.policy.quarantine.corroborate
    if needed <= 0 or fact.session is None:
        return []
    # A previously forgotten value is held for a person to judge: it neither counts nor is lifted.
    group = [f for f in corroborating(ledger, fact, value_text)
             if "previously_forgotten" not in (f.marks or "")]
    sessions = {f.session for f in group}
    if len(sessions) < needed:
        return []
    names = [f.fact_id for f in group]
    confirmed = []
    for member in group:
        if member.status != "quarantined":
            continue
        others = [n for n in names if n != member.fact_id]
        ledger.append("confirm", SYSTEM_ACTOR, ledger.tx_at(), {
            "reason": f"corroborated: the same value asserted in {len(sessions)} distinct "
                      f"sessions, by {', '.join(others)}",
            "corroborated_by": others}, fact_id=member.fact_id)
        confirmed.append(member.fact_id)
    return confirmed
