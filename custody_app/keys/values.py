"""Values and free text at rest: sealed under the subject's data key, opened for reads and
verification (free text bound to its fact, so it cannot move to another fact)."""

from __future__ import annotations

import json
from typing import Any

from custody_app.domain.canonical import parse
from custody_app.domain.errors import LedgerError
from custody_app.domain.sealed_text import Texts
from custody_app.keys import crypto
from custody_app.keys.keyring import KeyRing
from store.rows import EventRow

# Sealed free text's plaintext: its fields sorted, UTF-8 kept (an encoder made once, as
# json.dumps(texts, ensure_ascii=False, sort_keys=True) would make one for each call).
_TEXTS = json.JSONEncoder(ensure_ascii=False, sort_keys=True)


def _seal(keys: KeyRing | None, subject: str, data: bytes, bind: str, work_started: str,
          now: str, erased_at: str | None) -> bytes:
    """Seal under the subject's current key (the key fence applies); `erased_at`: the ledger's
    latest erasure of the subject."""
    if keys is None:
        raise LedgerError("keystore_missing", "the key store is not available; cannot write")
    generation, key = keys.key_for_write(subject, work_started, now, erased_at)
    return crypto.seal(key, generation, data, bind)


def _open(keys: KeyRing | None, subject_ref: str, blob: bytes | None, bind: str,
          ciphers: crypto.Ciphers | None = None) -> bytes | None:
    """The plaintext; None when erased or its key is gone. Raises DecryptError on tampering."""
    if blob is None or keys is None:
        return None
    if ciphers is not None:
        return ciphers.open_blob(subject_ref, bytes(blob), bind)
    key = keys.key_for_open(subject_ref, crypto.sealed_generation(bytes(blob)))
    return None if key is None else crypto.open_sealed(key, bytes(blob), bind)


_ALL_TEXT = frozenset((str,))


def _bind(fact_id: str) -> str:
    # Associated data: a sealed text cannot move to another fact, nor pass for a sealed value.
    return f"text:{fact_id}"


def text_bind(fact_id: str) -> str:
    """What a fact's sealed free text is bound to (a value is bound to its fact id)."""
    return _bind(fact_id)


def reseal(keys: KeyRing, ref: str, blob: bytes, bind: str, generation: int,
           key: bytes) -> bytes | None:
    """`blob` sealed again under the subject's `generation` (`key`), the same plaintext and
    binding (issue 34's re-key); None when it is at that generation or above already, or its
    key is gone. Raises DecryptError on a tampered blob."""
    old = crypto.sealed_generation(blob)
    if old >= generation:
        return None
    old_key = keys.key_for_read(ref, old)
    if old_key is None:
        return None
    return crypto.seal(key, generation, crypto.open_sealed(old_key, blob, bind), bind)


class TextCodec:
    """Seals an event's free text (JSON of field -> text) on write; opens it on read."""

    def __init__(self, keys: KeyRing | None) -> None:
        self.keys = keys

    def seal(self, fact_id: str, subject: str, texts: Texts, *, work_started: str, now: str,
             erased_at: str | None = None) -> bytes:
        data = _TEXTS.encode(texts).encode("utf-8")
        return _seal(self.keys, subject, data, _bind(fact_id), work_started, now, erased_at)

    def open(self, fact_id: str, subject_ref: str, blob: bytes | None,
             ciphers: crypto.Ciphers | None = None) -> Texts | None:
        """The free text; None when erased or its key is gone. Raises DecryptError on tampering.
        `ciphers`: a walk's cipher cache (verify's)."""
        data = (ciphers.open_blob(subject_ref, bytes(blob), _bind(fact_id))
                if ciphers is not None and blob is not None and self.keys is not None
                else _open(self.keys, subject_ref, blob, _bind(fact_id), ciphers))
        if data is None:
            return None
        opened = parse(data)
        # A JSON object's keys are text already: its values are what to check.
        if type(opened) is not dict or not _ALL_TEXT.issuperset(map(type, opened.values())):
            raise crypto.DecryptError("sealed free text is not a map of field to text")
        return opened


class ValueCodec:
    """Seals canonical value text on write; opens it on read (None once its key is destroyed)."""

    def __init__(self, keys: KeyRing | None) -> None:
        self.keys = keys
        # The free text about a fact is sealed under the same keys (read models open both).
        self.texts = TextCodec(keys)

    def seal(self, fact_id: str, subject: str, value_text: str, *, work_started: str,
             now: str, erased_at: str | None = None) -> bytes:
        """Seal under the subject's key; `erased_at`: the ledger's latest erasure of it."""
        return _seal(self.keys, subject, value_text.encode("utf-8"), fact_id, work_started, now,
                     erased_at)

    def open(self, fact_id: str, subject_ref: str, blob: bytes | None,
             ciphers: crypto.Ciphers | None = None) -> str | None:
        """The canonical value text; None when erased or its key is gone. Raises on tampering.
        `ciphers`: a walk's cipher cache (a sweep's group)."""
        data = _open(self.keys, subject_ref, blob, fact_id, ciphers)
        return None if data is None else data.decode("utf-8")

    def opener(self, row: EventRow, body: dict[str, Any],
               ciphers: crypto.Ciphers | None = None) -> str | None:
        """open() for an assert event row (what verification calls); also checks that a
        plaintext subject still matches the peppered hash the chain holds. `ciphers`: a
        walk's cipher cache (verify's)."""
        ref = str(body.get("subject_ref", ""))
        keys = self.keys
        if row.subject is not None and keys is not None and keys.subject_ref(row.subject) != ref:
            raise crypto.DecryptError("its subject does not match the hashed subject reference")
        blob = row.value
        if ciphers is None or blob is None or keys is None:
            return self.open(row.fact_id or "", ref, blob, ciphers)
        # open() through the walk's cipher cache, without its two frames (verify's every value)
        data = ciphers.open_blob(ref, bytes(blob), row.fact_id or "")
        return None if data is None else data.decode("utf-8")

    def open_or_refuse(self, fact_id: str, subject_ref: str, blob: bytes | None) -> str | None:
        try:
            return self.open(fact_id, subject_ref, blob)
        except crypto.DecryptError:
            raise LedgerError("value_unreadable", f"the stored value of fact {fact_id} does not "
                              "decrypt: it was tampered with or the key store does not match "
                              "(run verify)") from None

    def unreadable(self, blob: bytes | None) -> bool:
        """A value held sealed that this process cannot open: the key store is missing (a
        read-only open without it). Not erased: reads say `sealed`, never `erased`."""
        return blob is not None and self.keys is None

    def open_subject(self, fact_id: str, subject: str, blob: bytes | None) -> str | None:
        """open_or_refuse() by plaintext subject (what reads over the projection have)."""
        if blob is None or self.keys is None:
            return None
        return self.open_or_refuse(fact_id, self.keys.subject_ref(subject), blob)
