"""Erasure: forget, forget_subject and retention sweeps, with their cascade and certificates."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from custody_app.domain.commands import Forget, ForgetSubject, Sweep
from custody_app.domain.errors import LedgerError
from custody_app.domain.retention import cutoff_for, window_for
from custody_app.domain.timeutil import parse_time
from custody_app.erasure.certificate import (
    ErasedFact,
    ForgetResult,
    PlaceCheck,
    SubjectForgetResult,
    SweepResult,
)
from custody_app.erasure.proof import (
    ERASED,
    MIN_SCAN_BYTES,
    SUBJECT_KEY_KEPT,
    ErasureWork,
    add_needles,
    certificate,
)
from custody_app.keys import crypto
from store.rows import FactRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore

def cascade(ledger: LedgerCore, roots: Iterable[FactRow]) -> tuple[list[FactRow], dict[str, str]]:
    """Roots and every fact derived from them, transitively, to a fixpoint (roots first).
    Returns the facts still holding a value and, for each derived one, the root it came from."""
    order: list[FactRow] = []
    root_of: dict[str, str] = {}
    seen: set[str] = set()
    queue = deque((r, r.fact_id) for r in roots)
    for fact, _ in queue:
        seen.add(fact.fact_id)
    while queue:
        fact, root = queue.popleft()
        if fact.ended in ERASED:
            continue
        order.append(fact)
        if fact.fact_id != root:
            root_of[fact.fact_id] = root
        for child_id in ledger.db.facts.derived_from(fact.fact_id):
            if child_id not in seen:
                seen.add(child_id)
                child = ledger.db.facts.get(child_id)
                if child is not None:
                    queue.append((child, root))
    return order, root_of


def _refuse_held(facts: list[FactRow], action: str) -> None:
    for fact in facts:
        if fact.held:
            raise LedgerError("on_hold", f"fact {fact.fact_id} is on legal hold; the {action} "
                              "is refused whole (release the hold first)", fact_id=fact.fact_id)


def previously_forgotten_digest(ledger: LedgerCore, subject_ref: str, predicate: str,
                                text: str) -> str:
    assert ledger.keys is not None
    return crypto.keyed_digest(ledger.keys.forget_key, "previously", subject_ref, predicate, text)


def _erase(ledger: LedgerCore, facts: list[FactRow], root_of: dict[str, str], *,
           kind: Literal["forget", "expire"], reason: str, actor: str, tx_at: str,
           extra: dict[str, Any] | None = None, work: ErasureWork,
           subject_hash: str | None = None) -> None:
    """Inside a write transaction: null each value and salt, append its forget/expire event.
    With `subject_hash`, facts of that subject lose their plaintext subject too."""
    policy = ledger.policy.policy.erasure
    for fact in facts:
        event = ledger.db.events.get(fact.assert_seq)
        assert event is not None
        ref = json.loads(event.body)["subject_ref"]
        text = ledger.values.open(fact.fact_id, ref, event.value)
        digest_kind = policy.digest if text is not None else "none"
        digest = None
        if text is not None and digest_kind == "hmac-sha256":
            assert ledger.keys is not None
            digest = crypto.keyed_digest(ledger.keys.forget_key, "value", text)
        elif text is not None and digest_kind == "sha256":
            digest = crypto.plain_digest(text)
        if text is not None and policy.digest != "none" and ledger.keys is not None:
            ledger.db.erasure.add_digest(ref, fact.predicate, previously_forgotten_digest(
                ledger, ref, fact.predicate, text))
        add_needles(event.value, text, work, ledger.db.erasure.is_name)
        ledger.db.events.erase_value(fact.assert_seq)
        ledger.db.erasure.add_pending([fact.fact_id], tx_at)
        fields: dict[str, Any] = {"reason": reason, "digest_kind": digest_kind, "digest": digest,
                                  "root": root_of.get(fact.fact_id), **(extra or {})}
        if subject_hash is not None and ref == subject_hash:
            ledger.db.events.erase_subject(fact.assert_seq)
            fields["subject_hash"] = subject_hash
        row = ledger._append(kind, actor, tx_at, fields, fact_id=fact.fact_id)
        work.erased.append(ErasedFact(
            fact_id=fact.fact_id, kind=kind, status_before=fact.status, seq=row.seq,
            event_id=row.hash, root=root_of.get(fact.fact_id), digest_kind=digest_kind,
            digest=digest))


def forget(ledger: LedgerCore, cmd: Forget) -> ForgetResult:
    work = ErasureWork()
    with ledger._writing():
        fact = ledger.db.facts.get(cmd.fact_id)
        if fact is None:
            raise LedgerError("unknown_fact", f"fact {cmd.fact_id} does not exist in this ledger")
        if fact.ended in ERASED:
            raise LedgerError("already_forgotten", f"fact {cmd.fact_id} was already {fact.ended}")
        facts, root_of = cascade(ledger, [fact])
        _refuse_held(facts, f"forget of {cmd.fact_id}")
        tx_at = ledger._tx_at()
        _erase(ledger, facts, root_of, kind="forget", reason=cmd.reason, actor=cmd.actor,
               tx_at=tx_at, work=work)
    cert = certificate(ledger, "forget", work, actor=cmd.actor, reason=cmd.reason,
                        root=cmd.fact_id, keys_place=SUBJECT_KEY_KEPT)
    first = work.erased[0]
    return ForgetResult(fact_id=cmd.fact_id, event_id=first.event_id, seq=first.seq, tx_at=tx_at,
                        status="forgotten", certificate=cert)


def forget_subject(ledger: LedgerCore, cmd: ForgetSubject) -> SubjectForgetResult:
    if ledger.keys is None:
        raise LedgerError("keystore_missing", "the key store is not available")
    work = ErasureWork()
    with ledger._writing():
        own = ledger.db.erasure.facts_of_subject(cmd.subject)
        facts, root_of = cascade(ledger, own)
        _refuse_held(facts, f"erasure of subject {cmd.subject}")
        counts: dict[str, int] = {}
        for fact in own:
            counts[fact.status] = counts.get(fact.status, 0) + 1
        counts["derived"] = len(facts) - len(own)
        tx_at = ledger._tx_at()
        subject_hash = ledger.keys.subject_ref(cmd.subject)
        _erase(ledger, facts, root_of, kind="forget", reason=cmd.reason, actor=cmd.actor,
               tx_at=tx_at, work=work, subject_hash=subject_hash)
        subject_bytes = cmd.subject.encode("utf-8")
        if own and len(subject_bytes) >= MIN_SCAN_BYTES:
            work.needles.append(subject_bytes)
        row = ledger._append("forget_subject", cmd.actor, tx_at,
                             {"subject_hash": subject_hash, "reason": cmd.reason,
                              "counts": counts})
        ledger.db.erasure.add_tombstone(row.seq, subject_hash, cmd.reason,
                                        json.dumps(counts, sort_keys=True), tx_at)
        # Inside the same write: the key store commits (key destroyed) before the ledger does.
        destroyed = ledger.keys.destroy(cmd.subject, tx_at)
    keys_place = PlaceCheck(
        place="key store: the subject's data key", outcome="clean",
        detail=f"{destroyed} key generation(s) destroyed at {tx_at}; copies of the ledger made "
        "before can no longer be decrypted for this subject; work begun before this instant "
        "cannot write for it")
    cert = certificate(ledger, "forget_subject", work, actor=cmd.actor, reason=cmd.reason,
                        subject_hash=subject_hash, keys_place=keys_place)
    return SubjectForgetResult(subject_hash=subject_hash, counts=counts, event_id=row.hash,
                               seq=row.seq, tx_at=tx_at, keys_destroyed=destroyed,
                               certificate=cert)


def _cutoffs(ledger: LedgerCore, cmd: Sweep) -> tuple[dict[str, str], dict[str, str]]:
    """Cutoff per space, and the window each came from (none for an explicit cutoff)."""
    if cmd.before:
        # One cutoff for every space ("*") or for the one named.
        return {cmd.space or "*": cmd.before}, {}
    spaces = [cmd.space] if cmd.space else ledger.db.erasure.spaces()
    now = parse_time(ledger._now())
    cutoffs: dict[str, str] = {}
    windows: dict[str, str] = {}
    for space in spaces:
        found = window_for(space, ledger.policy.policy.retention.windows)
        if found is not None:
            cutoffs[space] = cutoff_for(now, found[1])
            windows[space] = f"{found[0]} = {found[1]}"
    return cutoffs, windows


def sweep(ledger: LedgerCore, cmd: Sweep) -> SweepResult:
    work = ErasureWork()
    with ledger.db.read():
        cutoffs, windows = _cutoffs(ledger, cmd)
    if not cutoffs:
        return SweepResult(cutoffs={}, expired=[], held=[], dry_run=cmd.dry_run,
                           note="no retention window applies and no cutoff was given: "
                           "nothing to do")
    expired: list[str] = []
    held: set[str] = set()
    with (ledger.db.read() if cmd.dry_run else ledger._writing()):
        tx_at = ledger._tx_at() if not cmd.dry_run else ledger._now()
        done: set[str] = set()
        for space, cutoff in sorted(cutoffs.items()):
            candidates = (ledger.db.erasure.sweep_candidates_all(cutoff) if space == "*"
                          else ledger.db.erasure.sweep_candidates(space, cutoff))
            for root in candidates:
                if root.fact_id in done:
                    continue
                facts, root_of = cascade(ledger, [root])
                facts = [f for f in facts if f.fact_id not in done]
                blockers = [f.fact_id for f in facts if f.held]
                if blockers:
                    held.update(blockers)
                    continue
                done.update(f.fact_id for f in facts)
                expired += [f.fact_id for f in facts]
                if not cmd.dry_run:
                    _erase(ledger, facts, root_of, kind="expire", reason=cmd.reason,
                           actor=cmd.actor, tx_at=tx_at, work=work,
                           extra={"cutoff": cutoff, "window": windows.get(space)})
    cert = None
    if expired and not cmd.dry_run:
        cert = certificate(ledger, "sweep", work, actor=cmd.actor, reason=cmd.reason,
                            keys_place=SUBJECT_KEY_KEPT)
    return SweepResult(cutoffs=cutoffs, expired=expired, held=sorted(held), dry_run=cmd.dry_run,
                       certificate=cert)
