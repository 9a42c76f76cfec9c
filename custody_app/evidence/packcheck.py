"""`pack --verify`: check an evidence pack with nothing but the pack and the ledger's public key."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from custody_app.domain.chain import canonical, commitment
from custody_app.evidence.checkpoints import statement
from custody_app.evidence.offline import OfflineReport, canonical_line, event_problem, events_problems
from custody_app.evidence.packs import PACK_FORMAT, signed_bytes
from custody_app.keys import crypto


def _check_signature(document: dict[str, Any], pem: str, problems: list[str]) -> str:
    fingerprint = crypto.public_fingerprint(pem)
    sig = document.get("signature")
    if not isinstance(sig, dict) or not isinstance(sig.get("value"), str):
        problems.append("the pack carries no signature")
    elif sig.get("alg") != "ed25519" or set(sig) != {"alg", "key_fingerprint", "value"}:
        problems.append("the pack's signature block is not an ed25519 signature")
    elif sig.get("key_fingerprint") != fingerprint:
        problems.append(f"the pack was signed by key {sig.get('key_fingerprint')}, not by the "
                        f"given key {fingerprint}")
    elif not crypto.verify_signature(pem, signed_bytes(document), sig["value"]):
        problems.append("the signature does not verify under the given key: the pack was "
                        "changed after it was signed")
    return fingerprint


def _check_certificate(document: dict[str, Any], events: list[dict[str, Any]],
                       problems: list[str]) -> None:
    fact_id = document.get("fact_id")
    erasures = {e.get("seq"): e for e in events
                if e.get("kind") in ("forget", "expire") and e.get("fact_id") == fact_id}
    cert = document.get("forget_certificate")
    if cert is None:
        if erasures:
            problems.append(f"fact {fact_id} was erased but the pack has no forget certificate")
        return
    if not isinstance(cert, dict):
        problems.append("the forget certificate is malformed")
        return
    entries = [e for e in cert.get("erased") or [] if isinstance(e, dict)]
    named = cert.get("root") == fact_id or any(e.get("fact_id") == fact_id for e in entries)
    if not named:
        problems.append(f"the forget certificate names {cert.get('root')}, not fact {fact_id}")
        return
    for entry in (e for e in entries if e.get("fact_id") == fact_id):
        event = erasures.get(entry.get("seq"))
        body = event.get("event", {}) if event else {}
        if (event is None or entry.get("event_id") != event.get("hash")
                or entry.get("digest") != body.get("digest")
                or entry.get("digest_kind") != body.get("digest_kind")):
            problems.append(f"the forget certificate's entry for {fact_id} (seq "
                            f"{entry.get('seq')}) matches no forget or expire event in the pack: "
                            "the certificate is forged")
    if not any(e.get("fact_id") == fact_id for e in entries) and erasures:
        problems.append(f"the forget certificate lists no erasure of {fact_id}")


def _check_blast(radius: Any, related: list[dict[str, Any]], problems: list[str]) -> None:
    """Each action and each session's first read in the blast radius is a hashed event here."""
    if not isinstance(radius, dict):
        problems.append("the pack holds no blast radius")
        return
    by_seq = {e.get("seq"): e for e in related}
    for action in radius.get("actions") or []:
        event = by_seq.get(action.get("seq"), {})
        body = event.get("event", {})
        if (event.get("kind") != "acted" or event.get("hash") != action.get("event_id")
                or any(body.get(k) != action.get(k) for k in ("session", "tool", "ref", "outcome"))):
            problems.append(f"the blast radius names action {action.get('ref')} (seq "
                            f"{action.get('seq')}), which no acted event in the pack matches")
    for session in radius.get("sessions") or []:
        seq = session.get("first_served_seq")
        if seq is None:
            continue
        body = by_seq.get(seq, {}).get("event", {})
        if (body.get("kind") != "served" or body.get("session") != session.get("session")
                or not set(session.get("served") or []) & set(body.get("fact_ids") or [])):
            problems.append(f"the blast radius says session {session.get('session')} was served "
                            f"a reached fact at seq {seq}, which no served event in the pack "
                            "matches")


def verify_pack(pack: str | dict[str, Any], pem: str) -> OfflineReport:
    """Check a pack with nothing but the pack (its file's text, or the parsed document) and the
    ledger's public key (PEM)."""
    try:
        return _verify_pack(pack, pem)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        return OfflineReport(valid=False, what="pack", events=0,
                             problems=[f"the pack is malformed ({exc!r})"])


def _verify_pack(pack: str | dict[str, Any], pem: str) -> OfflineReport:
    problems: list[str] = []
    document: Any = pack
    if isinstance(pack, str):
        try:
            document = json.loads(pack)
        except ValueError as exc:
            return OfflineReport(valid=False, what="pack", events=0,
                                 problems=[f"the pack is not JSON: {exc}"])
        if not canonical_line(pack, document):
            problems.append("the pack file is not the canonical JSON it was written as: it was "
                            "edited")
    if not isinstance(document, dict) or document.get("format") != PACK_FORMAT:
        return OfflineReport(valid=False, what="pack", events=0,
                             problems=[*problems, f"not a {PACK_FORMAT} document"])
    fingerprint = _check_signature(document, pem, problems)
    events = [e for e in document.get("events") or [] if isinstance(e, dict)]
    first_bad = events_problems(events, problems)
    by_seq = {e.get("seq"): e for e in events}
    for e in events:
        before = by_seq.get(e.get("seq", 0) - 1) if isinstance(e.get("seq"), int) else None
        if before is not None and e.get("prev_hash") != before.get("hash"):
            problems.append(f"event {e.get('seq')} does not link to event {before.get('seq')}")
    related = [e for e in document.get("related_events") or [] if isinstance(e, dict)]
    first_bad = events_problems(related, problems, first_bad)
    _check_blast(document.get("blast"), related, problems)
    manifest = [[e.get("seq"), e.get("hash")] for e in [*events, *related]]
    if manifest != document.get("manifest"):
        listed = {tuple(m) for m in document.get("manifest") or [] if isinstance(m, list)}
        missing = sorted(str(s) for s, _ in listed - {tuple(m) for m in manifest})
        problems.append("the events do not match the pack's manifest"
                        + (f": missing event(s) {', '.join(missing)}" if missing else ""))
    policies = {p.get("hash"): p for p in document.get("policies") or [] if isinstance(p, dict)}
    for h, p in policies.items():
        if hashlib.sha256(str(p.get("canonical")).encode()).hexdigest() != h:
            problems.append(f"policy text {str(h)[:12]}... does not hash to its hash")
    for e in events:
        if e.get("policy_hash") not in policies:
            problems.append(f"event {e.get('seq')}: the policy in force is not in the pack")
    _check_certificate(document, events, problems)
    checkpoint = document.get("checkpoint")
    if isinstance(checkpoint, dict):
        problem = event_problem(checkpoint)
        body = checkpoint.get("event", {})
        if problem is None and not crypto.verify_signature(pem, statement(
                body["checkpoint_seq"], body["head_hash"], body["head_tx_at"]),
                body["signature"]):
            problem = f"the checkpoint at seq {checkpoint.get('seq')} is not signed by the given key"
        if problem is not None:
            problems.append(problem)
    value = document.get("fact", {}).get("value") if isinstance(document.get("fact"), dict) else None
    assert_event = next((e for e in events if e.get("kind") == "assert"
                         and e.get("fact_id") == document.get("fact_id")), None)
    if assert_event is None:
        problems.append(f"the pack holds no assert of fact {document.get('fact_id')}")
    elif value is not None and assert_event.get("salt") and commitment(
            assert_event["salt"], canonical(value)) != assert_event.get("event", {}).get("commitment"):
        problems.append("the fact's value does not match the commitment in its assert event")
    return OfflineReport(valid=not problems, what="pack", events=len(events), problems=problems,
                         first_bad_seq=first_bad, key_fingerprint=fingerprint,
                         checkpoints=1 if checkpoint else 0, signature_checked=True)
