"""Read models built from the store: history, why, and the event views they share."""

from __future__ import annotations

import json
from typing import Any

from custody_app.core.texts import open_body, opened_texts
from custody_app.domain.chain import GENESIS, check_event
from custody_app.domain.errors import LedgerError
from custody_app.domain.lifecycle import effective_rank
from custody_app.domain.models import PROVENANCES, Cause, LlmBlock
from custody_app.domain.policy import policy_from_text
from custody_app.domain.readmodels import (
    EventView,
    FactRef,
    FactView,
    HistoryResult,
    PolicyText,
    Review,
    WhyResult,
)
from custody_app.keys.values import ValueCodec
from store import LedgerFile
from store.rows import EventRow, FactRow


def load_value(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def event_view(codec: ValueCodec, row: EventRow, db: LedgerFile | None = None) -> EventView:
    """With `db`, the event's sealed free text is opened into the view (else left sealed)."""
    data: dict[str, Any] = (json.loads(row.body) if db is None
                            else open_body(db, codec.texts, row.seq, row.body))
    data["event_id"] = row.hash
    if row.kind == "assert":
        data["subject"] = row.subject
        text = codec.open_or_refuse(row.fact_id or "", data["subject_ref"], row.value)
        data["value"] = load_value(text)
        data["sealed"] = codec.unreadable(row.value)
        data["erased"] = text is None and not data["sealed"]
    return EventView(**data)


def fact_view(db: LedgerFile, codec: ValueCodec, fact: FactRow) -> FactView:
    """A fact as it stands now."""
    event = db.events.get(fact.assert_seq)
    value = None if event is None else codec.open_subject(fact.fact_id, fact.subject, event.value)
    sealed = event is not None and codec.unreadable(event.value)
    valid_to = fact.valid_to
    if fact.status == "superseded" and fact.superseded_by:
        replacement = db.facts.get(fact.superseded_by)
        if replacement is not None and (valid_to is None or replacement.valid_from < valid_to):
            valid_to = replacement.valid_from
    return FactView(
        fact_id=fact.fact_id, subject=fact.subject, predicate=fact.predicate,
        value=load_value(value), space=fact.space, status=fact.status,
        provenance=PROVENANCES[effective_rank(fact)], valid_from=fact.valid_from,
        valid_to=valid_to, actor=fact.actor, erased=value is None and not sealed, sealed=sealed,
    )


def require_fact(db: LedgerFile, fact_id: str) -> FactRow:
    fact = db.facts.get(fact_id)
    if fact is None:
        raise LedgerError("unknown_fact", f"fact {fact_id} does not exist in this ledger")
    return fact


def _chain(db: LedgerFile, start: str | None, link: str) -> list[FactRef]:
    """The facts reached from `start` by following `link` (supersedes or superseded_by)."""
    out: list[FactRef] = []
    cursor = start
    while cursor:
        fact = db.facts.get(cursor)
        if fact is None:
            break
        out.append(_ref(fact))
        cursor = getattr(fact, link)
    return out


def _ref(fact: FactRow) -> FactRef:
    return FactRef(fact_id=fact.fact_id, status=fact.status, subject=fact.subject,
                   predicate=fact.predicate, valid_from=fact.valid_from)


def history_rows(db: LedgerFile, fact_id: str) -> list[EventRow]:
    """Every event that touched the fact, with the asserts that supersede it, oldest first."""
    rows = db.events.for_fact(fact_id)
    for replacement in db.facts.replacements(fact_id):
        event = db.events.get(replacement.assert_seq)
        if event is not None:
            rows.append(event)
    return sorted(rows, key=lambda r: r.seq)


def history(db: LedgerFile, codec: ValueCodec, fact_id: str) -> HistoryResult:
    fact = require_fact(db, fact_id)
    return HistoryResult(fact_id=fact_id, status=fact.status,
                         events=[event_view(codec, r, db) for r in history_rows(db, fact_id)])


def _events_verified(db: LedgerFile, codec: ValueCodec, rows: list[EventRow]) -> bool:
    """Each of the fact's events still matches its hash, body and link to its predecessor."""
    for row in rows:
        prev = db.events.get(row.seq - 1) if row.seq > 1 else None
        prev_hash = GENESIS if row.seq == 1 else (prev.hash if prev else "")
        if check_event(row, prev_hash, row.seq, codec.opener,
                       lambda r: _texts_or_none(db, codec, r.seq)) is not None:
            return False
    return True


def _texts_or_none(db: LedgerFile, codec: ValueCodec, seq: int) -> dict[str, str] | None:
    try:
        return opened_texts(db, codec.texts, seq)
    except Exception:  # a tampered text fails its event's check through the hash or commitment
        return None


def why(db: LedgerFile, codec: ValueCodec, fact_id: str) -> WhyResult:
    fact = require_fact(db, fact_id)
    created = db.events.get(fact.assert_seq)
    assert created is not None
    body = open_body(db, codec.texts, created.seq, created.body)
    policy = db.policies.get(created.policy_hash)
    canonical, source, path = policy if policy else ("", "", None)
    if policy is not None and not policy_matches(created.policy_hash, canonical, source):
        # Never print a policy text as "in force" when it is not the one the event hashed.
        raise LedgerError("policy_tampered", f"the stored text of policy "
                          f"{created.policy_hash[:12]}... under which fact {fact_id} was written "
                          "does not hash to its key: it was replaced (run verify)")

    older = _chain(db, fact.supersedes, "supersedes")
    newer = _chain(db, fact.superseded_by, "superseded_by")

    own = db.events.for_fact(fact_id)
    reviews = [
        Review(kind=r.kind, actor=r.actor, tx_at=r.tx_at, seq=r.seq,
               reason=open_body(db, codec.texts, r.seq, r.body).get("reason"))
        for r in own if r.kind in ("confirm", "reject", "retract", "hold", "release", "forget",
                                   "expire")
    ]
    sources = [_ref(f) for f in (db.facts.get(s) for s in body.get("sources") or []) if f]
    dependents = [_ref(f) for f in (db.facts.get(d) for d in db.facts.derived_from(fact_id)) if f]
    return WhyResult(
        fact=fact_view(db, codec, fact), created_by=event_view(codec, created, db), actor=fact.actor,
        cause=Cause(**body["cause"]), session=fact.session,
        llm=LlmBlock(**body["llm"]) if body.get("llm") else None,
        sources=sources, dependents=dependents,
        policy=PolicyText(hash=created.policy_hash, canonical=canonical, source=source, path=path),
        supersedes=older, superseded_by=newer, reviews=reviews,
        events_verified=_events_verified(db, codec, history_rows(db, fact_id)),
    )


def policy_matches(policy_hash: str, canonical: str, source: str) -> bool:
    """Does a stored policy text (source and canonical form) still hash to its key?"""
    try:
        loaded = policy_from_text(source, "(stored policy)", stored=True)
    except LedgerError:
        return False
    return loaded.hash == policy_hash and loaded.canonical == canonical
