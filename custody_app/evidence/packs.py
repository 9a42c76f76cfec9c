"""Evidence packs: one fact's whole story in one signed file that verifies offline."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from custody_app.core.reads import fact_view, history_rows, require_fact
from custody_app.core.texts import open_body, text_record
from custody_app.domain.chain import canonical
from custody_app.domain.errors import LedgerError
from custody_app.domain.readmodels import ReadModel
from custody_app.erasure.certificate import ErasedFact, ErasureCertificate, PlaceCheck
from custody_app.evidence.blast import blast
from custody_app.keys import crypto
from store import LedgerFile
from store.rows import EventRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore

PACK_FORMAT = "custody-evidence-pack/1"
ERASING = ("forget", "expire")


class EvidencePack(ReadModel):
    """A signed evidence pack (see `offline.verify_pack` for what a holder can check)."""

    format: str
    fact_id: str
    created_at: str
    ledger_head: dict[str, Any]
    fact: dict[str, Any]
    events: list[dict[str, Any]]
    holds: list[dict[str, Any]]
    held_now: bool
    blast: dict[str, Any]
    policies: list[dict[str, Any]]
    forget_certificate: dict[str, Any] | None
    checkpoint: dict[str, Any] | None
    related_events: list[dict[str, Any]]
    manifest: list[list[Any]]
    signature: dict[str, str]


def pack_text(pack: EvidencePack) -> str:
    """A pack as its file holds it: canonical JSON (one line), so any changed byte shows."""
    return canonical(pack.model_dump(mode="json")) + "\n"


def event_record(row: EventRow, value_text: str | None,
                 sealed: dict[str, Any] | None = None) -> dict[str, Any]:
    """One event as packs and exports carry it: the hashed body, its chain links, (asserts)
    the value with its salt, and (`sealed`: core.texts.text_record) its opened free text with
    its salt, each null where erased, so the commitments can be checked."""
    record: dict[str, Any] = {"seq": row.seq, "kind": row.kind, "tx_at": row.tx_at,
                              "actor": row.actor, "policy_hash": row.policy_hash,
                              "fact_id": row.fact_id, "event": json.loads(row.body),
                              "prev_hash": row.prev_hash, "hash": row.hash}
    if row.kind == "assert":
        record.update(subject=row.subject, salt=row.salt if value_text is not None else None,
                      value=None if value_text is None else json.loads(value_text))
    record.update(sealed or {})
    return record


def signed_bytes(document: dict[str, Any]) -> bytes:
    """What a pack's signature covers: its RFC 8785 JSON without the signature itself."""
    return canonical({k: v for k, v in document.items() if k != "signature"}).encode("utf-8")


def _record(ledger: LedgerCore, row: EventRow) -> dict[str, Any]:
    text = ledger.values.opener(row, json.loads(row.body)) if row.kind == "assert" else None
    return event_record(row, text, text_record(ledger.db, ledger.texts, row.seq, row.body))


def _cascade_events(db: LedgerFile, root: str) -> list[EventRow]:
    """The forget/expire events of the erasure rooted at `root` (the root's and its cascade's)."""
    seen, frontier, rows = {root}, [root], []
    while frontier:
        for fact_id in frontier:
            rows += [r for r in db.events.for_fact(fact_id) if r.kind in ERASING
                     and (json.loads(r.body).get("root") or r.fact_id) == root]
        children = {c for c, _ in db.facts.derived_from_many(frontier)} - seen
        seen |= children
        frontier = sorted(children)
    return sorted(rows, key=lambda r: r.seq)


def forget_certificate(ledger: LedgerCore, fact_id: str) -> ErasureCertificate | None:
    """The certificate of the erasure that took this fact's value, re-issued from the ledger's
    events; None when the value was never erased."""
    db = ledger.db
    mine = [r for r in db.events.for_fact(fact_id) if r.kind in ERASING]
    if not mine:
        return None
    first = json.loads(mine[0].body)
    root = first.get("root") or fact_id
    rows = _cascade_events(db, root)
    erased = []
    for row in rows:
        body = json.loads(row.body)
        erased.append(ErasedFact(
            fact_id=row.fact_id or "", kind="forget" if row.kind == "forget" else "expire",
            status_before="", seq=row.seq, event_id=row.hash, root=body.get("root"),
            digest_kind=body["digest_kind"], digest=body.get("digest")))
    facts = db.facts.get_many([e.fact_id for e in erased])
    left = [f.fact_id for f in facts
            if (ev := db.events.get(f.assert_seq)) is not None and (ev.value or ev.salt)]
    places = [
        PlaceCheck(place="events table: value and salt of each assert",
                   outcome="found" if left else "clean",
                   detail=f"checked when this pack was made: {len(facts)} assert(s), "
                   + (f"still holding a value: {', '.join(left)}" if left else "none holds a value")),
        PlaceCheck(place="byte scan of the ledger files", outcome="not_applicable",
                   detail="the erased value is gone, so it cannot be scanned for again; the "
                   "certificate issued at the erasure recorded that scan"),
    ]
    operation: Literal["forget", "forget_subject", "sweep"] = (
        "forget_subject" if first.get("subject_hash") else
                 "sweep" if mine[0].kind == "expire" else "forget")
    return ErasureCertificate(
        operation=operation, issued_at=mine[0].tx_at, actor=mine[0].actor,
        reason=first["reason"], ledger=db.path, root=root if operation == "forget" else None,
        subject_hash=first.get("subject_hash"), erased=erased,
        cascade=[e.fact_id for e in erased if e.root], places=places, complete=not left)


def build_pack(ledger: LedgerCore, fact_id: str) -> EvidencePack:
    if ledger.keys is None:
        raise LedgerError("keystore_missing",
                          "the key store (with the signing key) is needed to sign a pack")
    db = ledger.db
    radius = blast(ledger, fact_id).model_dump(mode="json")
    with db.read():
        fact = require_fact(db, fact_id)
        rows = history_rows(db, fact_id)
        events = [_record(ledger, r) for r in rows]
        holds = [{"kind": r.kind, "seq": r.seq, "tx_at": r.tx_at, "actor": r.actor,
                  "reason": open_body(db, ledger.texts, r.seq, r.body).get("reason")}
                 for r in rows if r.kind in ("hold", "release") and r.fact_id == fact_id]
        policies = []
        for h in sorted({r.policy_hash for r in rows}):
            found = db.policies.get(h)
            if found is not None:
                policies.append({"hash": h, "canonical": found[0], "source": found[1],
                                 "path": found[2]})
        # The served and acted events the blast radius rests on, so its sessions and actions can
        # be checked against hashed events too.
        seqs = sorted({a["seq"] for a in radius["actions"]}
                      | {s["first_served_seq"] for s in radius["sessions"]
                         if s["first_served_seq"] is not None})
        related = [_record(ledger, r) for r in (db.events.get(q) for q in seqs) if r]
        checkpoints = db.erasure.events_of_kind("checkpoint")
        checkpoint = db.events.get(checkpoints[-1][0]) if checkpoints else None
        head = db.events.head()
        view = fact_view(db, ledger.values, fact).model_dump(mode="json")
        certificate = forget_certificate(ledger, fact_id)
    pem = ledger.keys.public_pem()
    document: dict[str, Any] = {
        "format": PACK_FORMAT, "fact_id": fact_id, "created_at": ledger.now(),
        "ledger_head": {"seq": head[0], "hash": head[1], "tx_at": head[2]} if head else {},
        "fact": view, "events": events, "holds": holds, "held_now": bool(fact.held),
        "blast": radius, "policies": policies,
        "forget_certificate": certificate.model_dump(mode="json") if certificate else None,
        "checkpoint": _record(ledger, checkpoint) if checkpoint else None,
        "related_events": related,
        "manifest": [[e["seq"], e["hash"]] for e in [*events, *related]],
    }
    document["signature"] = {
        "alg": "ed25519", "key_fingerprint": crypto.public_fingerprint(pem),
        "value": crypto.sign(ledger.keys.signing_key, signed_bytes(document))}
    return EvidencePack.model_validate(document)
