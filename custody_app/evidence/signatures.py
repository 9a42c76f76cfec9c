"""verify's per-event writer signature check (DESIGN 14): each event is checked offline against
the policy in force when it was written (its `policy_hash` -> the stored policy text). An event
naming a `signer` needs that key registered for its actor and a good signature over its hash;
an event by an actor whose key that policy registered needs a signer. A `policy` event whose
policy registers writer keys is signed by the ledger's own key (checked where that key is
known: the key store, or `verify --key`), so no hand-appended policy registers a forger."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from custody_app.domain.policy import SIGNER_PREFIX
from custody_app.keys.writer_keys import signature_ok, signer_from_pem
from store.rows import EventRow

if TYPE_CHECKING:
    from store import LedgerFile


# "Not read yet" in the cache of registered keys (None is an answer: no intact policy text).
_UNREAD: Any = object()
# The body `plain` checks against: one that names no signer.
_NO_SIGNER: dict[str, Any] = {}


class SignatureAudit:
    """Checks each event's writer signature while verify walks the chain (the registered keys
    read once per policy)."""

    def __init__(self, db: LedgerFile, ledger_pem: str | None = None) -> None:
        self.db = db
        # The ledger's own key as a signer, when known: what signs a policy with writer keys.
        self.ledger_signer = signer_from_pem(ledger_pem) if ledger_pem else None
        self._keys: dict[str, dict[str, str] | None] = {}
        self.signed = 0
        # The policy the latest `policy` event brought into force: every later event names it.
        self.in_force: str | None = None

    def registered(self, policy_hash: str) -> dict[str, str] | None:
        """Actor -> `ed25519:...` key the policy registers; None when no stored text hashes to
        `policy_hash` (missing, or replaced). Bearer-key registrations of old policies are no
        keys: the events written under them were never signed."""
        if policy_hash not in self._keys:
            stored = self.db.policies.get(policy_hash)
            found: dict[str, str] | None = None
            if stored is not None and hashlib.sha256(stored[0].encode()).hexdigest() == policy_hash:
                try:
                    keys = json.loads(stored[0]).get("provenance", {}).get("writer_keys", {})
                except (ValueError, AttributeError):
                    keys = None
                if isinstance(keys, dict):
                    found = {str(a): k for a, k in keys.items()
                             if isinstance(k, str) and k.startswith(SIGNER_PREFIX)}
            self._keys[policy_hash] = found
        return self._keys[policy_hash]

    def plain(self, row: EventRow) -> str | None:
        """`check` of an event whose body names no signer (a plain affirm): the same answer,
        the common case (unsigned, under the policy in force, by an actor it registered no key
        for) settled without the general path."""
        keys = self._keys.get(row.policy_hash, _UNREAD)
        if (row.signature is None and keys is not _UNREAD and not (keys and row.actor in keys)
                and (self.in_force is None or row.policy_hash == self.in_force)):
            return None
        return self.check(row, _NO_SIGNER)

    def check(self, row: EventRow, body: dict[str, Any]) -> str | None:
        """What is wrong with the event's signature, or None."""
        signer = body.get("signer")
        if row.kind == "policy":
            self.in_force = row.policy_hash
            return self._check_policy(row, signer)
        if self.in_force is not None and row.policy_hash != self.in_force:
            # Else a rewrite could move a writer's event under an older policy without its key.
            return (f"event {row.seq} names policy {row.policy_hash[:12]}..., not the one in "
                    f"force since the policy event before it ({self.in_force[:12]}...)")
        if signer is None and row.signature is None:
            keys = self._keys.get(row.policy_hash, _UNREAD)
            if keys is _UNREAD:
                keys = self.registered(row.policy_hash)
            if keys and row.actor in keys:
                return (f"event {row.seq} was written as {row.actor}, whose key the policy in "
                        "force registered, but it is not signed")
            return None
        if signer is None:
            return f"event {row.seq} carries a signature but names no signer"
        self.signed += 1
        keys = self.registered(row.policy_hash)
        if keys is None:
            return (f"event {row.seq} is signed, but the policy it was written under "
                    f"({row.policy_hash[:12]}...) is not stored intact to say whose key it is")
        if not isinstance(signer, str) or keys.get(row.actor) != signer:
            return (f"event {row.seq} is signed by a key the policy in force did not register "
                    f"for {row.actor}")
        if row.signature is None:
            return f"event {row.seq} names a signer but its signature is missing"
        if not signature_ok(signer, row.hash, row.signature):
            return f"event {row.seq} has a signature that does not verify under its signer"
        return None

    def _check_policy(self, row: EventRow, signer: Any) -> str | None:
        """A policy registering writer keys came into force signed by the ledger's key."""
        if signer is None and row.signature is not None:
            return f"event {row.seq} carries a signature but names no signer"
        if signer is None:
            if self.registered(row.policy_hash) and self.ledger_signer is not None:
                return (f"event {row.seq} brings in a policy that registers writer keys, but "
                        "the ledger's key did not sign it")
            return None
        if self.ledger_signer is not None and signer != self.ledger_signer:
            return (f"event {row.seq} brings in a policy signed by a key that is not this "
                    "ledger's")
        if not isinstance(signer, str) or not signature_ok(signer, row.hash, row.signature):
            return f"event {row.seq} has a signature that does not verify under its signer"
        return None
