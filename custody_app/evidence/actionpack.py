"""Action packs: an action explained in full (the ten answers, its receipt, the events of the
action, of the reads before it and of every dependent), signed by the ledger key, checkable
offline with nothing but the pack and the ledger's public key."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from custody_app.core.texts import text_record
from custody_app.domain.chain import canonical
from custody_app.domain.errors import LedgerError
from custody_app.domain.receipts import Receipt, action_gap
from custody_app.evidence.explain import QUESTIONS, account
from custody_app.evidence.offline import OfflineReport, canonical_line, events_problems
from custody_app.evidence.packs import event_record, signed_bytes
from custody_app.evidence.readmodels import printable
from custody_app.keys import crypto
from store.rows import EventRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore

ACTION_PACK_FORMAT = "custody-action-pack/1"


def _record(ledger: LedgerCore, row: EventRow) -> dict[str, Any]:
    text = ledger.values.opener(row, json.loads(row.body)) if row.kind == "assert" else None
    return event_record(row, text, text_record(ledger.db, ledger.texts, row.seq, row.body))


def build_action_pack(ledger: LedgerCore, action_ref: str) -> dict[str, Any]:
    """The signed action pack of one recorded action, as a JSON document."""
    if ledger.keys is None:
        raise LedgerError("keystore_missing", "the key store (with the signing key) is not available")
    full = account(ledger, action_ref)
    db = ledger.db
    with db.read():
        seqs = {full.seq, *full.later_actions, *(s.served_seq for s in full.explain.served)}
        rows = [db.events.get(q) for q in sorted(seqs)]
        for fact_id in [*full.dependent_facts, *(s.fact_id for s in full.explain.served)]:
            rows += db.events.for_fact(fact_id)
        checkpoints = db.erasure.events_of_kind("checkpoint")
        checkpoint = db.events.get(checkpoints[-1][0]) if checkpoints else None
        head = db.events.head()
    unique = {r.seq: r for r in rows if r is not None}
    pem = ledger.keys.public_pem()
    document: dict[str, Any] = {
        "format": ACTION_PACK_FORMAT, "action_ref": action_ref, "action_seq": full.seq,
        "created_at": ledger.now(), "ledger_head": {"seq": head[0], "hash": head[1]} if head else None,
        "answers": [a.model_dump() for a in full.answers], "receipt": full.receipt,
        "events": [_record(ledger, unique[q]) for q in sorted(unique)],
        "checkpoint": _record(ledger, checkpoint) if checkpoint else None}
    document["signature"] = {"alg": "ed25519", "key_fingerprint": crypto.public_fingerprint(pem),
                             "value": crypto.sign(ledger.keys.signing_key, signed_bytes(document))}
    return document


def action_pack_text(document: dict[str, Any]) -> str:
    """Canonical JSON on one line, so any changed byte shows."""
    return canonical(document) + "\n"


def verify_action_pack(text: str, pem: str) -> OfflineReport:
    """Check an action pack offline: canonical form, signature, every event's hash and
    fields, that the action and its receipt are among them, and all ten answers present."""
    try:
        return _verify(text, pem)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        return OfflineReport(valid=False, what="action pack", events=0,
                             problems=[f"the pack is malformed ({exc!r})"])


def _verify(text: str, pem: str) -> OfflineReport:
    try:
        document = json.loads(text)
    except ValueError as exc:
        return OfflineReport(valid=False, what="action pack", events=0,
                             problems=[f"the pack is not JSON: {exc}"])
    problems: list[str] = []
    if not canonical_line(text, document):
        problems.append("the pack file is not the canonical JSON it was written as: it was edited")
    if not isinstance(document, dict) or document.get("format") != ACTION_PACK_FORMAT:
        return OfflineReport(valid=False, what="action pack", events=0,
                             problems=[*problems, f"not a {ACTION_PACK_FORMAT} document"])
    fingerprint = crypto.public_fingerprint(pem)
    sig = document.get("signature")
    if (not isinstance(sig, dict) or set(sig) != {"alg", "key_fingerprint", "value"}
            or sig.get("alg") != "ed25519"):
        problems.append("the pack's signature block is not an ed25519 signature")
    elif sig.get("key_fingerprint") != fingerprint:
        problems.append(f"the pack was signed by key {sig.get('key_fingerprint')}, not by the "
                        f"given key {fingerprint}")
    elif not crypto.verify_signature(pem, signed_bytes(document), str(sig.get("value"))):
        problems.append("the signature does not verify under the given key: the pack was "
                        "changed after it was signed")
    events = [e for e in document.get("events") or [] if isinstance(e, dict)]
    first_bad = events_problems(events, problems)
    action = next((e for e in events if e.get("seq") == document.get("action_seq")
                   and e.get("kind") == "acted"), None)
    if action is None:
        problems.append(f"the pack holds no acted event at seq {document.get('action_seq')}")
    elif action["event"].get("receipt") != document.get("receipt"):
        problems.append("the pack's receipt is not the one recorded with the action")
    elif document.get("receipt") is not None:
        problems += _receipt_problems(action["event"], document["receipt"])
    asked = [a.get("question") for a in document.get("answers") or [] if isinstance(a, dict)]
    if tuple(asked) != QUESTIONS:
        problems.append("the pack does not hold the ten answers in order")
    return OfflineReport(valid=not problems, what="action pack", events=len(events),
                         problems=problems, first_bad_seq=first_bad, key_fingerprint=fingerprint,
                         checkpoints=1 if document.get("checkpoint") else 0, signature_checked=True)


def _receipt_problems(event: dict[str, Any], raw: Any) -> list[str]:
    """Offline, what the pack alone shows: the action's receipt is well-formed and for this
    action (tool, ref where it signs one, arguments digest). Its signature is checked under
    the issuer keys the ledger's policy registers, which the pack does not hold."""
    try:
        receipt = Receipt.model_validate(raw)
    except ValidationError:
        return ["the action's receipt is not well-formed"]
    gap = action_gap(receipt, str(event.get("tool")), str(event.get("ref")),
                     event.get("args_digest"))
    return [] if gap is None else [f"the action's receipt does not match it ({gap[0]}): {gap[1]}"]


# Answers that change as the ledger does: offline, they are only what they were at packing.
NEEDS_LEDGER = ("what the agent saw", "can it be verified", "what depended on it",
                "what needs reversal")


def render_offline(document: dict[str, Any]) -> str:
    """The answers as the pack holds them; those that need the ledger say it is absent."""
    made = printable(str(document.get("created_at")))
    lines = []
    for a in document.get("answers", []):
        note = (f" [as of {made}, when the pack was made: the ledger is absent]"
                if a.get("question") in NEEDS_LEDGER else "")
        lines.append(printable(f"{a['question']}: {a['answer']}") + note)
    return "\n".join(lines)
