"""Digests of forgotten values that leave no oracle (DESIGN 14): the digest kept to recognise a
forgotten value written again, and an erasure event's `hmac-sha256` digest, are keyed per
subject (a key derived from the subject's data key, never stored), so destroying the subject's
key (forget_subject) leaves nothing that confirms a guess. forget_subject also drops the
subject's digest rows. Digests a ledger kept before (under the forget key, never destroyed) are
still read, so a value forgotten before the upgrade still comes back quarantined; forget_subject
drops those rows too. `verify` compares the table with the fold of the erasure events."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from custody_app.keys import crypto

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


def forgotten_digest(ledger: LedgerCore, ref: str, predicate: str, text: str) -> str | None:
    """The row digest for a forgotten value of the subject (by peppered ref) and predicate;
    None when the subject has no live key (nothing can be kept, nothing confirmed)."""
    key = ledger.keys.digest_key(ref) if ledger.keys is not None else None
    return None if key is None else crypto.keyed_digest(key, "previously", predicate, text)


def value_digest(ledger: LedgerCore, ref: str, text: str) -> str | None:
    """An erasure event's `hmac-sha256` digest of the value, under the subject's digest key."""
    key = ledger.keys.digest_key(ref) if ledger.keys is not None else None
    return None if key is None else crypto.keyed_digest(key, "value", text)


def is_previously_forgotten(ledger: LedgerCore, subject: str, predicate: str,
                            text: str) -> bool:
    """Was this value of the subject and predicate forgotten before? (per-subject digest, or
    a digest kept under the forget key before per-subject digests)"""
    if ledger.keys is None or ledger.policy.policy.erasure.digest == "none":
        return False
    ref = ledger.keys.subject_ref(subject)
    digest = forgotten_digest(ledger, ref, predicate, text)
    if digest is not None and ledger.db.erasure.has_digest(ref, predicate, digest):
        return True
    legacy = ledger.keys.legacy_forget_key()
    return legacy is not None and ledger.db.erasure.has_digest(
        ref, predicate, crypto.keyed_digest(legacy, "previously", ref, predicate, text))


def digest_fold(ledger: LedgerCore) -> tuple[dict[tuple[str, str], int], set[tuple[str, str]]]:
    """The fold of the erasure events: (subject ref, predicate) -> the seq of the erasure that
    must have kept a row, and every (subject ref, predicate) an erasure ever kept a row for
    (rows a forget_subject dropped only from this version on may stay in older ledgers)."""
    expected: dict[tuple[str, str], int] = {}
    ever: set[tuple[str, str]] = set()
    for seq, kind, body, assert_body in ledger.db.erasure.erasure_events():
        data = json.loads(body)
        if kind == "forget_subject":
            gone = data.get("subject_hash")
            expected = {k: v for k, v in expected.items() if k[0] != gone}
            continue
        if data.get("digest_kind", "none") == "none" or assert_body is None:
            continue
        asserted = json.loads(assert_body)
        key = (str(asserted.get("subject_ref")), str(asserted.get("predicate")))
        expected[key] = seq
        ever.add(key)
    return expected, ever


def check_digests(ledger: LedgerCore) -> str | None:
    """The forgotten-value digests table against the fold of the erasure events: a row for
    each (subject, predicate) a forget or expire kept a digest of (digest kind not `none`),
    until a forget_subject of that subject drops them. A problem names the row or the event."""
    expected, ever = digest_fold(ledger)
    have = set(ledger.db.erasure.digest_keys())
    for ref, predicate in sorted(have - ever):
        return (f"forgotten_digests: a row for subject {ref[:12]}... predicate {predicate!r} "
                "has no forget or expire event that kept it")
    for key in sorted(set(expected) - have, key=expected.__getitem__):
        return (f"forgotten_digests: the digest kept by the erasure event at seq "
                f"{expected[key]} is missing (a forgotten value could come back believed)")
    return None
