"""Who may change what (DESIGN 13): a retraction carries the retractor's standing; one of another
writer's fact by a writer whose own writes would be claimed waits in the review queue; a
reviewer confirms or discards it; and a trusted correction closes a pending claimed
replacement instead of being blocked by it."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from custody_app.core import reads
from custody_app.core.ledger_core import SYSTEM_ACTOR, LedgerCore
from custody_app.core.texts import open_body
from custody_app.domain import lifecycle
from custody_app.domain.commands import Confirm, Reject, Retract
from custody_app.domain.errors import LedgerError
from custody_app.domain.readmodels import FactOpResult, RetractResult
from custody_app.domain.text_fields import redact_fields
from store.rows import FactRow

# The reason recorded when a trusted correction closes a claim that was still waiting.
SUPERSEDED_WHILE_PENDING = "superseded_while_pending"


class _Reason(BaseModel):
    reason: str


def redact_reason(ledger: LedgerCore, fields: dict[str, Any]) -> dict[str, Any]:
    """An event's free-text reason, redacted like a value (with its value-free report)."""
    reason = fields.get("reason")
    if isinstance(reason, str):
        masked, found = redact_fields(_Reason(reason=reason), ledger.policy.policy.redaction.detectors)
        if found:
            return {**fields, "reason": masked.reason, "redactions": found}
    return fields


def standing(ledger: LedgerCore, actor: str, declared: str | None) -> str:
    """The provenance a writer's retraction carries: what it declares, which it may only do
    above `claimed` where its writes could (declared provenance allowed, or a writer key)."""
    may_declare = ledger.may_declare(actor)
    if declared is None:
        return "attested" if may_declare else "claimed"
    if declared != "claimed" and not may_declare:
        raise LedgerError("provenance_not_allowed",
                          f"the policy in force does not let {actor} declare {declared}")
    return declared


def fact_signer(ledger: LedgerCore, fact: FactRow) -> str | None:
    """The writer key that signed the fact's assert (`ed25519:...`), or None if unsigned."""
    created = ledger.db.events.get(fact.assert_seq)
    if created is None:
        return None
    signer = json.loads(created.body).get("signer")
    return signer if isinstance(signer, str) else None


def own_fact(ledger: LedgerCore, fact: FactRow, actor: str) -> bool:
    """Is the fact `actor`'s own to this process (DESIGN 14)? The same name, and, for a fact
    written under a key, the same proof: this process holds that very key for `actor`."""
    if actor != fact.actor:
        return False
    signer = fact_signer(ledger, fact)
    held = ledger.signers.get(actor)
    return signer is None or (held is not None and held.signer == signer)


def check_not_own_claim(ledger: LedgerCore, fact: FactRow | None, actor: str) -> None:
    """A writer may not review its own claim: by name (lifecycle.check_review), and by key
    (a reviewer signing with the key that signed the claim is its writer, whatever its name)."""
    if fact is None:
        return
    signer = fact_signer(ledger, fact)
    held = ledger.signers.get(actor)
    if signer is not None and held is not None and held.signer == signer:
        raise LedgerError("own_write", f"{actor} holds the key that wrote fact {fact.fact_id} "
                          "and cannot review it")


def retracts_directly(ledger: LedgerCore, fact: FactRow, actor: str, provenance: str) -> bool:
    """Does this retraction take effect at once (else it waits for a reviewer)?"""
    review = ledger.policy.policy.review
    if own_fact(ledger, fact, actor) or actor in review.direct_retractors:
        return True
    if review.retract_directly == "anyone":
        return True
    return review.retract_directly == "trusted" and provenance != "claimed"


def retract(ledger: LedgerCore, cmd: Retract) -> RetractResult:
    """Retract a fact, at once or as a pending retraction (one transaction)."""
    provenance = standing(ledger, cmd.actor, cmd.provenance)
    with ledger.transaction():
        fact = lifecycle.check_retract(ledger.db.facts.get(cmd.fact_id), cmd.fact_id)
        direct = retracts_directly(ledger, fact, cmd.actor, provenance)
        if not direct:
            waiting = ledger.db.events.pending_retraction(cmd.fact_id)
            if waiting is not None:
                raise LedgerError("retraction_pending",
                                  f"fact {cmd.fact_id} already has a retraction by {waiting[2]} "
                                  f"waiting for review (seq {waiting[0]})", seq=waiting[0])
        tx_at = ledger.tx_at()
        row = ledger.append("retract", cmd.actor, tx_at, redact_reason(ledger, {
            "reason": cmd.reason, "session": cmd.session, "provenance": provenance,
            "pending": None if direct else True}), fact_id=cmd.fact_id)
        now = reads.require_fact(ledger.db, cmd.fact_id)
    return RetractResult(fact_id=cmd.fact_id, event_id=row.hash, seq=row.seq, tx_at=tx_at,
                         status=now.status, pending=not direct)


def review(ledger: LedgerCore, cmd: Confirm | Reject) -> FactOpResult:
    """Confirm or reject a quarantined fact, or (with `retraction`) its pending retraction."""
    kind = "confirm" if isinstance(cmd, Confirm) else "reject"
    with ledger.transaction():
        found = ledger.db.facts.get(cmd.fact_id)
        waiting = None
        if cmd.retraction or cmd.retraction_event is not None:
            waiting = _check_retraction_review(ledger, found, cmd)
        else:
            lifecycle.check_review(found, cmd.fact_id, cmd.actor, ledger.policy.policy)
            check_not_own_claim(ledger, found, cmd.actor)
        tx_at = ledger.tx_at()
        row = ledger.append(kind, cmd.actor, tx_at, redact_reason(ledger, {
            "reason": cmd.reason, "session": cmd.session, "retraction": waiting}),
            fact_id=cmd.fact_id)
        fact = reads.require_fact(ledger.db, cmd.fact_id)
    return FactOpResult(fact_id=cmd.fact_id, event_id=row.hash, seq=row.seq, tx_at=tx_at,
                        status=fact.status)


def _check_retraction_review(ledger: LedgerCore, found: FactRow | None,
                             cmd: Confirm | Reject) -> int:
    """A pending retraction of a fact still standing, reviewed by a reviewer who did not
    ask for it: the one the review names (`retraction_event`), or the only one waiting;
    returns its seq. A review naming a retraction that is not waiting, or naming none while
    several wait, is refused: a decision applies to what the reviewer read."""
    fact = lifecycle.require(found, cmd.fact_id)
    waiting = ledger.db.events.pending_retractions_of(cmd.fact_id) if fact.ended is None else []
    named = cmd.retraction_event
    if named is not None:
        chosen = [w for w in waiting if w[1] == named]
        if not chosen:
            seq = ledger.db.events.retraction_of(cmd.fact_id, named)
            what = (f"retraction {named} (seq {seq}) of fact {cmd.fact_id} is no longer waiting "
                    "for review" if seq is not None else
                    f"event {named} is not a retraction of fact {cmd.fact_id}")
            now = (f"; the one waiting now is {waiting[-1][1]} (seq {waiting[-1][0]}): read it "
                   "before deciding" if waiting else "")
            raise LedgerError("retraction_not_pending", what + now, fact_id=cmd.fact_id,
                              retraction_event=named)
        waiting = chosen
    elif len(waiting) > 1:
        raise LedgerError("retraction_ambiguous",
                          f"{len(waiting)} retractions of fact {cmd.fact_id} wait for review "
                          f"(events {', '.join(w[1] for w in waiting)}): name the one you read "
                          "in `retraction_event`", fact_id=cmd.fact_id)
    if not waiting:
        raise LedgerError("no_pending_retraction",
                          f"fact {cmd.fact_id} has no retraction waiting for review")
    if not ledger.policy.policy.may_review(cmd.actor):
        raise LedgerError("not_reviewer",
                          f"{cmd.actor} is not a reviewer under the policy in force")
    if cmd.actor == waiting[0][2]:
        raise LedgerError("own_write", f"{cmd.actor} asked for the retraction of fact "
                          f"{cmd.fact_id} and cannot review it")
    return waiting[0][0]


def close_pending_replacement(ledger: LedgerCore, old: FactRow | None, provenance: str) -> None:
    """A trusted (attested or verified) correction of a fact whose supersession by a claimed,
    unconfirmed replacement is pending: reject that claim first, so the correction stands."""
    if old is None or old.superseded_by is None or provenance == "claimed":
        return
    pending = ledger.db.facts.get(old.superseded_by)
    if pending is None or pending.ended is not None or lifecycle.effective_rank(pending) != 0:
        return
    ledger.append("reject", SYSTEM_ACTOR, ledger.tx_at(), {"reason": SUPERSEDED_WHILE_PENDING},
                  fact_id=pending.fact_id)


def pending_retractions(ledger: LedgerCore
                        ) -> list[tuple[int, FactRow, str, str, dict[str, object], str]]:
    """(seq, fact, retractor, tx_at, event body, event id) of each retraction waiting for
    review, whose fact still stands (a retraction or erasure since settles it)."""
    out = []
    for seq, fact_id, actor, tx_at, body, event_id in ledger.db.events.pending_retractions():
        fact = ledger.db.facts.get(fact_id)
        if fact is not None and fact.ended is None:
            out.append((seq, fact, actor, tx_at,
                        open_body(ledger.db, ledger.texts, seq, body), event_id))
    return out
