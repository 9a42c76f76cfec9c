"""The fact lifecycle in one place: the legal-move table, the refusals, and state derivation."""

from __future__ import annotations

from custody_app.domain.errors import LedgerError
from custody_app.domain.models import PROV_RANK
from custody_app.domain.policy import Policy
from store.rows import FactRow, StateRow

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
ENDED_STATUS = {"retracted": "retracted", "rejected": "retracted",
                "forgotten": "forgotten", "expired": "expired"}


def check_move(fact_id: str, old: str | None, new: str) -> None:
    """Raise if a status change is not in the legal-move table (a defect, not a user error)."""
    if old != new and new not in LEGAL_MOVES[old]:
        raise LedgerError("illegal_move", f"fact {fact_id} cannot move from {old} to {new}")


def effective_rank(fact: FactRow) -> int:
    """Provenance rank now: a confirmed claimed fact counts as attested."""
    rank = PROV_RANK[fact.provenance]
    return 1 if rank == 0 and fact.confirmed_seq is not None else rank


def derive_state(fact: FactRow, replacement: FactRow | None, seq: int, tx_at: str) -> StateRow:
    """The fact's state after event `seq`, given its live replacement (if any)."""
    rank = effective_rank(fact)
    if fact.ended is not None:
        ended = ENDED_STATUS[fact.ended]
        return StateRow(fact.assert_seq, seq, tx_at, 0, rank, ended, ended,
                        fact.valid_to, fact.valid_to)
    base = "quarantined" if rank == 0 else "active"
    if replacement is None:
        return StateRow(fact.assert_seq, seq, tx_at, 1, rank, base, base,
                        fact.valid_to, fact.valid_to)
    cut = replacement.valid_from
    vto = cut if fact.valid_to is None or cut < fact.valid_to else fact.valid_to
    trusted = effective_rank(replacement) >= 1
    return StateRow(fact.assert_seq, seq, tx_at, 1, rank, "superseded",
                    "superseded" if trusted else base, vto, vto if trusted else fact.valid_to)


def same_state(a: StateRow | None, b: StateRow) -> bool:
    return a is not None and (a.live, a.prov_rank, a.status_all, a.status_trusted, a.vto_all,
                              a.vto_trusted) == (b.live, b.prov_rank, b.status_all,
                                                 b.status_trusted, b.vto_all, b.vto_trusted)


def require(fact: FactRow | None, fact_id: str) -> FactRow:
    if fact is None:
        raise LedgerError("unknown_fact", f"fact {fact_id} does not exist in this ledger")
    return fact


def _not_erased(fact: FactRow) -> None:
    if fact.ended in ("forgotten", "expired"):
        raise LedgerError("already_forgotten", f"fact {fact.fact_id} was {fact.ended}; its value is gone")


def check_supersede(
    old: FactRow | None, old_id: str, subject: str, predicate: str, valid_from: str
) -> FactRow:
    fact = require(old, old_id)
    _not_erased(fact)
    if fact.ended is not None:
        raise LedgerError("fact_retracted", f"fact {old_id} was retracted and cannot be superseded")
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


def check_source(fact: FactRow | None, fact_id: str) -> FactRow:
    source = require(fact, fact_id)
    _not_erased(source)
    return source


def check_retract(fact: FactRow | None, fact_id: str) -> FactRow:
    found = require(fact, fact_id)
    _not_erased(found)
    if found.ended is not None:
        raise LedgerError("already_retracted", f"fact {fact_id} is already retracted")
    return found


def check_review(fact: FactRow | None, fact_id: str, actor: str, policy: Policy) -> FactRow:
    """Confirm and reject: a still-claimed fact, by a policy reviewer who did not write it."""
    found = require(fact, fact_id)
    _not_erased(found)
    if found.ended is not None:
        raise LedgerError("fact_retracted", f"fact {fact_id} was retracted; there is nothing to review")
    if effective_rank(found) != 0:
        raise LedgerError("not_quarantined", f"fact {fact_id} is not in quarantine")
    if not policy.may_review(actor):
        raise LedgerError("not_reviewer", f"{actor} is not a reviewer under the policy in force")
    if actor == found.actor:
        raise LedgerError("own_write", f"{actor} wrote fact {fact_id} and cannot review it")
    return found


def check_affirm(fact: FactRow | None, fact_id: str) -> FactRow:
    found = require(fact, fact_id)
    _not_erased(found)
    if found.ended is not None:
        raise LedgerError("fact_retracted", f"fact {fact_id} was retracted and cannot be affirmed")
    if found.status == "superseded":
        raise LedgerError("already_superseded",
                          f"fact {fact_id} is superseded by {found.superseded_by}; affirm that")
    return found


def check_hold(fact: FactRow | None, fact_id: str) -> FactRow:
    """A hold needs a fact whose value still exists and that is not held yet."""
    found = require(fact, fact_id)
    _not_erased(found)
    if found.held:
        raise LedgerError("already_held", f"fact {fact_id} is already on hold")
    return found


def check_release(fact: FactRow | None, fact_id: str) -> FactRow:
    found = require(fact, fact_id)
    if not found.held:
        raise LedgerError("not_held", f"fact {fact_id} is not on hold")
    return found
