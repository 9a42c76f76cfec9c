"""Who wrote an event, as a key rather than a name (DESIGN 14): the writer key that signed it."""

from __future__ import annotations

import re
from typing import Any

# A keyed process's events carry `signer`: "ed25519:" and the raw public key in hex.
_SIGNER = re.compile(r"^ed25519:[0-9a-f]{64}$")


def identity_of(event_body: dict[str, Any]) -> str | None:
    """The identity an event proves: its `signer` (`ed25519:<hex public key>`) when a keyed
    process wrote it, else None (an unkeyed writer proves no identity: its name and session
    are claims anyone can make)."""
    signer = event_body.get("signer")
    return signer if isinstance(signer, str) and _SIGNER.fullmatch(signer) else None
