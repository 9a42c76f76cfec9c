"""Explain an action in full: the ten questions a security owner asks first, answered in order
from the chain (who acted, who authorised it, what was allowed, what the agent saw, what it did,
why, what evidence exists, whether it verifies, what depended on it, what needs reversal)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from custody_app.evidence.blast import explain, find_actions
from custody_app.evidence.readmodels import ActionAccount, Answer, ExplainResult
from custody_app.evidence.receipts import ReceiptAudit
from custody_app.evidence.verify import verify
from store import LedgerFile
from store.rows import EventRow, FactRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore

QUESTIONS = ("who acted", "who authorised it", "what was allowed", "what the agent saw",
             "what it did", "why", "what evidence exists", "can it be verified",
             "what depended on it", "what needs reversal")


def status_then(db: LedgerFile, fact: FactRow, seq: int) -> str:
    """The fact's status just before event `seq` (from the projection's markers)."""
    if fact.ended is not None and fact.ended_seq is not None and fact.ended_seq < seq:
        return fact.ended
    if fact.superseded_by:
        by = db.facts.get(fact.superseded_by)
        if by is not None and by.assert_seq < seq:
            return "superseded"
    if fact.provenance == "claimed" and (fact.confirmed_seq is None or fact.confirmed_seq > seq):
        return "quarantined"
    return "active"


def _dependents(db: LedgerFile, session: str, seq: int) -> tuple[list[FactRow], list[int]]:
    """Beliefs the session wrote after `seq` and facts derived from them (to a fixpoint), and
    the session's later actions."""
    written, actions = [], []
    for q, kind, fact_id in db.sessions.events_after(session, seq):
        if kind == "acted":
            actions.append(q)
        elif fact_id is not None:
            written.append(fact_id)
    seen = dict.fromkeys(written)
    frontier = written
    while frontier:
        frontier = [c for c, _ in db.facts.derived_from_many(frontier) if c not in seen]
        seen.update(dict.fromkeys(frontier))
    return db.facts.get_many(list(seen)), actions


def _last_checkpoint(db: LedgerFile, seq: int) -> tuple[str, bool]:
    """The newest signed checkpoint, and whether it covers event `seq`."""
    checkpoints = db.erasure.events_of_kind("checkpoint")
    if not checkpoints:
        return "no signed checkpoint in this ledger", False
    at, body = checkpoints[-1]
    signed = json.loads(body)["checkpoint_seq"]
    covers = signed >= seq
    return (f"last signed checkpoint at seq {at} (signs the chain up to seq {signed}: "
            f"{'covers' if covers else 'does NOT cover'} this action)"), covers


def account(ledger: LedgerCore, action_ref: str, *, run_verify: bool = True,
            seq: int | None = None, chain: Any = None) -> ActionAccount:
    """The ten answers for one recorded action: the first the ref names (newest trusted
    first), or the one at `seq` (`run_verify`: walk the whole chain too, unless `chain`
    gives its result already)."""
    db = ledger.db
    base: ExplainResult = explain(ledger, action_ref, seq)
    a = base.action
    seq = a.seq
    with db.read():
        row = db.events.get(seq)
        assert row is not None
        body: dict[str, Any] = json.loads(row.body)
        facts = {f.fact_id: f for f in db.facts.get_many([s.fact_id for s in base.served])}
        dependents, later = _dependents(db, a.session, seq)
        later_actions = [db.events.get(q) for q in later]
        checkpoint, covered = _last_checkpoint(db, seq)
        receipt_check = ReceiptAudit(ledger).check(row)
    receipt = body.get("receipt")
    if chain is None and run_verify:
        chain = verify(ledger)
    answers = _answers(a.actor, a.session, body, receipt, base, facts, db, seq, row, checkpoint,
                       covered, receipt_check, chain, dependents,
                       [r for r in later_actions if r is not None])
    return ActionAccount(action_ref=action_ref, seq=seq, answers=answers, receipt=receipt,
                         explain=base, dependent_facts=[f.fact_id for f in dependents],
                         later_actions=later)


def accounts(ledger: LedgerCore, action_ref: str, *, run_verify: bool = True) -> list[ActionAccount]:
    """The ten answers for each action with this ref, newest trusted first (the chain is
    walked once for all of them)."""
    with ledger.db.read():
        seqs = find_actions(ledger, action_ref)
    chain = verify(ledger) if run_verify else None
    return [account(ledger, action_ref, run_verify=run_verify, seq=q, chain=chain) for q in seqs]


def _answers(actor: str, session: str, body: dict[str, Any], receipt: dict[str, Any] | None,
             base: ExplainResult, facts: dict[str, FactRow], db: LedgerFile, seq: int,
             row: EventRow, checkpoint: str, covered: bool, receipt_check: str | None,
             chain: Any, dependents: list[FactRow], later: list[EventRow]) -> list[Answer]:
    grant = (receipt or {}).get("grant")
    principal = (receipt or {}).get("principal")
    authorised = (f"{principal or 'a principal not named'} under grant {grant}" if grant
                  else f"{principal} (no grant recorded)" if principal else "not recorded")
    allowed = (f"tool {receipt['tool']} under grant {grant}, receipt {receipt['receipt_id']} "
               f"issued by {receipt['issuer']}" if receipt and grant else
               f"not recorded (no grant); the policy in force was {row.policy_hash[:12]}...")
    saw = "; ".join(
        f"{s.fact_id} {s.subject} {s.predicate} (then {status_then(db, facts[s.fact_id], seq)}, "
        f"now {s.status_now})" for s in base.served if s.fact_id in facts)
    saw = saw or "nothing recorded: no read in this session before the action (INCOMPLETE)"
    cause = body.get("cause")
    why = (f"{cause['kind']} {cause['ref']}" + (f": {cause['detail']}" if cause.get("detail") else "")
           if cause else "not recorded (the action names no cause)")
    evidence = ", ".join([
        f"receipt {receipt['receipt_id']} from {receipt['issuer']}" if receipt else "no receipt",
        f"event seq {seq} hash {row.hash[:16]}...", checkpoint])
    checks = [f"receipt: {receipt_check}" if receipt_check is not None
              else "receipt: ok" if receipt
              else "receipt: none to check"]
    if chain is not None:
        checks.append(f"chain: {'valid' if chain.valid else 'BROKEN: ' + str(chain.problem)} "
                      f"({chain.events} events)")
    else:
        checks.append("chain: not walked here (run verify)")
    checks.append("checkpoint: covers it" if covered else "checkpoint: none covers it yet")
    believed = [f for f in dependents if f.status == "active"]
    depended = ", ".join(
        [f"belief {f.fact_id} {f.subject} {f.predicate} (now {f.status})" for f in dependents]
        + [f"action seq {r.seq} {json.loads(r.body)['tool']} {json.loads(r.body)['ref']}"
           for r in later]) or "nothing recorded after it in the session"
    ended = [s.fact_id for s in base.served if s.ended]
    review = ([f"this action ({body['tool']} {body['ref']}): it relied on {', '.join(ended)}"]
              if ended else [])
    review += [f"action seq {r.seq}" for r in later] if ended else []
    reversal = "; ".join(
        ([f"still believed: {', '.join(f.fact_id for f in believed)}"] if believed and ended else [])
        + ([f"to review: {', '.join(review)}"] if review else [])) or (
        "nothing: what it saw is still believed" if base.served else
        "unknown: no recorded reads to judge by")
    texts = (f"{actor} in session {session}", authorised, allowed, saw,
             f"{body['tool']} {body['ref']} -> {body['outcome']} at {row.tx_at}", why, evidence,
             "; ".join(checks), depended, reversal)
    return [Answer(question=q, answer=t) for q, t in zip(QUESTIONS, texts, strict=True)]
