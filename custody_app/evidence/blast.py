"""Actions, blast radius and explain (DESIGN section 7): what could have relied on a belief."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from custody_app.core.reads import require_fact
from custody_app.core.texts import open_body
from custody_app.domain.commands import Act
from custody_app.domain.errors import LedgerError
from custody_app.domain.identity import identity_of
from custody_app.domain.lifecycle import retraction_effect
from custody_app.domain.text_fields import redact_fields
from custody_app.evidence.possible import possible_sessions
from custody_app.evidence.readmodels import (
    ActResult,
    BlastAction,
    BlastFact,
    BlastResult,
    BlastSession,
    ExplainedFact,
    ExplainResult,
)
from custody_app.evidence.receipts import ReceiptAudit, bounds
from custody_app.keys.receipts import check_action_receipt, check_receipt
from custody_app.keys.values import TextCodec
from store import LedgerFile
from store.rows import FactRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore

ENDING_KINDS = ("retract", "reject", "forget", "expire")
_ENDED_KIND = {"retracted": "retract", "rejected": "reject", "forgotten": "forget",
               "expired": "expire"}


def act(ledger: LedgerCore, cmd: Act) -> ActResult:
    # Every receipt the action carries is checked, or the action is refused: its own must be
    # genuine, for this ledger and session, recent, and for this very action (tool, ref,
    # arguments); one in its cause (the call it came from) genuine, for here and recent.
    issuers, limits = ledger.policy.policy.provenance.receipt_issuers, bounds(ledger, ledger.now())
    if cmd.receipt is not None:
        check_action_receipt(cmd.receipt, issuers, limits, session=cmd.session, tool=cmd.tool,
                             ref=cmd.ref, args_digest=cmd.args_digest)
    if cmd.cause is not None and cmd.cause.receipt is not None:
        check_receipt(cmd.cause.receipt, issuers, cmd.session, None, limits)
    for carried in (cmd.receipt, cmd.cause.receipt if cmd.cause else None):
        if carried is not None and carried.subject is not None:
            raise LedgerError("receipt_invalid", f"receipt {carried.receipt_id!r} names a subject "
                              "in clear, which an action's event would keep past an erasure (it "
                              "keeps the subject by its peppered hash only): have the gateway "
                              "leave `subject` out of action receipts", check="subject",
                              receipt_id=carried.receipt_id)
    if cmd.cause is not None and (cmd.cause.pointer or cmd.cause.subject_pointer):
        raise LedgerError("bad_request", "an action's cause takes no pointer (it records no "
                          "value)", field="cause.pointer")
    subject_ref = None
    if cmd.subject is not None:
        if ledger.keys is None:
            raise LedgerError("keystore_missing", "an action's subject is recorded by its "
                              "peppered hash, which needs the key store")
        subject_ref = ledger.keys.subject_ref(cmd.subject)
    # After the receipt's checks (they read the tool and session, never redacted): the free
    # text the event keeps is redacted like a value. The receipt itself is stored as signed.
    cmd, found = redact_fields(cmd, ledger.policy.policy.redaction.detectors)
    with ledger.transaction():
        tx_at = ledger.tx_at()
        # The subject goes into the chain as its peppered hash, so erasing it keeps the chain.
        row = ledger.append("acted", cmd.actor, tx_at, {
            "session": cmd.session, "tool": cmd.tool, "ref": cmd.ref, "outcome": cmd.outcome,
            "args_digest": cmd.args_digest, "subject_ref": subject_ref,
            "receipt": cmd.receipt.model_dump(exclude_none=True) if cmd.receipt else None,
            "cause": cmd.cause.model_dump(exclude_none=True) if cmd.cause else None,
            **({"redactions": found} if found else {})})
    return ActResult(event_id=row.hash, seq=row.seq, tx_at=tx_at, session=cmd.session,
                     ref=cmd.ref)


def _believed(fact: FactRow) -> bool:
    return fact.status == "active"


@dataclass
class _Reach:
    """How a fact was reached: via, session, from_fact, depth."""

    fact: FactRow
    via: Literal["root", "session", "sources"]
    session: str | None
    from_fact: str | None
    depth: int


@dataclass
class _Session:
    start: int
    served: dict[str, int] = field(default_factory=dict)
    writes: dict[int, str] = field(default_factory=dict)
    actions: set[int] = field(default_factory=set)


def _action(seq: int, tx_at: str, actor: str, body: dict[str, Any], hash_: str) -> BlastAction:
    return BlastAction(event_id=hash_, seq=seq, tx_at=tx_at, session=body["session"],
                       tool=body["tool"], ref=body["ref"], outcome=body["outcome"], actor=actor,
                       args_digest=body.get("args_digest"))


def _events(db: LedgerFile, seqs: list[int]) -> dict[int, tuple[str, str, str, str]]:
    """seq -> (kind, tx_at, actor, hash) for several events."""
    return {q: (k, t, a, h) for q, k, t, a, _, h in db.sessions.events_by_seq(seqs)}


def _actions(db: LedgerFile, seqs: list[int]) -> dict[int, BlastAction]:
    return {q: _action(q, t, a, json.loads(b), h)
            for q, k, t, a, b, h in db.sessions.events_by_seq(seqs) if k == "acted"}


def _collect(db: LedgerFile, name: str, state: _Session, after: int, before: int | None,
             found: dict[str, tuple[str, str]], reached: dict[str, _Reach], source: str) -> None:
    """The session's writes and actions in (after, before): new writes are reached."""
    for seq, kind, fact_id in db.sessions.events_after(name, after):
        if before is not None and seq >= before:
            break
        if kind == "acted":
            state.actions.add(seq)
        elif fact_id is not None:
            state.writes[seq] = fact_id
            if fact_id not in reached and fact_id not in found:
                found[fact_id] = (name, source)


def _fixpoint(db: LedgerFile, root: FactRow) -> tuple[dict[str, _Reach], dict[str, _Session]]:
    reached = {root.fact_id: _Reach(root, "root", None, None, 0)}
    sessions: dict[str, _Session] = {}
    frontier = [root]
    depth = 0
    while frontier:
        depth += 1
        via_session: dict[str, tuple[str, str]] = {}
        serves = db.sessions.first_serves({f.fact_id: f.assert_seq for f in frontier})
        for fact_id, name, seq in sorted(serves, key=lambda s: s[2]):
            state = sessions.get(name)
            if state is None:
                state = sessions[name] = _Session(start=seq)
                _collect(db, name, state, seq, None, via_session, reached, fact_id)
            elif seq < state.start:
                _collect(db, name, state, seq, state.start, via_session, reached, fact_id)
                state.start = seq
            if seq < state.served.get(fact_id, seq + 1):
                state.served[fact_id] = seq
        via_sources = {child: source for child, source in
                       db.facts.derived_from_many([f.fact_id for f in frontier])
                       if child not in reached and child not in via_session}
        frontier = db.facts.get_many(sorted(via_session.keys() | via_sources.keys()))
        for fact in frontier:
            if fact.fact_id in via_session:
                name, source = via_session[fact.fact_id]
                reached[fact.fact_id] = _Reach(fact, "session", name, source, depth)
            else:
                reached[fact.fact_id] = _Reach(fact, "sources", None,
                                               via_sources[fact.fact_id], depth)
    return reached, sessions


def _ended_by(db: LedgerFile, texts: TextCodec, fact: FactRow) -> dict[str, Any] | None:
    """The first retract/reject/forget/expire of the fact, else the assert that superseded it."""
    for row in db.events.for_fact(fact.fact_id):
        if row.kind in ENDING_KINDS or row.kind == "confirm":
            body = open_body(db, texts, row.seq, row.body)
            if row.kind in ("retract", "reject", "confirm") and \
                    not retraction_effect(row.kind, body)[0]:
                continue  # a pending retraction, its discarding, or a plain confirm
            return {"kind": row.kind, "seq": row.seq, "tx_at": row.tx_at, "actor": row.actor,
                    "reason": body.get("reason"), "event_id": row.hash}
    if fact.status == "superseded" and fact.superseded_by:
        by = db.facts.get(fact.superseded_by)
        if by is not None:
            made = db.events.get(by.assert_seq)
            return {"kind": "supersede", "seq": by.assert_seq,
                    "tx_at": made.tx_at if made else "", "actor": by.actor, "reason": None,
                    "by": by.fact_id, "event_id": made.hash if made else None}
    return None


def _blast_fact(r: _Reach, tx_at: dict[int, str]) -> BlastFact:
    f = r.fact
    return BlastFact(fact_id=f.fact_id, subject=f.subject, predicate=f.predicate,
                     status=f.status, believed=_believed(f), reached_via=r.via,
                     session=r.session, from_fact=r.from_fact, depth=r.depth, seq=f.assert_seq,
                     tx_at=tx_at.get(f.assert_seq, ""), actor=f.actor)


def blast(ledger: LedgerCore, fact_id: str) -> BlastResult:
    """Everything that could have relied on `fact_id`, to a fixpoint (an upper bound)."""
    db = ledger.db
    with db.read():
        root = require_fact(db, fact_id)
        reached, sessions = _fixpoint(db, root)
        unread, ruled_out = possible_sessions(ledger, root, set(sessions))
        incomplete: dict[str, _Session] = {}
        for name in unread:
            state = incomplete[name] = _Session(start=root.assert_seq)
            _collect(db, name, state, root.assert_seq, None, {}, reached, root.fact_id)
        action_seqs = [q for s in (*sessions.values(), *incomplete.values()) for q in s.actions]
        actions = _actions(db, action_seqs)
        serve_seqs = [q for s in sessions.values() for q in s.served.values()]
        times = {q: t for q, (_, t, _, _) in
                 _events(db, serve_seqs + [r.fact.assert_seq for r in reached.values()]).items()}
        ended = _ended_by(db, ledger.texts, root)
    facts = sorted((r for r in reached.values() if r.via != "root"),
                   key=lambda r: (r.depth, r.fact.assert_seq))

    def session_view(name: str, s: _Session, is_incomplete: bool) -> BlastSession:
        return BlastSession(
            session=name, first_served_seq=None if is_incomplete else s.start,
            first_served_at=None if is_incomplete else times.get(s.start),
            incomplete=is_incomplete, writes=[s.writes[q] for q in sorted(s.writes)],
            actions=[actions[q] for q in sorted(s.actions) if q in actions],
            served=[f for f, _ in sorted(s.served.items(), key=lambda kv: (kv[1], kv[0]))])

    views = [session_view(n, s, False) for n, s in sorted(sessions.items(),
                                                          key=lambda kv: (kv[1].start, kv[0]))]
    views += [session_view(n, s, True) for n, s in sorted(incomplete.items())]
    reached_actions = sorted((actions[q] for s in sessions.values() for q in s.actions
                              if q in actions), key=lambda a: a.seq)
    return BlastResult(root=_blast_fact(reached[root.fact_id], times), root_ended_by=ended,
                       sessions=views, actions=reached_actions,
                       facts=[_blast_fact(r, times) for r in facts],
                       incomplete_sessions=sorted(incomplete), ruled_out=ruled_out)


def find_actions(ledger: LedgerCore, action_ref: str) -> list[int]:
    """The seqs of every recorded action with this ref (or the one `seq:N` names), newest
    trusted first: actions whose receipt checks and matches them, then those a writer key
    signed, then the rest; newest first within each. One agent reusing another's ref cannot
    hide it, nor make explain refuse."""
    db = ledger.db
    seqs = db.sessions.actions_by_ref(action_ref)
    if not seqs and action_ref.startswith("seq:") and action_ref[4:].isdigit():
        row = db.events.get(int(action_ref[4:]))
        seqs = [row.seq] if row is not None and row.kind == "acted" else []
    if not seqs:
        raise LedgerError("unknown_action",
                          f"no recorded action has the reference {action_ref!r}")
    if len(seqs) == 1:
        return seqs
    audit = ReceiptAudit(ledger)

    def rank(seq: int) -> tuple[int, int]:
        row = db.events.get(seq)
        assert row is not None
        body = json.loads(row.body)
        bound = body.get("receipt") is not None and audit.check(row, body=body) is None
        return (0 if bound else 1 if identity_of(body) else 2, -seq)

    return sorted(seqs, key=rank)


def find_action(ledger: LedgerCore, action_ref: str) -> int:
    """The action a ref names first (see find_actions)."""
    return find_actions(ledger, action_ref)[0]


def explain(ledger: LedgerCore, action_ref: str, seq: int | None = None) -> ExplainResult:
    """For one recorded action (the first the ref names, or the one at `seq` among them):
    every fact served to its session before it, and its fate; `same_ref` lists the other
    actions with that ref, newest trusted first."""
    db = ledger.db
    with db.read():
        found = find_actions(ledger, action_ref)
        seq = found[0] if seq is None else seq
        action = _actions(db, [seq])[seq]
        served = db.sessions.served_before(action.session, seq)
        facts = {f.fact_id: f for f in db.facts.get_many([f for f, _, _ in served])}
        events = _events(db, [q for _, q, _ in served]
                         + [f.ended_seq for f in facts.values() if f.ended_seq is not None])
    out = []
    for fact_id, first, times in served:
        fact = facts.get(fact_id)
        if fact is None:
            continue
        end_seq = fact.ended_seq if fact.ended is not None else None
        out.append(ExplainedFact(
            fact_id=fact_id, subject=fact.subject, predicate=fact.predicate,
            status_now=fact.status, served_seq=first, served_at=events[first][1],
            ended=fact.ended is not None, ended_by_kind=_ENDED_KIND.get(fact.ended or ""),
            ended_seq=end_seq, ended_at=events[end_seq][1] if end_seq in events else None,
            times_served=times))
    return ExplainResult(action=action, session=action.session, served=out,
                         incomplete=not served, same_ref=[q for q in found if q != seq])
