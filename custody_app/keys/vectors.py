"""Sealing a server ledger's recall vectors and cell centroids (issue 34, DESIGN 15: nothing
erasable in the clear on a server). A fact's words can be read back from its vector, and a
centroid of a one-vector cell is that vector, so both are stored AES-256-GCM sealed under a key
derived from the word index key. Every path that rotates the index key (rotate-index-key,
rotate-epoch, the roll-forward of a rotation cut short) re-seals them in the ledger transaction
that re-indexes, so a copy taken before an erasure (a pg_dump, the WAL, a replica) no longer
opens its vectors once the epoch that wrapped the old index key is destroyed.

Each blob is bound to its row (a vector to its fact's assert seq, a centroid to its cell): a
blob moved to another row does not open, and recall refuses (`recall_vector_unreadable`)
instead of ranking with it. The store calls this through `store.rows.VectorSeal`; it never
sees a key."""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from custody_app.domain.errors import LedgerError
from custody_app.keys.crypto import NONCE_BYTES
from custody_app.keys.keyring import index_key_id

# Stored layout: version byte, nonce, ciphertext and tag (29 bytes more than the vector).
_VERSION = b"\x01"
_LABEL = b"custody:recall vectors:v1"
SEALED = "sealed"


def vector_key(index_key: bytes) -> bytes:
    """The vector key of a word index key (HMAC-SHA256 under it: one key destroyed with the
    other, never stored)."""
    return hmac.digest(index_key, _LABEL, "sha256")


class VectorCipher:
    """Seals and opens vectors and centroids under the key derived from the word index key
    `index_key()` gives now (the key ring's held key, which the index key fence keeps equal
    to the one the ledger's index is under), or under a fixed key (a rotation's old and new
    keys, a background re-clustering)."""

    form = SEALED

    def __init__(self, index_key: Callable[[], bytes]) -> None:
        self._index_key = index_key
        self._cached: tuple[bytes, AESGCM] | None = None

    @classmethod
    def fixed(cls, index_key: bytes) -> VectorCipher:
        return cls(lambda: index_key)

    def key_id(self) -> str:
        """The fingerprint of the word index key this cipher uses now (as the ledger records
        it)."""
        return index_key_id(self._index_key())

    def _aead(self) -> AESGCM:
        key = self._index_key()
        if self._cached is None or not hmac.compare_digest(self._cached[0], key):
            self._cached = (key, AESGCM(vector_key(key)))
        return self._cached[1]

    def _seal(self, bind: bytes, plain: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return _VERSION + nonce + self._aead().encrypt(nonce, plain, _VERSION + bind)

    def _open(self, bind: bytes, blob: bytes, what: str) -> bytes:
        try:
            if blob[:1] != _VERSION:
                raise ValueError("not a sealed vector")
            return self._aead().decrypt(blob[1:1 + NONCE_BYTES], blob[1 + NONCE_BYTES:],
                                        _VERSION + bind)
        except (InvalidTag, ValueError):
            raise LedgerError(
                "recall_vector_unreadable",
                f"the sealed recall {what} does not open under the word index key (changed in "
                "the database, moved from another row, or sealed under a destroyed key): "
                "recall refused rather than rank with it; `custody-app rebuild` re-embeds the "
                "recall index", what=what) from None

    def seal(self, fact_seq: int, vector: bytes) -> bytes:
        return self._seal(b"vector:%d" % fact_seq, vector)

    def open(self, fact_seq: int, blob: bytes) -> bytes:
        return self._open(b"vector:%d" % fact_seq, blob,
                          f"vector of the fact asserted at seq {fact_seq}")

    def seal_centroid(self, cell: int, centroid: bytes) -> bytes:
        return self._seal(b"centroid:%d" % cell, centroid)

    def open_centroid(self, cell: int, blob: bytes) -> bytes:
        return self._open(b"centroid:%d" % cell, blob, f"centroid of cell {cell}")


class Clear:
    """Vectors and centroids stored as they are (the policy's [recall] server_vectors =
    "clear", or an index built before vectors were sealed): the other end of a conversion."""

    form = "clear"

    def seal(self, fact_seq: int, vector: bytes) -> bytes:
        return vector

    def open(self, fact_seq: int, blob: bytes) -> bytes:
        return blob

    def seal_centroid(self, cell: int, centroid: bytes) -> bytes:
        return centroid

    def open_centroid(self, cell: int, blob: bytes) -> bytes:
        return blob


class Lenient:
    """A cipher whose unreadable vector opens as no bytes (a zero-length vector) instead of a
    refusal: for `verify --deep`, which reports such a row as differing from the fact (and
    `rebuild --repair --deep` rebuilds it), where recall refuses."""

    form = SEALED

    def __init__(self, cipher: VectorCipher) -> None:
        self._cipher = cipher

    def seal(self, fact_seq: int, vector: bytes) -> bytes:
        return self._cipher.seal(fact_seq, vector)

    def open(self, fact_seq: int, blob: bytes) -> bytes:
        try:
            return self._cipher.open(fact_seq, blob)
        except LedgerError:
            return b""

    def seal_centroid(self, cell: int, centroid: bytes) -> bytes:
        return self._cipher.seal_centroid(cell, centroid)

    def open_centroid(self, cell: int, blob: bytes) -> bytes:
        return self._cipher.open_centroid(cell, blob)
