"""Fixed Ed25519 writer keys for tests: deterministic test material, never for a real policy."""

from __future__ import annotations

from custody_app.keys import crypto
from custody_app.keys.writer_keys import WriterKey


def key_pem(n: int) -> bytes:
    """The n-th fixed test writer key, as the PEM file `custody-app writer-key` writes."""
    return crypto.private_pem(bytes([n]) * 32).encode("ascii")


def signer(key: bytes) -> str:
    """The public key (`ed25519:...`) a policy registers for a test key's PEM."""
    return WriterKey.from_raw(crypto.private_from_pem(key.decode("ascii"))).signer


def registration(*pairs: tuple[str, bytes]) -> str:
    """A policy's `[provenance] writer_keys` line registering each (actor, key PEM)."""
    inner = ", ".join(f'"{actor}" = "{signer(key)}"' for actor, key in pairs)
    return f"writer_keys = {{{inner}}}\n"


KEY = key_pem(1)
OTHER_KEY = key_pem(2)
