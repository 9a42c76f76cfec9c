"""Subject ids at rest on a server ledger (issue 34, "nothing erasable in the clear"): each id
sealed once (AES-256-GCM) under the subject's data key and bound to its peppered ref, so the
key forget_subject destroys is the only one that opens it, and a sealed id moved to another
subject's row does not open there. The store asks this codec (store.port.SubjectCodec);
nothing above store/ sees a ref where it had an id."""

from __future__ import annotations

from custody_app.domain.errors import LedgerError
from custody_app.keys import crypto
from custody_app.keys.keyring import KeyRing


def subject_bind(ref: str) -> str:
    """What a sealed subject id is bound to (associated data): its own ref."""
    return f"subject:{ref}"


class SubjectIdCodec:
    """Seals and opens subject ids under the subjects' data keys (store.port.SubjectCodec)."""

    def __init__(self, keys: KeyRing) -> None:
        self.keys = keys

    def ref(self, subject: str) -> str:
        return self.keys.subject_ref(subject)

    def seal(self, subject: str, beside: bytes | None) -> bytes | None:
        """The id sealed under the key generation `beside` (the assert's sealed value) was
        sealed with; without one, under the subject's latest live key. None: no live key."""
        ref = self.ref(subject)
        generation = self._generation(ref, beside)
        if generation is None:
            return None
        key = self.keys.key_for_read(ref, generation)
        if key is None:
            return None
        return crypto.seal(key, generation, subject.encode("utf-8"), subject_bind(ref))

    def _generation(self, ref: str, beside: bytes | None) -> int | None:
        if beside is not None:
            try:
                return crypto.sealed_generation(bytes(beside))
            except crypto.DecryptError:
                pass  # not a sealed value: the subject's live key below
        latest = self.keys.store.latest(ref)
        if latest is None or latest[1] is None or latest[3] is not None:
            return None
        return int(latest[0])

    def open(self, subject_ref: str, sealed: bytes) -> str | None:
        """The id; None when its key is destroyed (the subject is erased). A blob that does not
        open under the key of its ref, or opens to another subject, is refused
        (`subject_unreadable`): it is never shown as some subject."""
        try:
            key = self.keys.key_for_open(subject_ref, crypto.sealed_generation(sealed))
            if key is None:
                return None
            subject = crypto.open_sealed(key, sealed, subject_bind(subject_ref)).decode("utf-8")
        except (crypto.DecryptError, UnicodeDecodeError):
            raise _unreadable(subject_ref) from None
        if self.keys.subject_ref(subject) != subject_ref:
            raise _unreadable(subject_ref)
        return subject

    def reseal(self, subject_ref: str, sealed: bytes, generation: int) -> bytes | None:
        """A re-key's re-seal (custody_app.erasure.rekey): the id sealed again under
        `generation`; None when it is at that generation already, its key is gone, or it does
        not open (verify names it)."""
        try:
            if crypto.sealed_generation(sealed) >= generation:
                return None
            subject = self.open(subject_ref, sealed)
        except (crypto.DecryptError, LedgerError):
            return None
        key = self.keys.key_for_read(subject_ref, generation)
        if subject is None or key is None:
            return None
        return crypto.seal(key, generation, subject.encode("utf-8"), subject_bind(subject_ref))


def _unreadable(ref: str) -> LedgerError:
    return LedgerError("subject_unreadable", f"the sealed id of subject {ref[:16]}... does not "
                       "open under its key: it was tampered with or moved from another subject "
                       "(run verify)")
