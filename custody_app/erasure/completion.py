"""Finishing an erasure another process left pending (it was killed, or exited while a reader
blocked its checkpoint): its erased byte strings went with that process (they are kept nowhere,
by design), so no scan can look for them here. The file is rewritten from its live rows instead
(which leaves no freed or rebuilt page holding them), the erased facts' rows are checked again,
and a certificate is issued from what the ledger recorded of the erasure."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from custody_app.domain.timeutil import format_time
from custody_app.erasure.certificate import ErasedFact, ErasureCertificate, PlaceCheck
from custody_app.erasure.proof import ERASED, SUBJECT_REKEYED, row_places
from custody_app.erasure.rewrites import REWRITE_PLACE
from custody_app.erasure.work import ErasureWork

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore
    from store.rows import RewriteOutcome

NOT_SCANNED = (
    "not scanned for the erased byte strings: the erasure was left pending by another process "
    "(killed, or exited while a reader blocked its checkpoint), and its strings went with it "
    "(they are kept nowhere); instead the file was rewritten from its live rows (above), so no "
    "freed or rebuilt page holds them. A live record holding the same bytes (`shared`) could "
    "not be listed")


def _keys_place(core: LedgerCore, subject_hash: str | None) -> PlaceCheck:
    if subject_hash is None:
        return SUBJECT_REKEYED
    destroyed = core.keys.store.last_destroyed(subject_hash) if core.keys is not None else None
    return PlaceCheck(
        place="key store: the subject's data key", outcome="clean" if destroyed else "found",
        detail=f"destroyed at {destroyed}" if destroyed else "the key store records no "
        "destruction of the subject's key")


def finished_elsewhere(core: LedgerCore, orphans: list[tuple[str, str]],
                       rewritten: RewriteOutcome) -> list[ErasureCertificate]:
    """One certificate per erasure (pending rows of one transaction time) another process
    left pending, issued after `rewritten` (a complete rewrite of the file)."""
    by_time: dict[str, list[str]] = {}
    for fact_id, since in orphans:
        by_time.setdefault(since, []).append(fact_id)
    certificates = []
    for _since, ids in sorted(by_time.items()):
        facts = {f.fact_id: f for f in core.db.facts.get_many(ids)}
        events = core.db.events.get_many(
            [f.ended_seq for f in facts.values() if f.ended_seq is not None])
        work = ErasureWork()
        bodies: list[dict[str, Any]] = []
        actors: list[str] = []
        unended = []
        for fact_id in ids:
            fact = facts.get(fact_id)
            event = events.get(fact.ended_seq) if fact is not None and fact.ended_seq else None
            if fact is None or event is None or fact.ended not in ERASED:
                unended.append(fact_id)
                continue
            body = json.loads(event.body)
            bodies.append(body)
            actors.append(event.actor)
            work.erased.append(ErasedFact(
                fact_id=fact_id, kind="expire" if event.kind == "expire" else "forget",
                status_before="(not recorded)", seq=event.seq, event_id=event.hash,
                root=body.get("root"), digest_kind=str(body.get("digest_kind", "none")),
                digest=body.get("digest")))
        subject_hash = next((b["subject_hash"] for b in bodies if b.get("subject_hash")), None)
        operation: Literal["forget", "forget_subject", "sweep"] = (
            "sweep" if work.erased and all(e.kind == "expire" for e in work.erased)
            else "forget_subject" if subject_hash else "forget")
        checks = row_places(core, work, keys_place=_keys_place(core, subject_hash))
        if unended:
            checks.append(PlaceCheck(
                place="pending erasure rows", outcome="found",
                detail=f"no erasure event ended {', '.join(unended[:5])}"))
        checks += [
            PlaceCheck(place="WAL checkpoint (TRUNCATE)", outcome="clean",
                       detail="completed when the pending erasure was finished"),
            PlaceCheck(place=REWRITE_PLACE, outcome="clean",
                       detail=f"done when the pending erasure was finished: {rewritten.detail}"),
            PlaceCheck(place="byte scan of the ledger files", outcome="unverifiable",
                       detail=NOT_SCANNED)]
        certificates.append(ErasureCertificate(
            operation=operation, issued_at=format_time(core.clock.now()),
            actor=actors[0] if actors else "(unknown)",
            reason=str(bodies[0].get("reason", "")) if bodies else "", ledger=core.db.path,
            root=next((e.fact_id for e in work.erased if e.root is None), None)
            if operation == "forget" else None, subject_hash=subject_hash, erased=work.erased,
            cascade=[e.fact_id for e in work.erased if e.root], places=checks,
            complete=all(p.outcome not in ("pending", "found") for p in checks), rewritten=True))
    return certificates
