"""Corroboration (`[quarantine] corroborate = N`, DESIGN 14): a claimed value is confirmed by
system:custody once N distinct identities assert it: distinct writer keys (the `signer` of a
keyed process's assert) or receipts of distinct issuers covering the value (a fact verified by
one). Sessions, names and unkeyed writers count for nothing: anyone can make them up.
A corroborated claim never displaces a trusted fact or a reviewer's decision, a value a
reviewer rejected is never corroborated again for that subject and predicate, and one fact is
confirmed while the other pending copies are closed as duplicates (rejected by system:custody,
reason `corroborated_duplicate`). Values are matched by the sha256 of their canonical text,
opened from the sealed values at write time; nothing more is stored."""

from __future__ import annotations

import hashlib
import json

from custody_app.core.ledger_core import SYSTEM_ACTOR, LedgerCore
from custody_app.domain import lifecycle
from custody_app.domain.identity import identity_of
from store.rows import FactRow

# The reason recorded on the other pending copies of a value corroboration confirmed.
CORROBORATED_DUPLICATE = "corroborated_duplicate"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def same_value(ledger: LedgerCore, fact: FactRow, value_text: str) -> list[FactRow]:
    """Every fact of the subject and predicate, in any status, whose value is this one
    (erased values never match)."""
    wanted = _digest(value_text)
    found = []
    for other in ledger.db.facts.of_subject_predicate(fact.subject, fact.predicate):
        row = ledger.db.events.get(other.assert_seq)
        if row is None or row.value is None:
            continue  # erased: a forgotten value never counts
        text = ledger.values.open_subject(other.fact_id, other.subject, row.value)
        if text is not None and _digest(text) == wanted:
            found.append(other)
    return found


def identity(ledger: LedgerCore, fact: FactRow) -> str | None:
    """The identity a fact's assert proves: its writer key, else the issuer of a receipt that
    made it verified (it covered the value at the door and this fact spent it: a verified
    fact citing a receipt an earlier fact spent was not raised by it), else None."""
    row = ledger.db.events.get(fact.assert_seq)
    if row is None:
        return None
    body = json.loads(row.body)
    signer = identity_of(body)
    if signer is not None:
        return signer
    cause = body.get("cause") or {}
    receipt = cause.get("receipt")
    if body.get("provenance") == "verified" and isinstance(receipt, dict):
        issuer, receipt_id = receipt.get("issuer"), receipt.get("receipt_id")
        spender = ledger.db.events.spent_by(str(issuer), str(receipt_id),
                                            str(cause.get("pointer") or ""))
        return f"receipt-issuer:{issuer}" if spender == fact.assert_seq else None
    return None


def _rejected_by_reviewer(ledger: LedgerCore, fact: FactRow) -> bool:
    """Did a reviewer turn this fact down (a reject, or a retraction by a reviewer)?"""
    if fact.ended not in ("rejected", "retracted") or fact.ended_seq is None:
        return False
    ended = ledger.db.events.get(fact.ended_seq)
    return (ended is not None and ended.actor != SYSTEM_ACTOR
            and ledger.policy.policy.may_review(ended.actor))


def _displaces_trusted(ledger: LedgerCore, claim: FactRow, group: set[str]) -> bool:
    """Would confirming the claim displace a trusted fact or a reviewer's decision: replace
    an attested, verified or confirmed fact, or stand beside a trusted other value of a
    one-valued predicate?"""
    if claim.supersedes is not None:
        old = ledger.db.facts.get(claim.supersedes)
        if old is not None and old.ended is None and lifecycle.effective_rank(old) > 0:
            return True
    if ledger.policy.policy.cardinality.of(claim.predicate) != "one":
        return False
    for rival_id in ledger.db.facts.active_of(claim.subject, claim.predicate):
        rival = ledger.db.facts.get(rival_id)
        if rival is not None and rival_id not in group and lifecycle.effective_rank(rival) > 0:
            return True
    return False


def corroborate(ledger: LedgerCore, fact: FactRow, value_text: str) -> list[str]:
    """Inside the assert's transaction: once N distinct identities assert the value, confirm
    the oldest pending copy that displaces nothing trusted and close the other such copies
    as duplicates; returns the fact ids confirmed (at most one)."""
    needed = ledger.policy.policy.quarantine.corroborate
    if needed <= 0:
        return []
    same = same_value(ledger, fact, value_text)
    if any(_rejected_by_reviewer(ledger, f) for f in same):
        return []  # a reviewer's decision about this value stands
    # A previously forgotten value is held for a person to judge: it neither counts nor is lifted.
    group = [f for f in same if f.status in ("quarantined", "active")
             and "previously_forgotten" not in (f.marks or "")]
    identities = {i for i in (identity(ledger, f) for f in group) if i is not None}
    if len(identities) < needed:
        return []
    names = {f.fact_id for f in group}
    pending = [f for f in group if f.status == "quarantined" and f.ended is None
               and not _displaces_trusted(ledger, f, names)]
    if not pending:
        return []
    keep, duplicates = pending[0], pending[1:]
    others = sorted(names - {keep.fact_id})
    ledger.append("confirm", SYSTEM_ACTOR, ledger.tx_at(), {
        "reason": f"corroborated: the same value asserted by {len(identities)} distinct "
                  f"identities ({', '.join(sorted(identities))}), by {', '.join(others)}",
        "corroborated_by": others}, fact_id=keep.fact_id)
    for dup in duplicates:
        ledger.append("reject", SYSTEM_ACTOR, ledger.tx_at(), {"reason": CORROBORATED_DUPLICATE},
                      fact_id=dup.fact_id)
    return [keep.fact_id]
