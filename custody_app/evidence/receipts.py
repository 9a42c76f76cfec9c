"""verify's per-event receipt check: a cited receipt is re-checked against the issuers of the
policy the event was written under, and a `verified` value against the receipt's output."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from custody_app.domain.receipts import Receipt
from custody_app.keys.receipts import receipt_problem
from store.rows import EventRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


class ReceiptAudit:
    """Checks each event's receipt while verify walks the chain (issuers cached per policy)."""

    def __init__(self, ledger: LedgerCore) -> None:
        self.ledger = ledger
        self.issuers: dict[str, dict[str, str]] = {}
        self.count = 0

    def _issuers(self, policy_hash: str) -> dict[str, str]:
        if policy_hash not in self.issuers:
            stored = self.ledger.db.policies.get(policy_hash)
            data = json.loads(stored[0]) if stored is not None else {}
            self.issuers[policy_hash] = dict(data.get("provenance", {}).get("receipt_issuers", {}))
        return self.issuers[policy_hash]

    def check(self, row: EventRow, value_text: str | None = None,
              body: dict[str, Any] | None = None) -> str | None:
        """What is wrong with the event's receipt, or None (also when it cites none). `body`:
        the event's body if the caller already parsed it."""
        if row.kind not in ("assert", "acted"):
            return None
        if body is None:
            try:
                body = json.loads(row.body)
            except ValueError:
                return None  # the chain check names a body that is not JSON
        cited = (body.get("cause") or {}).get("receipt") if row.kind == "assert" else body.get("receipt")
        if cited is None:
            return None
        self.count += 1
        try:
            receipt = Receipt.model_validate(cited)
        except ValidationError:
            return f"event {row.seq} cites a receipt that is not well-formed"
        tool = body.get("tool") if row.kind == "acted" else None
        problem = receipt_problem(receipt, self._issuers(row.policy_hash), body.get("session"), tool)
        if problem is not None:
            return f"event {row.seq}: receipt check {problem[0]} fails: {problem[1]}"
        if (row.kind == "assert" and body.get("provenance") == "verified" and value_text is not None
                and "pointer" not in body["cause"] and not body.get("redactions")
                and hashlib.sha256(value_text.encode()).hexdigest() != receipt.output_sha256):
            return (f"event {row.seq} is recorded verified by receipt {receipt.receipt_id!r}, but "
                    "its value is not that receipt's output")
        return None


def receipt_event_problem(ledger: LedgerCore, row: EventRow,
                          value_text: str | None = None) -> str | None:
    """One event's receipt check on its own (what `explain` reports and tests call)."""
    return ReceiptAudit(ledger).check(row, value_text)
