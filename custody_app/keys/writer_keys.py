"""Writer keys (DESIGN 14): Ed25519 key pairs. The policy registers a writer's PUBLIC key
(`"ed25519:<64 hex>"`); a process holding the private key signs every event it writes as that
writer, and `verify` checks each signature offline against the policy in force then."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from custody_app.domain.errors import LedgerError
from custody_app.domain.policy import SIGNER_PREFIX, Policy
from custody_app.files.output import write_new_files
from custody_app.keys import crypto

# What an event's signature signs: this tag, then the event's hash (64 hex digits). The tag
# keeps a writer's event signature from ever reading as a signature over anything else.
_SIGNED = b"custody-app event hash v1\n"


def signer_of(public_raw: bytes) -> str:
    """A public key as the policy registers it and an event's `signer` names it."""
    return SIGNER_PREFIX + public_raw.hex()


@dataclass(frozen=True)
class WriterKey:
    """A writer's private key, held by the process that writes as it."""

    private_raw: bytes
    signer: str

    @classmethod
    def from_raw(cls, private_raw: bytes) -> WriterKey:
        public = Ed25519PrivateKey.from_private_bytes(private_raw).public_key()
        return cls(private_raw, signer_of(public.public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)))

    @cached_property
    def _private(self) -> Ed25519PrivateKey:
        return Ed25519PrivateKey.from_private_bytes(self.private_raw)

    def sign(self, event_hash: str) -> bytes:
        return self._private.sign(_SIGNED + event_hash.encode("ascii"))

    def __repr__(self) -> str:  # never print the private half
        return f"WriterKey({self.signer})"


def signature_ok(signer: str, event_hash: str, signature: bytes | None) -> bool:
    """Does `signature` sign `event_hash` under the public key `signer` names?"""
    if signature is None or not signer.startswith(SIGNER_PREFIX):
        return False
    try:
        _public(signer).verify(signature, _SIGNED + event_hash.encode("ascii"))
    except (InvalidSignature, ValueError):
        return False
    return True


@lru_cache(maxsize=256)
def _public(signer: str) -> Ed25519PublicKey:
    """A signer's public key, loaded once (verify checks every event of a writer with it)."""
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(signer[len(SIGNER_PREFIX):]))


def signer_from_pem(pem: str) -> str | None:
    """An Ed25519 public key in PEM (the ledger's `.pub`) as a `signer`, or None."""
    try:
        public = serialization.load_pem_public_key(pem.encode())
    except (ValueError, TypeError):
        return None
    if not isinstance(public, Ed25519PublicKey):
        return None
    return signer_of(public.public_bytes(serialization.Encoding.Raw,
                                         serialization.PublicFormat.Raw))


def parse_key(data: bytes, where: str = "the writer key") -> WriterKey:
    """A private writer key from a key file's bytes (PKCS#8 PEM, what `writer-key` writes);
    refused (`key_unreadable`) otherwise: a public key, a registration line or an old bearer
    key proves nothing."""
    try:
        return WriterKey.from_raw(crypto.private_from_pem(data.decode("ascii")))
    except (UnicodeDecodeError, ValueError):
        raise LedgerError("key_unreadable", f"{where} is not an Ed25519 private key (PEM): make "
                          "one with `custody-app writer-key --agent NAME --out FILE`") from None


def read_key(path: str | Path) -> WriterKey:
    """A writer key file, refused (`key_unreadable`) when it cannot be read or is no key."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise LedgerError("key_unreadable",
                          f"cannot read writer key {path}: {exc.strerror}") from None
    return parse_key(data, f"writer key {path}")


def new_key(path: str | Path) -> str:
    """Write a fresh Ed25519 writer key to `path` (PKCS#8 PEM, mode 0600, never over an
    existing file); returns the public key as the policy registers it."""
    raw = crypto.new_signing_key()
    write_new_files([(path, crypto.private_pem(raw), False)])
    return WriterKey.from_raw(raw).signer


def registered(policy: Policy, actor: str) -> str | None:
    """The public key the policy registers for `actor` (`ed25519:...`), or None."""
    found = policy.provenance.writer_keys.get(actor)
    return found if found is not None and found.startswith(SIGNER_PREFIX) else None


def vouches(policy: Policy, actor: str, key: WriterKey) -> bool:
    """Does the policy register this key's public half for this actor?"""
    found = registered(policy, actor)
    return found is not None and hmac.compare_digest(found, key.signer)


def required_message(actor: str) -> str:
    """Why a process that names `actor` without its registered key is refused."""
    return (f"the policy in force registers a writer key for {actor}: only a process holding "
            f"that key may write as {actor} (start it with --agent {actor} --writer-key FILE, "
            "or present the key through the Python API)")
