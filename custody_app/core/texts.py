"""Sealed free text in the core: sealing an event's free text as it is appended, and opening it
back into the body for every read (shown as erased once its blob or key is gone)."""

from __future__ import annotations

import json
from typing import Any

from custody_app.domain.chain import new_salt
from custody_app.domain.errors import LedgerError
from custody_app.domain.sealed_text import (
    BODY_KEY,
    ERASED_TEXT,
    SEALED_FIELDS,
    SEALED_TEXT,
    Texts,
    block,
    erased_texts,
    merge,
    split,
    text_commitment,
)
from custody_app.keys import crypto
from custody_app.keys.keyring import KeyRing
from custody_app.keys.values import TextCodec
from store import LedgerFile
from store.rows import TextRow

Sealed = tuple[str, str, bytes, str]
"""(fact_id, subject_ref, sealed blob, salt): the event_texts row an append adds."""
# seal_event's "the subject's latest erasure was not read yet" (None is a real answer: never).
NOT_READ: Any = object()


def seal_event(db: LedgerFile, keys: KeyRing | None, codec: TextCodec, work_started: str,
               kind: str, fact_id: str | None, envelope: dict[str, Any],
               subject: str | None, erased_at: str | None = NOT_READ
               ) -> tuple[dict[str, Any], Sealed | None]:
    """The body to hash (free text replaced by its commitment) and the row to store;
    `work_started` is the key fence's start of the write's work; `erased_at`: the subject's
    latest erasure when the caller read it in this transaction (NOT_READ: read here)."""
    if fact_id is None or kind not in SEALED_FIELDS:
        return envelope, None
    body, texts = split(kind, envelope)
    if not texts:
        return envelope, None
    if keys is None:
        raise LedgerError("keystore_missing", "the key store is not available; cannot write")
    if kind != "assert" or subject is None:
        fact = db.facts.get(fact_id)
        if fact is None:
            raise LedgerError("unknown_fact", f"fact {fact_id} does not exist in this ledger")
        subject = fact.subject
    ref = keys.subject_ref(subject)
    salt = new_salt()
    if erased_at is NOT_READ:
        erased_at = db.erasure.last_tombstone_at(ref)
    blob = codec.seal(fact_id, subject, texts, work_started=work_started,
                      now=str(envelope["tx_at"]), erased_at=erased_at)
    body[BODY_KEY] = block(salt, texts)
    return body, (fact_id, ref, blob, salt)


def opened_texts(db: LedgerFile, codec: TextCodec, seq: int) -> Texts | None:
    """An event's free text, None when erased (or its key is gone). Raises DecryptError."""
    row = db.texts.get(seq)
    if row is None:
        return None
    fact_id, ref, blob, _salt = row
    return codec.open(fact_id, ref, blob)


def open_body(db: LedgerFile, codec: TextCodec, seq: int, body_text: str) -> dict[str, Any]:
    """An event's body as readers see it: its free text opened back in place, or `(erased)`."""
    body: dict[str, Any] = json.loads(body_text)
    if BODY_KEY not in body:
        return body  # written before sealing, on a ledger not upgraded yet (read-only open)
    try:
        texts = opened_texts(db, codec, seq)
    except crypto.DecryptError:
        raise LedgerError("text_unreadable", f"the sealed free text of event {seq} does not "
                          "decrypt: it was tampered with or the key store does not match "
                          "(run verify)", seq=seq) from None
    if texts is None:
        # Sealed and unread (no key store) is not erased: said as what it is.
        unread = codec.keys is None and db.texts.get(seq) is not None
        return merge(body, erased_texts(body, SEALED_TEXT if unread else ERASED_TEXT))
    return merge(body, texts)


def text_record(db: LedgerFile, codec: TextCodec, row_seq: int, body_text: str) -> dict[str, Any]:
    """What packs and exports carry beside a sealed event: its opened free text with its salt
    (so the commitment can be checked offline), both null once erased; {} for other events."""
    if f'"{BODY_KEY}"' not in body_text:
        return {}
    stored = db.texts.get(row_seq)
    try:
        texts = opened_texts(db, codec, row_seq)
    except crypto.DecryptError:
        texts = None
    salt = stored[3] if stored is not None and texts is not None else None
    return {"text": texts, "text_salt": salt}


# `text_problem`'s "not opened yet" (None is a real answer for an opened text), and "read, but
# it does not decrypt".
UNREAD: Any = object()
UNDECRYPTED: Any = object()


def text_problem(codec: TextCodec, seq: int, fact_id: str | None, body: dict[str, Any],
                 stored: TextRow | None, opened: Any = UNREAD,
                 ciphers: crypto.Ciphers | None = None) -> tuple[str | None, bool]:
    """(what is wrong with an event's sealed free text or None, whether it is erased). An
    erased text is allowed only with a forget or expire of its fact: the caller checks that.
    `stored`: the event's event_texts row (None when it has none); `opened`: its opened text
    when the caller already opened it (verify's chain walk opens an upgraded event's text for
    its hash); `ciphers`: the walk's cipher cache."""
    blk = body.get(BODY_KEY)
    if blk is None:
        return ((f"event {seq} has a sealed free text row but its body commits to none", False)
                if stored is not None else (None, False))
    if not isinstance(blk, dict) or stored is None:
        return (None, True) if isinstance(blk, dict) else (
            f"event {seq} has a malformed sealed_text block", False)
    stored_fact, ref, blob, salt = stored
    if stored_fact != fact_id:
        return f"event {seq} has sealed free text filed under another fact", False
    if (blob is None) != (salt is None):
        return f"event {seq} has sealed free text without its salt, or a salt without it", False
    try:
        texts = codec.open(stored_fact, ref, blob, ciphers) if opened is UNREAD else opened
    except (crypto.DecryptError, ValueError):
        texts = UNDECRYPTED
    if texts is UNDECRYPTED:
        return f"event {seq} has sealed free text that does not decrypt", False
    if texts is None:
        return None, blob is None  # a blob whose key is absent cannot be checked, like a value
    assert salt is not None
    try:
        if text_commitment(salt, texts) != blk.get("commitment") or sorted(texts) != blk.get(
                "fields"):
            return f"event {seq} free text does not match its commitment", False
    except ValueError:
        return f"event {seq} has a malformed free text salt", False
    return None, False
