"""Free text at rest: sealed under the subject's data key like the value, bound to its fact."""

from __future__ import annotations

import json

from custody_app.domain.errors import LedgerError
from custody_app.domain.sealed_text import Texts
from custody_app.keys import crypto
from custody_app.keys.keyring import KeyRing


def _bind(fact_id: str) -> str:
    # Associated data: a sealed text cannot move to another fact, nor pass for a sealed value.
    return f"text:{fact_id}"


class TextCodec:
    """Seals an event's free text (JSON of field -> text) on write; opens it on read."""

    def __init__(self, keys: KeyRing | None) -> None:
        self.keys = keys

    def seal(self, fact_id: str, subject: str, texts: Texts, *, work_started: str, now: str,
             erased_at: str | None = None) -> bytes:
        if self.keys is None:
            raise LedgerError("keystore_missing", "the key store is not available; cannot write")
        generation, key = self.keys.key_for_write(subject, work_started, now, erased_at)
        data = json.dumps(texts, ensure_ascii=False, sort_keys=True).encode("utf-8")
        return crypto.seal(key, generation, data, _bind(fact_id))

    def open(self, fact_id: str, subject_ref: str, blob: bytes | None) -> Texts | None:
        """The free text; None when erased or its key is gone. Raises DecryptError on tampering."""
        if blob is None or self.keys is None:
            return None
        key = self.keys.key_for_read(subject_ref, crypto.sealed_generation(bytes(blob)))
        if key is None:
            return None
        opened = json.loads(crypto.open_sealed(key, bytes(blob), _bind(fact_id)).decode("utf-8"))
        if not isinstance(opened, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in opened.items()):
            raise crypto.DecryptError("sealed free text is not a map of field to text")
        return opened
