"""Erasure: forget, forget_subject and retention sweeps, with their cascade and certificates."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from custody_app import crypto
from custody_app.certificate import (
    ErasedFact,
    ErasureCertificate,
    ForgetResult,
    PlaceCheck,
    SubjectForgetResult,
    SweepResult,
)
from custody_app.commands import Forget, ForgetSubject, Sweep
from custody_app.errors import LedgerError
from custody_app.retention import cutoff_for, window_for
from custody_app.timeutil import format_time, parse_time
from store.rows import FactRow

if TYPE_CHECKING:
    from custody_app.core import LedgerCore

ERASED = ("forgotten", "expired")
# A value this short could match bytes by chance, so a byte scan cannot prove it absent.
MIN_SCAN_BYTES = 8


@dataclass
class _Erasure:
    """What one erasure transaction did, for its certificate."""

    erased: list[ErasedFact] = field(default_factory=list)
    needles: list[bytes] = field(default_factory=list)
    short_values: int = 0


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


def _needles(sealed: bytes | None, text: str | None, work: _Erasure,
             is_name: Callable[[str], bool]) -> None:
    """The byte strings a scan must not find: the sealed value, its JSON and each long string
    (but not a string that names a subject or space: identifiers stay in the file)."""
    if sealed:
        work.needles.append(bytes(sealed))
    if text is None:
        return
    leaves: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            leaves.append(node)
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(k)
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(json.loads(text))
    for candidate in [text, *dict.fromkeys(leaves)]:
        data = candidate.encode("utf-8")
        if candidate is not text and is_name(candidate):
            continue
        if len(data) >= MIN_SCAN_BYTES:
            work.needles.append(data)
        elif candidate is text:
            work.short_values += 1


def previously_forgotten_digest(ledger: LedgerCore, subject_ref: str, predicate: str,
                                text: str) -> str:
    assert ledger.keys is not None
    return crypto.keyed_digest(ledger.keys.forget_key, "previously", subject_ref, predicate, text)


def _erase(ledger: LedgerCore, facts: list[FactRow], root_of: dict[str, str], *,
           kind: Literal["forget", "expire"], reason: str, actor: str, tx_at: str,
           extra: dict[str, Any] | None = None, work: _Erasure,
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
        _needles(event.value, text, work, ledger.db.erasure.is_name)
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


def _places(ledger: LedgerCore, work: _Erasure, *, keys_place: PlaceCheck) -> list[PlaceCheck]:
    """Check every place the values could be, after the transaction committed."""
    places: list[PlaceCheck] = []
    rows = [ledger.db.events.get(e.seq) for e in work.erased]
    asserts = [ledger.db.facts.get(e.fact_id) for e in work.erased]
    left = sum(1 for f in asserts if f is not None and (
        (ev := ledger.db.events.get(f.assert_seq)) is not None and (ev.value or ev.salt)))
    places.append(PlaceCheck(
        place="events table: value and salt of each assert",
        outcome="clean" if left == 0 and all(rows) else "found",
        detail=f"{len(work.erased)} assert(s) hold no value and no salt" if left == 0
        else f"{left} assert(s) still hold a value"))
    bad = [f.fact_id for f in asserts if f is not None and f.ended not in ERASED]
    places.append(PlaceCheck(
        place="facts projection", outcome="found" if bad else "clean",
        detail="every erased fact is forgotten or expired; no value is kept there" if not bad
        else f"still live: {', '.join(bad)}"))
    if ledger.db.recall.exists():
        indexed = ledger.db.recall.which_indexed([f.assert_seq for f in asserts if f is not None])
        stale = [f.fact_id for f in asserts if f is not None and f.assert_seq in indexed]
        places.append(PlaceCheck(
            place="recall indexes (FTS5, sqlite-vec)", outcome="found" if stale else "clean",
            detail="no erased fact is indexed (removed with secure-delete in the erasure's "
            "transaction)" if not stale else f"still indexed: {', '.join(stale)}"))
    else:
        places.append(PlaceCheck(place="recall indexes (FTS5, sqlite-vec)",
                                 outcome="not_applicable", detail="this ledger has no recall index"))
    places.append(keys_place)
    outcome = ledger.db.wal_checkpoint()
    places.append(PlaceCheck(
        place="WAL checkpoint (TRUNCATE)", outcome="clean" if outcome.complete else "pending",
        detail=f"{outcome.detail} ({outcome.attempts} attempt(s))"))
    places += _scan_places(ledger, work, checkpoint_done=outcome.complete)
    return places


def _scan_places(ledger: LedgerCore, work: _Erasure, *, checkpoint_done: bool) -> list[PlaceCheck]:
    out: list[PlaceCheck] = []
    hits = ledger.db.scan(work.needles)
    for path, found in hits.items():
        if not found:
            out.append(PlaceCheck(place=f"byte scan of {path}", outcome="clean",
                                  detail=f"none of {len(work.needles)} erased byte string(s) "
                                  "(sealed values, their JSON and strings) found"))
        else:
            out.append(PlaceCheck(
                place=f"byte scan of {path}", outcome="found" if checkpoint_done else "pending",
                detail=f"{len(found)} of {len(work.needles)} erased byte string(s) still present"
                + ("" if checkpoint_done else "; expected until the checkpoint completes")))
    if work.short_values:
        out.append(PlaceCheck(
            place="byte scan of short values", outcome="unverifiable",
            detail=f"{work.short_values} value(s) shorter than {MIN_SCAN_BYTES} bytes as JSON: a "
            "scan cannot tell them from unrelated bytes (their sealed form was scanned)"))
    return out


def _certificate(ledger: LedgerCore, operation: Literal["forget", "forget_subject", "sweep"],
                 work: _Erasure, *, actor: str, reason: str, root: str | None = None,
                 subject_hash: str | None = None, keys_place: PlaceCheck) -> ErasureCertificate:
    places = _places(ledger, work, keys_place=keys_place)
    complete = all(p.outcome not in ("pending", "found") for p in places)
    if complete:
        ledger._clear_pending()
    cert = ErasureCertificate(
        operation=operation, issued_at=format_time(ledger.clock.now()), actor=actor,
        reason=reason, ledger=ledger.db.path, root=root, subject_hash=subject_hash,
        erased=work.erased, cascade=[e.fact_id for e in work.erased if e.root], places=places,
        complete=complete)
    if not complete:
        ledger._remember_pending(cert, work.needles, work.short_values)
    return cert


SUBJECT_KEY_KEPT = PlaceCheck(
    place="key store: the subject's data key", outcome="not_applicable",
    detail="kept: the subject's other facts use it, so copies of the ledger made before this "
    "forget can still be decrypted with it; forget_subject destroys it")


def forget(ledger: LedgerCore, cmd: Forget) -> ForgetResult:
    work = _Erasure()
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
    cert = _certificate(ledger, "forget", work, actor=cmd.actor, reason=cmd.reason,
                        root=cmd.fact_id, keys_place=SUBJECT_KEY_KEPT)
    first = work.erased[0]
    return ForgetResult(fact_id=cmd.fact_id, event_id=first.event_id, seq=first.seq, tx_at=tx_at,
                        status="forgotten", certificate=cert)


def forget_subject(ledger: LedgerCore, cmd: ForgetSubject) -> SubjectForgetResult:
    if ledger.keys is None:
        raise LedgerError("keystore_missing", "the key store is not available")
    work = _Erasure()
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
    cert = _certificate(ledger, "forget_subject", work, actor=cmd.actor, reason=cmd.reason,
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
    work = _Erasure()
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
        cert = _certificate(ledger, "sweep", work, actor=cmd.actor, reason=cmd.reason,
                            keys_place=SUBJECT_KEY_KEPT)
    return SweepResult(cutoffs=cutoffs, expired=expired, held=sorted(held), dry_run=cmd.dry_run,
                       certificate=cert)


def reissue(ledger: LedgerCore, cert: ErasureCertificate, needles: list[bytes],
            short_values: int) -> ErasureCertificate:
    """The certificate again once a pending checkpoint completed: checkpoint and scans redone."""
    work = _Erasure(erased=list(cert.erased), needles=needles, short_values=short_values)
    kept = [p for p in cert.places
            if not p.place.startswith(("WAL checkpoint", "byte scan"))]
    places = kept + [PlaceCheck(place="WAL checkpoint (TRUNCATE)", outcome="clean",
                                detail="completed after the reader that blocked it closed")]
    places += _scan_places(ledger, work, checkpoint_done=True)
    complete = all(p.outcome not in ("pending", "found") for p in places)
    return cert.model_copy(update={"places": places, "complete": complete,
                                   "issued_at": format_time(ledger.clock.now())})
