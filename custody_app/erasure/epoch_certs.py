"""Certificates waiting for an epoch rotation, kept in the ledger (issue 34: "the certificate is
re-issued when they complete"): an erasure that destroyed keys and whose place for copies taken
before is pending (or unverifiable) stores its certificate in ledger_meta when it is issued, so
the next `rotate-epoch` of any process re-issues it crypto-erased, with the rotation's time, and
drops it.

What is stored is content-free: fact ids, event seqs and hashes, the peppered subject hash,
counts, reason code and the places' outcomes and details, with every digest of an erased string
(`sha256 …` in a hit or a detail: a guess-confirmation oracle once the subject's key is gone)
and every hit's row locations left out; the ledger's address and the list of what erasure cannot
reach are not stored but rebuilt. Each record carries a MAC under a key derived from the key
store's marks key (which a rotation keeps), and a record is re-issued only when its MAC holds
and every erased fact it names is the fact of the chain's erasure event at that seq with that
hash (for a subject erasure, the chain's forget_subject event at its seq with its subject hash):
a record forged or edited in the database is dropped, not re-issued, and counted.

A kill: the record is written after the erasure's transaction, when its certificate is issued
(a kill before leaves the erasure in `erasures` and `doctor`, with no certificate to re-issue,
as none was issued). The rotation commits in the key store first; the records are then read,
re-issued and dropped in one ledger transaction, so two rotations never re-issue one record
twice. A kill after the key store committed and before that transaction leaves the records: the
next rotation re-issues them, crypto-erased at the rotation that covered them (the earlier one)."""

from __future__ import annotations

import hmac
import json
import re
from typing import TYPE_CHECKING, Any

from custody_app.erasure.certificate import ErasureCertificate, PlaceCheck
from custody_app.erasure.epoch_place import covering, with_epoch_place
from custody_app.keys.epoch import rotations
from store.rows import UNPRIMED_META

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore

INDEX = "epoch_certificates"  # ledger_meta: JSON list of the seqs with a record
RECORD = UNPRIMED_META + "{seq}"  # not read at every server write's start (store/rows.py)
# Not stored, rebuilt: the ledger's address (a server's may carry credentials) and the fixed list.
REBUILT = {"ledger", "cannot_reach"}
LEDGER_TOKEN = "<the ledger>"  # the ledger's address, wherever it appears in a place
_DIGEST = re.compile(r"sha256 [0-9a-f]{6,64}")
NOT_KEPT = "sha256 not kept"
WHERE_NOT_KEPT = ("row locations are not kept for the re-issue (content-free record); see the "
                  "certificate first issued")
ERASURE_KINDS = ("forget", "expire")


def _seqs(core: LedgerCore) -> list[int]:
    raw = core.db.meta(INDEX)
    try:
        found = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [int(s) for s in found if isinstance(s, int)] if isinstance(found, list) else []


def _content_free(cert: ErasureCertificate, where: str) -> dict[str, Any]:
    body = cert.model_dump(mode="json", exclude=REBUILT)
    for place in body["places"]:
        place["detail"] = _DIGEST.sub(NOT_KEPT, place["detail"])
        for hit in place["hits"]:
            hit["string"] = _DIGEST.sub(NOT_KEPT, hit["string"])
            hit["where"] = [WHERE_NOT_KEPT] if hit["where"] else []
    return _swap(body, where, LEDGER_TOKEN)


def _swap(body: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """`body` with every `old` in its strings (as JSON writes them) replaced by `new`: the
    ledger's address is stored as a token (places name the ledger's files by path) and put
    back as the address it is opened at, so a record does not depend on where the ledger
    lies (a copy, a move) and holds no server address."""
    text = json.dumps(body, sort_keys=True)
    swapped: dict[str, Any] = json.loads(text.replace(json.dumps(old)[1:-1],
                                                      json.dumps(new)[1:-1]))
    return swapped


def _canonical(seq: int, body: dict[str, Any]) -> str:
    return json.dumps({"seq": seq, "certificate": body}, sort_keys=True, separators=(",", ":"))


def keep(core: LedgerCore, cert: ErasureCertificate, seq: int) -> None:
    """Store the certificate of an erasure (its last event `seq`) for the next rotation."""
    if core.keys is None:
        return
    body = _content_free(cert, core.db.path)
    mac = core.keys.certificate_mac(_canonical(seq, body))
    with core.transaction():
        seqs = _seqs(core)
        core.db.put_meta(RECORD.format(seq=seq), json.dumps(
            {"seq": seq, "certificate": body, "mac": mac}, sort_keys=True))
        if seq not in seqs:
            core.db.put_meta(INDEX, json.dumps(sorted([*seqs, seq])))


def _load(core: LedgerCore, seq: int) -> ErasureCertificate | None:
    """The stored certificate at `seq` if it is real (its MAC holds, it matches the chain)."""
    assert core.keys is not None
    raw = core.db.meta(RECORD.format(seq=seq))
    try:
        record = json.loads(raw) if raw else None
        if not isinstance(record, dict) or record.get("seq") != seq:
            return None
        body, mac = record["certificate"], record["mac"]
        if not isinstance(mac, str) or not hmac.compare_digest(
                mac, core.keys.certificate_mac(_canonical(seq, body))):
            return None
        body = _swap(body, LEDGER_TOKEN, core.db.path)
        cert = ErasureCertificate.model_validate({**body, "ledger": core.db.path})
    except (ValueError, KeyError, TypeError):
        return None
    return cert if _in_chain(core, cert, seq) else None


def _in_chain(core: LedgerCore, cert: ErasureCertificate, seq: int) -> bool:
    """Every erased fact the certificate names is the chain's: the erasure event at its seq
    has its hash and names that fact; a subject erasure's `seq` is its forget_subject event,
    with the certificate's subject hash; a forget's or sweep's `seq` is its last erased fact."""
    if not cert.erased and cert.operation != "forget_subject":
        return False
    events = core.db.events.get_many(sorted({e.seq for e in cert.erased} | {seq}))
    for fact in cert.erased:
        event = events.get(fact.seq)
        if (event is None or event.hash != fact.event_id or event.kind not in ERASURE_KINDS
                or event.fact_id != fact.fact_id):
            return False
    last = events.get(seq)
    if last is None:
        return False
    if cert.operation == "forget_subject":
        return (last.kind == "forget_subject" and cert.subject_hash is not None
                and json.loads(last.body).get("subject_hash") == cert.subject_hash
                and all(e.seq < seq for e in cert.erased))
    return seq == max(e.seq for e in cert.erased)


def reissue(core: LedgerCore, index_place: PlaceCheck | None,
            at: str) -> tuple[list[ErasureCertificate], int]:
    """After a rotation committed: (the stored certificates a rotation now covers, re-issued
    with their place for copies taken before crypto-erased and `issued_at` the rotation's time,
    how many stored records were not real and were dropped). Both are dropped in the same
    ledger transaction that reads them; one no rotation covers yet stays."""
    if core.keys is None:
        return [], 0
    done: list[ErasureCertificate] = []
    forged = 0
    with core.transaction():
        seqs = _seqs(core)
        if not seqs:
            return [], 0
        made = rotations(core.keys.store)
        kept = []
        for seq in seqs:
            if covering(made, seq) is None:
                kept.append(seq)
                continue
            cert = _load(core, seq)
            core.db.put_meta(RECORD.format(seq=seq), None)
            if cert is None:
                forged += 1
                continue
            new = with_epoch_place(core, cert, seq, destroyed_keys=True)
            if index_place is not None:
                new = new.model_copy(update={"places": [
                    index_place if p.place == index_place.place else p for p in new.places]})
                new = with_epoch_place(core, new, seq, destroyed_keys=True)  # `complete` again
            done.append(new.model_copy(update={"issued_at": at}))
        core.db.put_meta(INDEX, json.dumps(kept) if kept else None)
    return done, forged
