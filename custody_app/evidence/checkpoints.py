"""Signed checkpoints: an Ed25519 signature over (seq, head hash, tx_at) of the chain."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from custody_app.domain.chain import canonical
from custody_app.domain.errors import LedgerError
from custody_app.domain.readmodels import CheckpointResult
from custody_app.keys import crypto
from custody_app.keys.keyring import public_key_path_for, write_public_key
from store.rows import EventRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


def statement(seq: int, head_hash: str, tx_at: str) -> bytes:
    """The exact bytes a checkpoint signs."""
    return canonical({"custody_checkpoint": 1, "seq": seq, "head": head_hash,
                      "tx_at": tx_at}).encode()


def sign_checkpoint(ledger: LedgerCore, actor: str) -> CheckpointResult:
    if ledger.keys is None:
        raise LedgerError("keystore_missing", "the key store (with the signing key) is not available")
    with ledger.transaction():
        head = ledger.head
        if head is None:
            raise LedgerError("empty_ledger", "the ledger has no events to sign")
        seq, head_hash, head_tx = head
        pem = ledger.keys.public_pem()
        signature = crypto.sign(ledger.keys.signing_key, statement(seq, head_hash, head_tx))
        tx_at = ledger.tx_at()
        row = ledger.append("checkpoint", actor, tx_at, {
            "checkpoint_seq": seq, "head_hash": head_hash, "head_tx_at": head_tx,
            "key_fingerprint": crypto.public_fingerprint(pem), "signature": signature})
    # The public half beside the ledger, for `verify --key` by whoever holds a copy.
    if not public_key_path_for(ledger.db.path).exists():
        try:
            write_public_key(ledger.db.path, pem)
        except LedgerError:
            pass  # the checkpoint is committed; a path we may not write only loses the copy
    return CheckpointResult(event_id=row.hash, seq=row.seq, tx_at=tx_at, checkpoint_seq=seq,
                            head_hash=head_hash, key_fingerprint=crypto.public_fingerprint(pem))


class CheckpointAudit:
    """Checks signed checkpoints while the chain is walked: each signature under the given
    public key, and that the event it names still has the hash it signed."""

    def __init__(self, checkpoints: list[tuple[int, str]], public_pem: str | None) -> None:
        self.public_pem = public_pem
        self.bodies = {seq: json.loads(body) for seq, body in checkpoints}
        self.wanted = {b["checkpoint_seq"]: (seq, b["head_hash"]) for seq, b in self.bodies.items()}
        self.count = len(checkpoints)
        self.last = max(self.bodies, default=None)
        # The newest signed event that still hashes as signed: a rewrite lies after it.
        self.last_good: int | None = None

    def check(self, row: EventRow) -> str | None:
        if row.seq in self.wanted:
            at, signed = self.wanted[row.seq]
            if row.hash != signed:
                since = (f"after event {self.last_good} (the newest signed event that still "
                         "matches)" if self.last_good is not None else "from the first event")
                return (f"the checkpoint at seq {at} signed event {row.seq} with hash "
                        f"{signed[:12]}..., but it now hashes to {row.hash[:12]}...: the chain "
                        f"was rewritten at or before event {row.seq}, {since}")
            self.last_good = row.seq
        if row.kind == "checkpoint" and self.public_pem is not None:
            body = self.bodies.get(row.seq) or json.loads(row.body)
            message = statement(body["checkpoint_seq"], body["head_hash"], body["head_tx_at"])
            if not crypto.verify_signature(self.public_pem, message, body["signature"]):
                return (f"the checkpoint at seq {row.seq} is not signed by the given public key")
        return None
