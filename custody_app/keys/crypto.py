"""Cryptography in one place: key wrapping, value encryption, keyed digests and signatures."""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
NONCE_BYTES = 12
# Sealed value layout: magic, key generation (u32), nonce, AES-256-GCM ciphertext+tag.
_MAGIC = b"CV1"
_HEADER = struct.Struct(">3sI12s")


class DecryptError(Exception):
    """A value or wrapped key that cannot be opened (wrong key, destroyed key, or tampered)."""


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def wrap(master: bytes, key: bytes, purpose: str) -> bytes:
    """Encrypt a key under the master key; `purpose` binds it to its slot."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(master).encrypt(nonce, key, b"custody:wrap:" + purpose.encode())


def unwrap(master: bytes, wrapped: bytes, purpose: str) -> bytes:
    try:
        return AESGCM(master).decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:],
                                      b"custody:wrap:" + purpose.encode())
    except (InvalidTag, ValueError):
        raise DecryptError(f"the {purpose} key does not open under this master key") from None


def seal(key: bytes, generation: int, plaintext: bytes, bind: str) -> bytes:
    """AES-256-GCM with the fact id as associated data, so a value cannot move to another fact."""
    nonce = os.urandom(NONCE_BYTES)
    header = _HEADER.pack(_MAGIC, generation, nonce)
    return header + AESGCM(key).encrypt(nonce, plaintext, header + bind.encode())


def sealed_generation(blob: bytes) -> int:
    if len(blob) < _HEADER.size:
        raise DecryptError("a stored value is too short to be a sealed custody value")
    magic, generation, _ = _HEADER.unpack_from(blob)
    if magic != _MAGIC:
        raise DecryptError("not a sealed custody value")
    return int(generation)


def open_sealed(key: bytes, blob: bytes, bind: str) -> bytes:
    header = blob[:_HEADER.size]
    _, _, nonce = _HEADER.unpack(header)
    try:
        return AESGCM(key).decrypt(nonce, blob[_HEADER.size:], header + bind.encode())
    except (InvalidTag, ValueError):
        raise DecryptError("a stored value does not open: wrong key or tampered") from None


class Ciphers:
    """Opening sealed blobs with each key's cipher made once: for one walk that opens many
    blobs under few keys (verify opens every event's sealed text). Held for that walk only, so
    no cipher outlives the key ring's own copy of a key that is destroyed later.

    `key_for(ref, generation)`: the key a blob names (None when it is gone; DecryptError when
    the key store never held it). With `snapshot`, its answers cannot change during the walk
    (it reads a copy of the key store taken once: KeyRing.snapshot_keys): each (ref,
    generation) is then asked once and its cipher, or its absence, kept."""

    def __init__(self, key_for: Callable[[str, int], bytes | None], *,
                 snapshot: bool = False) -> None:
        self.key_for = key_for
        self._by_key: dict[bytes, AESGCM] = {}
        self._by_ref: dict[tuple[str, int], AESGCM | None] | None = {} if snapshot else None

    def _cipher(self, ref: str, generation: int) -> AESGCM | None:
        key = self.key_for(ref, generation)
        if key is None:
            return None
        aead = self._by_key.get(key)
        if aead is None:
            if len(self._by_key) >= 65_536:
                self._by_key.clear()
            aead = self._by_key[key] = AESGCM(key)
        return aead

    def open_blob(self, ref: str, blob: bytes, bind: str) -> bytes | None:
        """`open_sealed(key_for(ref, sealed_generation(blob)), blob, bind)` (None when
        `key_for` has no key), the header read once; the same DecryptError where they raise."""
        if len(blob) < _HEADER.size:
            raise DecryptError("a stored value is too short to be a sealed custody value")
        magic, generation, nonce = _HEADER.unpack_from(blob)
        if magic != _MAGIC:
            raise DecryptError("not a sealed custody value")
        by_ref = self._by_ref
        if by_ref is None:
            aead = self._cipher(ref, generation)
        else:
            slot = (ref, generation)
            aead = by_ref.get(slot, _UNSEEN)
            if aead is _UNSEEN:
                if len(by_ref) >= 65_536:
                    by_ref.clear()
                aead = by_ref[slot] = self._cipher(ref, generation)
        if aead is None:
            return None
        try:
            return aead.decrypt(nonce, blob[_HEADER.size:], blob[:_HEADER.size] + bind.encode())
        except (InvalidTag, ValueError):
            raise DecryptError("a stored value does not open: wrong key or tampered") from None


_UNSEEN: Any = object()  # Ciphers: a (ref, generation) not asked yet (None: its key is gone)


_LENGTH = struct.Struct(">I")  # a keyed digest's length prefix


def keyed_digest(key: bytes, *parts: str) -> str:
    """HMAC-SHA256 over length-prefixed parts (so ("ab","c") and ("a","bc") differ), in one
    call of the C one-shot (`hmac.digest`: a sweep takes two per fact; the same bytes as
    updating an `hmac.new` object part by part, tests/test_crypto_digest.py)."""
    chunks: list[bytes] = []
    for part in parts:
        data = part.encode("utf-8")
        chunks += (_LENGTH.pack(len(data)), data)
    return hmac.digest(key, b"".join(chunks), "sha256").hex()


def plain_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def new_signing_key() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
        serialization.NoEncryption())


def public_pem(private_raw: bytes) -> str:
    public = Ed25519PrivateKey.from_private_bytes(private_raw).public_key()
    return public.public_bytes(serialization.Encoding.PEM,
                               serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def public_fingerprint(pem: str) -> str:
    return hashlib.sha256(pem.strip().encode()).hexdigest()[:16]


def sign(private_raw: bytes, message: bytes) -> str:
    return Ed25519PrivateKey.from_private_bytes(private_raw).sign(message).hex()


def verify_signature(pem: str, message: bytes, signature_hex: str) -> bool:
    public = serialization.load_pem_public_key(pem.encode())
    if not isinstance(public, Ed25519PublicKey):
        return False
    try:
        public.verify(bytes.fromhex(signature_hex), message)
    except (InvalidSignature, ValueError):
        return False
    return True


def private_pem(private_raw: bytes) -> str:
    """An Ed25519 private key as unencrypted PKCS#8 PEM (what `eval --sign` reads)."""
    return Ed25519PrivateKey.from_private_bytes(private_raw).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()


def private_from_pem(text: str) -> bytes:
    """The raw Ed25519 private key of a PKCS#8 PEM; ValueError when it is not one."""
    try:
        key = serialization.load_pem_private_key(text.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an Ed25519 private key")
    return key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())
