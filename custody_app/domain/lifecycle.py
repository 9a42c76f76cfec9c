"""The fact lifecycle in one place: the legal-move table, the refusals, and what a fact's
status and provenance rank are."""

from __future__ import annotations

from typing import TypeVar

from custody_app.domain.errors import LedgerError
from custody_app.domain.models import PROV_RANK
from custody_app.domain.policy import Policy
from custody_app.domain.records import FactRecord

F = TypeVar("F", bound=FactRecord)

# Legal moves of a fact's status, and nothing else. None is "not yet a fact".
LEGAL_MOVES: dict[str | None, frozenset[str]] = {
    None: frozenset({"active", "quarantined"}),
    "quarantined": frozenset({"active", "retracted", "superseded", "forgotten", "expired"}),
    "active": frozenset({"superseded", "retracted", "forgotten", "expired"}),
    # Back to what it was when its superseder is retracted: active, or quarantined if unconfirmed.
    "superseded": frozenset({"active", "quarantined", "retracted", "forgotten", "expired"}),
    "retracted": frozenset({"forgotten", "expired"}),
    "forgotten": frozenset(),
    "expired": frozenset(),
}
def erased_subject(subject_ref: str) -> str:
    """What stands for a subject whose plaintext identifier was erased."""
    return f"erased:{subject_ref[:16]}"


ENDED_STATUS = {"retracted": "retracted", "rejected": "retracted",
                "forgotten": "forgotten", "expired": "expired"}


def check_move(fact_id: str, old: str | None, new: str) -> None:
    """Raise if a status change is not in the legal-move table (a defect, not a user error)."""
    if old != new and new not in LEGAL_MOVES[old]:
        raise LedgerError("illegal_move", f"fact {fact_id} cannot move from {old} to {new}")


def effective_rank(fact: FactRecord) -> int:
    """Provenance rank now: a confirmed claimed fact counts as attested."""
    rank = PROV_RANK[fact.provenance]
    return 1 if rank == 0 and fact.confirmed_seq is not None else rank


def require(fact: F | None, fact_id: str) -> F:
    if fact is None:
        raise LedgerError("unknown_fact", f"fact {fact_id} does not exist in this ledger")
    return fact


def _not_erased(fact: FactRecord) -> None:
    if fact.ended in ("forgotten", "expired"):
        raise LedgerError("already_forgotten", f"fact {fact.fact_id} was {fact.ended}; its value is gone")


def check_supersede(
    old: F | None, old_id: str, subject: str, predicate: str, valid_from: str, *,
    replacement_pending: bool = False,
) -> F:
    fact = require(old, old_id)
    _not_erased(fact)
    if fact.ended is not None:
        raise LedgerError("fact_retracted", f"fact {old_id} was retracted and cannot be superseded")
    if fact.superseded_by is not None and replacement_pending:
        raise LedgerError("already_superseded",
                          f"fact {old_id} has a replacement waiting for review, "
                          f"{fact.superseded_by}; while it waits no other replacement of "
                          f"{old_id} is accepted: a reviewer confirms or rejects "
                          f"{fact.superseded_by} first (custody-app queue)",
                          pending=fact.superseded_by)
    if fact.superseded_by is not None:
        raise LedgerError("already_superseded",
                          f"fact {old_id} is already superseded by {fact.superseded_by}")
    if (fact.subject, fact.predicate) != (subject, predicate):
        raise LedgerError(
            "supersede_mismatch",
            f"fact {old_id} is about {fact.subject} {fact.predicate}; a replacement must have the "
            f"same subject and predicate, not {subject} {predicate}",
        )
    if valid_from < fact.valid_from:
        raise LedgerError(
            "starts_before_replaced",
            f"the replacement starts at {valid_from}, before fact {old_id} which starts at "
            f"{fact.valid_from}",
        )
    return fact


def check_source(fact: F | None, fact_id: str) -> F:
    source = require(fact, fact_id)
    _not_erased(source)
    return source


def check_retract(fact: F | None, fact_id: str) -> F:
    found = require(fact, fact_id)
    _not_erased(found)
    if found.ended is not None:
        raise LedgerError("already_retracted", f"fact {fact_id} is already retracted")
    return found


def check_review(fact: F | None, fact_id: str, actor: str, policy: Policy) -> F:
    """Confirm and reject: a still-claimed fact, by a policy reviewer who did not write it."""
    found = require(fact, fact_id)
    _not_erased(found)
    if found.ended is not None:
        raise LedgerError("fact_retracted", f"fact {fact_id} was retracted; there is nothing to review")
    if effective_rank(found) != 0:
        raise LedgerError("not_quarantined", f"fact {fact_id} is not in quarantine")
    if not policy.may_review(actor):
        kinds = ", ".join(policy.review.reviewer_kinds) or "none"
        raise LedgerError("not_reviewer", f"{actor} is not a reviewer under the policy in force "
                          f"(reviewers: actors of kind {kinds}, and those listed in the policy "
                          f"file's [review] reviewers); to review as {actor}, add \"{actor}\" "
                          "to that list, or review as a user:NAME")
    if actor == found.actor:
        raise LedgerError("own_write", f"{actor} wrote fact {fact_id} and cannot review it")
    return found


def check_affirm(fact: F | None, fact_id: str) -> F:
    found = require(fact, fact_id)
    _not_erased(found)
    if found.ended is not None:
        raise LedgerError("fact_retracted", f"fact {fact_id} was retracted and cannot be affirmed")
    if found.status == "superseded":
        raise LedgerError("already_superseded",
                          f"fact {fact_id} is superseded by {found.superseded_by}; affirm that")
    return found


def check_hold(fact: F | None, fact_id: str) -> F:
    """A hold needs a fact whose value still exists and that is not held yet."""
    found = require(fact, fact_id)
    _not_erased(found)
    if found.held:
        raise LedgerError("already_held", f"fact {fact_id} is already on hold")
    return found


def check_release(fact: F | None, fact_id: str) -> F:
    found = require(fact, fact_id)
    if not found.held:
        raise LedgerError("not_held", f"fact {fact_id} is not on hold")
    return found
