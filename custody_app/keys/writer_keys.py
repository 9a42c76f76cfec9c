"""Writer keys: a key file whose sha256 the policy registers for one actor vouches for its writes."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from pathlib import Path

from custody_app.domain.errors import LedgerError
from custody_app.domain.policy import Policy
from custody_app.files.output import write_new_files


def key_digest(key: bytes) -> str:
    """The digest the policy registers: sha256 (hex) of the key file's exact bytes."""
    return hashlib.sha256(key).hexdigest()


def read_key(path: str | Path) -> bytes:
    """A writer key file's bytes; refused (`key_unreadable`) when it cannot be read or is empty."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise LedgerError("key_unreadable",
                          f"cannot read writer key {path}: {exc.strerror}") from None
    if not data:
        raise LedgerError("key_unreadable", f"writer key {path} is empty")
    return data


def new_key(path: str | Path) -> str:
    """Write a fresh random writer key to `path` (mode 0600, never over an existing file);
    returns its digest, the value to register in the policy."""
    text = secrets.token_hex(32) + "\n"
    write_new_files([(path, text, False)])
    return key_digest(text.encode("ascii"))


def vouches(policy: Policy, actor: str, key: bytes) -> bool:
    """Does the policy register this key for this actor? (Compared in constant time.)"""
    registered = policy.provenance.writer_keys.get(actor)
    return registered is not None and hmac.compare_digest(registered, key_digest(key))
