"""Forget and forget_subject: null each value (and, for a subject, its plaintext id), record
the forget events and digests, destroy a subject's key, then prove it (the certificate)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from custody_app.core.faults import crash_point
from custody_app.domain.commands import Forget, ForgetSubject
from custody_app.domain.errors import LedgerError
from custody_app.domain.lifecycle import erased_subject
from custody_app.domain.spelling import as_held, require_held
from custody_app.erasure import digests, rekey
from custody_app.erasure.cascade import cascade, refuse_held
from custody_app.erasure.certificate import (
    ErasedFact,
    ForgetResult,
    PlaceCheck,
    SubjectForgetResult,
)
from custody_app.erasure.epoch import after_erasure, await_epoch, with_epoch_place
from custody_app.erasure.proof import ERASED, certificate
from custody_app.erasure.rotate import index_key_place, rotate_index_key
from custody_app.erasure.scrubs import Scrubs
from custody_app.erasure.work import (
    MIN_SCAN_BYTES,
    ErasureWork,
    add_keyed_words,
    add_needles,
    add_text_needles,
)
from custody_app.keys import crypto
from store.rows import FactRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore
    from store.port import KeyStorePort


def previously_forgotten_digest(ledger: LedgerCore, subject_ref: str, predicate: str,
                                text: str) -> str | None:
    """The digest row kept of a forgotten value (per subject: erasure/digests.py)."""
    return digests.forgotten_digest(ledger, subject_ref, predicate, text)


def digest_of(ledger: LedgerCore, text: str | None, ref: str = "") -> tuple[str, str | None]:
    """(digest kind, digest) an erasure event records of the value text the policy asks for;
    `hmac-sha256` is keyed per subject (`ref`), so it goes with the subject's key."""
    digest_kind = ledger.policy.policy.erasure.digest if text is not None else "none"
    if text is not None and digest_kind == "hmac-sha256":
        digest = digests.value_digest(ledger, ref, text)
        return ("hmac-sha256", digest) if digest is not None else ("none", None)
    if text is not None and digest_kind == "sha256":
        return digest_kind, crypto.plain_digest(text)
    return digest_kind, None


def erase(ledger: LedgerCore, facts: list[FactRow], root_of: dict[str, str], *,
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
        digest_kind, digest = digest_of(ledger, text, ref)
        if text is not None and policy.digest != "none" and digest_kind != "none":
            kept = previously_forgotten_digest(ledger, ref, fact.predicate, text)
            if kept is not None:
                ledger.db.erasure.add_digest(ref, fact.predicate, kept)
        add_needles(event.value, text, work, ledger.db.erasure.is_name, fact.fact_id,
                    fact.predicate)
        if kind == "forget" and ledger.keys is not None and ledger.db.recall.exists():
            add_keyed_words(work, ledger.keys.index_key, fact.subject, fact.predicate, text,
                            fact.fact_id)
        ledger.db.events.erase_value(fact.assert_seq)
        _erase_texts(ledger, fact.fact_id, ref, work)
        ledger.db.erasure.add_pending([fact.fact_id], tx_at)
        fields: dict[str, Any] = {"reason": reason, "digest_kind": digest_kind, "digest": digest,
                                  "root": root_of.get(fact.fact_id), **(extra or {})}
        if subject_hash is not None and ref == subject_hash:
            ledger.db.events.erase_subject(fact.assert_seq)
            fields["subject_hash"] = subject_hash
        row = ledger.append(kind, actor, tx_at, fields, fact_id=fact.fact_id)
        work.erased.append(ErasedFact(
            fact_id=fact.fact_id, kind=kind, status_before=fact.status, seq=row.seq,
            event_id=row.hash, root=root_of.get(fact.fact_id), digest_kind=digest_kind,
            digest=digest))


def _erase_texts(ledger: LedgerCore, fact_id: str, ref: str, work: ErasureWork) -> None:
    """Null the sealed free text of the fact's events (its cause, the reasons about it), after
    taking what the byte scan must not find."""
    for seq, blob in ledger.db.texts.of_fact(fact_id):
        try:
            texts = ledger.texts.open(fact_id, ref, blob)
        except crypto.DecryptError:
            texts = None  # tampered: still erased, and its bytes still scanned for
        add_text_needles(blob, texts, work, ledger.db.erasure.is_name, fact_id, seq)
    ledger.db.texts.erase_fact(fact_id)


# False: the head mark is written before the proof starts (the reference, for the bench).
MARK_BESIDE_PROOF = True


@contextmanager
def head_mark(ledger: LedgerCore) -> Iterator[None]:
    """Record the ledger's head in the key store while the block runs (in a thread), joined
    and its error raised at the end; inline first when MARK_BESIDE_PROOF is false."""
    if ledger.keys is None:
        yield
        return
    keys, head = ledger.keys, ledger.db.events.head()
    if not MARK_BESIDE_PROOF:
        keys.record_mark(head)
        yield
        return
    failed: list[BaseException] = []

    def mark() -> None:
        try:
            keys.record_mark(head)
        except BaseException as exc:  # raised in the caller's thread below
            failed.append(exc)

    thread = threading.Thread(target=mark, name="custody-head-mark")
    thread.start()
    try:
        yield
    finally:
        thread.join()
    if failed:
        raise failed[0]


def forget(ledger: LedgerCore, scrubs: Scrubs, cmd: Forget) -> ForgetResult:
    work = ErasureWork()
    with ledger.transaction():
        fact = ledger.db.facts.get(cmd.fact_id)
        if fact is None:
            raise LedgerError("unknown_fact", f"fact {cmd.fact_id} does not exist in this ledger")
        if fact.ended in ERASED:
            raise LedgerError("already_forgotten", f"fact {cmd.fact_id} was already {fact.ended}")
        facts, root_of = cascade(ledger.db, [fact])
        refuse_held(facts, f"forget of {cmd.fact_id}")
        tx_at = ledger.tx_at()
        # The subjects keep other facts: each is re-keyed (erasure/rekey.py), so no key left
        # opens what a copy taken before holds of the erased facts.
        plans: dict[str, rekey.Rekey] = {}
        rekey.begin(ledger, plans, facts, tx_at)
        erase(ledger, facts, root_of, kind="forget", reason=cmd.reason, actor=cmd.actor,
               tx_at=tx_at, work=work)
        rekey.reseal_all(ledger, plans)
        crash_point("erasure.before_commit")
    crash_point("erasure.ledger_committed")
    rekey.finish(ledger, plans)
    # The key store's head mark (rollback detection) is one synchronous key store transaction:
    # its fsyncs run beside the proof's checkpoint and scan, and the forget returns only once
    # it is durable (a failure is raised as before).
    with head_mark(ledger):
        cert = certificate(ledger, "forget", work, actor=cmd.actor, reason=cmd.reason,
                           root=cmd.fact_id, keys_place=rekey.keys_place(plans))
    after_erasure(ledger)
    cert = with_epoch_place(ledger, cert, work.erased[-1].seq, destroyed_keys=bool(plans))
    if plans:  # it re-keyed: rotate-epoch re-issues its certificate (erasure/epoch.py)
        await_epoch(ledger, cert, work.erased[-1].seq)
    scrubs.settle(ledger, cert, work)
    first = work.erased[0]
    return ForgetResult(fact_id=cmd.fact_id, event_id=first.event_id, seq=first.seq, tx_at=tx_at,
                        status="forgotten", certificate=cert)


def subject_place(subject: str, earlier: int, work: ErasureWork) -> PlaceCheck:
    """The subject id itself: removed from every fact of the subject, scanned for below."""
    data = subject.encode("utf-8")
    if len(data) >= MIN_SCAN_BYTES:
        work.add(data, "subject id")
        return PlaceCheck(place="plaintext subject id", outcome="clean", detail=(
            f"removed from the events and the projection ({earlier} fact(s) erased earlier "
            "included); the byte scans below search for it"))
    return PlaceCheck(place="plaintext subject id", outcome="unverifiable", detail=(
        f"removed from the events and the projection ({earlier} fact(s) erased earlier "
        f"included); shorter than {MIN_SCAN_BYTES} bytes, so a byte scan cannot prove it absent"))


def still_wrapped(store: KeyStorePort, subject_ref: str) -> list[int]:
    """The generations of the subject's key the key store still holds wrapped (read back)."""
    latest = store.latest(subject_ref)
    if latest is None:
        return []
    return [g for g in range(latest[0] + 1)
            if (row := store.generation(subject_ref, g)) is not None and row[1] is not None]


def _holds(ledger: LedgerCore, subject: str) -> bool:
    """Whether the ledger holds facts of `subject` (believed, ended or erased before)."""
    return bool(ledger.db.erasure.facts_of_subject(subject)
                or ledger.db.erasure.erased_of_subject(subject))


def forget_subject(ledger: LedgerCore, scrubs: Scrubs,
                   cmd: ForgetSubject) -> SubjectForgetResult:
    if ledger.keys is None:
        raise LedgerError("keystore_missing", "the key store is not available")
    work = ErasureWork()
    with ledger.transaction():
        cmd = cmd.model_copy(update={"subject": as_held(cmd.subject,
                                                        lambda s: _holds(ledger, s))})
        own = ledger.db.erasure.facts_of_subject(cmd.subject)
        earlier = ledger.db.erasure.erased_of_subject(cmd.subject)
        # A subject the door now refuses can be named only to erase one an older version wrote.
        require_held("subject", cmd.subject, bool(own or earlier))
        facts, root_of = cascade(ledger.db, own)
        refuse_held(facts, f"erasure of subject {cmd.subject}")
        counts: dict[str, int] = {}
        for fact in own:
            counts[fact.status] = counts.get(fact.status, 0) + 1
        counts["derived"] = len(facts) - len(own)
        tx_at = ledger.tx_at()
        subject_hash = ledger.keys.subject_ref(cmd.subject)
        # No fact of the subject now, none forgotten or expired before, none taken by an
        # earlier erasure of it (its tombstone counts them): a mistyped id must not read as a
        # clean erasure.
        never_held = not own and not earlier and not any(
            sum(json.loads(counts).values()) for _, ref, _, counts, _
            in ledger.db.erasure.tombstones() if ref == subject_hash)
        # Derived facts of other subjects the cascade reached: those subjects are re-keyed.
        plans: dict[str, rekey.Rekey] = {}
        rekey.begin(ledger, plans, facts, tx_at, skip=subject_hash)
        erase(ledger, facts, root_of, kind="forget", reason=cmd.reason, actor=cmd.actor,
               tx_at=tx_at, work=work, subject_hash=subject_hash)
        rekey.reseal_all(ledger, plans)
        # Facts of the subject forgotten or expired before keep no plaintext id either; the
        # chain never held it, so the projection (and a rebuild) name them by the hash.
        for fact in earlier:
            ledger.db.events.erase_subject(fact.assert_seq)
            ledger.db.erasure.set_subject(fact.assert_seq, erased_subject(subject_hash))
        # Nothing keyed of the subject's forgotten values stays (its digest key goes with its
        # data key below; rows kept under the old forget key go now).
        ledger.db.erasure.drop_digests(subject_hash)
        work.notes.append(subject_place(cmd.subject, len(earlier), work))
        work.subject = cmd.subject
        work.leaked_before = any(r.get("subject_hash") == subject_hash
                                 for r in ledger.db.erasure.leaks())
        row = ledger.append("forget_subject", cmd.actor, tx_at,
                             {"subject_hash": subject_hash, "reason": cmd.reason,
                              "counts": counts})
        ledger.db.erasure.add_tombstone(row.seq, subject_hash, cmd.reason,
                                        json.dumps(counts, sort_keys=True), tx_at)
        crash_point("erasure.before_commit")
    # The ledger commits first: its tombstone is the recorded intent. The key store's
    # destruction follows; a crash in between is rolled forward at the next read-write open
    # (and by any write for the subject before that), so no state in between is served.
    crash_point("erasure.ledger_committed")
    with ledger.keys.store.write():
        destroyed = ledger.keys.destroy(cmd.subject, tx_at)
        ledger.keys.record_mark(ledger.db.events.head())
    crash_point("erasure.keys_committed")
    rekey.finish(ledger, plans)
    rotated = None
    epoch = after_erasure(ledger)
    if epoch is not None:
        rotated = epoch.index
    elif ledger.policy.policy.erasure.rotate_index_key == "after_forget_subject":
        rotated = rotate_index_key(ledger)
    left = still_wrapped(ledger.keys.store, subject_hash)
    keys_place = PlaceCheck(
        place="key store: the subject's data key", outcome="found" if left else "clean",
        detail="no fact of this subject was ever held, so no key had anything to destroy; "
        "work begun before this instant cannot write for it" if never_held and not destroyed
        and not left
        else f"{destroyed} key generation(s) destroyed at {tx_at} and none left wrapped (read "
        "back from the key store); copies of the ledger made before can no longer be decrypted "
        "for this subject; work begun before this instant cannot write for it" if not left
        else f"the key store still holds generation(s) {', '.join(map(str, left))} of the "
        "subject's key wrapped after its destruction")
    cert = certificate(ledger, "forget_subject", work, actor=cmd.actor, reason=cmd.reason,
                       subject_hash=subject_hash, keys_place=keys_place)
    others = [rekey.keys_place(plans, place="data keys of other subjects the cascade "
                               "reached (key store)")] if plans else []
    cert = cert.model_copy(update={"places": [*cert.places, *others,
                                              index_key_place(rotated)],
                                   "never_held": never_held})
    cert = with_epoch_place(ledger, cert, row.seq, destroyed_keys=True)
    await_epoch(ledger, cert, row.seq)
    scrubs.settle(ledger, cert, work)
    return SubjectForgetResult(subject_hash=subject_hash, counts=counts, event_id=row.hash,
                               seq=row.seq, tx_at=tx_at, keys_destroyed=destroyed,
                               certificate=cert)


