"""verify's per-event receipt check: every receipt an event carries (an assert's
`cause.receipt`, an action's `receipt` and its `cause.receipt`) is re-checked against the
issuers and age limit of the policy the event was written under and this ledger's id; an
action's receipt against the action (tool, ref, arguments); a `verified` value against what
its receipt covers."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from custody_app.core.texts import opened_texts
from custody_app.domain.policy import ProvenancePolicy
from custody_app.domain.receipts import Receipt, action_gap, predicate_gap
from custody_app.domain.sealed_text import BODY_KEY, merge
from custody_app.domain.timeutil import parse_duration
from custody_app.keys.crypto import DecryptError
from custody_app.keys.receipts import CLOCK_SKEW, Bounds, receipt_problem
from store.rows import EventRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore

CLAIM = "cause.receipt.subject"
DEFAULT_MAX_AGE = str(ProvenancePolicy.model_fields["max_receipt_age"].default)
# The kinds whose events can carry a receipt.
CITING = ("assert", "acted")


def cited(row: EventRow, body: dict[str, Any]) -> list[tuple[str, Any]]:
    """(where, receipt JSON) of every receipt the event carries."""
    if row.kind not in CITING:
        return []
    out = [("cause.receipt", (body.get("cause") or {}).get("receipt"))]
    if row.kind == "acted":
        out.insert(0, ("receipt", body.get("receipt")))
    return [(where, rc) for where, rc in out if rc is not None]


class ReceiptAudit:
    """Checks each event's receipts while verify walks the chain (policies cached)."""

    def __init__(self, ledger: LedgerCore) -> None:
        self.ledger = ledger
        self.policies: dict[str, dict[str, Any]] = {}
        self.count = 0

    def _policy(self, policy_hash: str) -> dict[str, Any]:
        if policy_hash not in self.policies:
            stored = self.ledger.db.policies.get(policy_hash)
            self.policies[policy_hash] = json.loads(stored[0]) if stored is not None else {}
        return self.policies[policy_hash]

    def check(self, row: EventRow, value_text: str | None = None,
              body: dict[str, Any] | None = None) -> str | None:
        """What is wrong with the event's receipts, or None (also when it cites none). `body`:
        the event's body if the caller already parsed it."""
        if row.kind not in CITING:
            return None
        if body is None:
            try:
                body = json.loads(row.body)
            except ValueError:
                return None  # the chain check names a body that is not JSON
        if (row.kind == "assert" and CLAIM in ((body.get(BODY_KEY) or {}).get("fields") or ())):
            body = self._with_subject_claim(row, body)
            if body is None:
                return None  # erased with the fact: its signature can no longer be checked
        for where, raw in cited(row, body):
            problem = self._one(row, body, where, raw, value_text)
            if problem is not None:
                return problem
        return None

    def _with_subject_claim(self, row: EventRow, body: dict[str, Any]) -> dict[str, Any] | None:
        """The body with its receipt's sealed subject claim opened back in place (None once
        erased; a text that does not decrypt is the text audit's to name)."""
        try:
            texts = opened_texts(self.ledger.db, self.ledger.texts, row.seq)
        except DecryptError:
            return None
        if texts is None or CLAIM not in texts:
            return None
        return merge(body, {CLAIM: texts[CLAIM]})

    def _one(self, row: EventRow, body: dict[str, Any], where: str, raw: Any,
             value_text: str | None) -> str | None:
        self.count += 1
        try:
            receipt = Receipt.model_validate(raw)
        except ValidationError:
            return f"event {row.seq} carries a {where} that is not well-formed"
        policy = self._policy(row.policy_hash)
        issuers = dict(policy.get("provenance", {}).get("receipt_issuers", {}))
        problem = receipt_problem(receipt, issuers, body.get("session"), None,
                                  bounds(self.ledger, row.tx_at, policy))
        if problem is None and where == "receipt":
            problem = action_gap(receipt, body.get("tool", ""), body.get("ref", ""),
                                 body.get("args_digest"))
        if problem is not None:
            return f"event {row.seq}: {where} check {problem[0]} fails: {problem[1]}"
        if row.kind == "assert" and body.get("provenance") == "verified":
            return _covers_recorded(row, body, receipt, value_text)
        return None


def _covers_recorded(row: EventRow, body: dict[str, Any], receipt: Receipt,
                     value_text: str | None) -> str | None:
    """A `verified` assert's receipt against what the event keeps: its predicate, its
    subject (while not erased) and, for a whole-output value, the value's digest."""
    cause = body["cause"]
    rid = receipt.receipt_id
    gap = predicate_gap(receipt, str(body.get("predicate")), cause.get("pointer"))
    if gap is not None:
        return f"event {row.seq} is recorded verified by receipt {rid!r}, but {gap}"
    if receipt.subject is not None and row.subject is not None and row.subject != receipt.subject:
        return f"event {row.seq} is recorded verified by receipt {rid!r}, which is about another subject"
    if (value_text is not None and "pointer" not in cause and not body.get("redactions")
            and hashlib.sha256(value_text.encode()).hexdigest() != receipt.output_sha256):
        return (f"event {row.seq} is recorded verified by receipt {rid!r}, but "
                "its value is not that receipt's output")
    return None


def receipt_event_problem(ledger: LedgerCore, row: EventRow,
                          value_text: str | None = None) -> str | None:
    """One event's receipt check on its own (what `explain` reports and tests call)."""
    return ReceiptAudit(ledger).check(row, value_text)


def bounds(ledger: LedgerCore, at: str, policy: dict[str, Any] | None = None) -> Bounds:
    """Where and when a receipt cited at `at` is checked: this ledger's id and the age limit
    of the policy in force (or of `policy`, a stored policy's parsed JSON, for verify)."""
    if policy is None:
        age = ledger.policy.policy.provenance.max_receipt_age
        return Bounds(ledger.ledger_id, at, parse_duration(age))
    age = str(policy.get("provenance", {}).get("max_receipt_age", DEFAULT_MAX_AGE))
    # The door checked against its clock a moment before the event's tx_at: verify allows
    # that moment (the skew a receipt may be early by), never a refund months later. A ledger
    # whose id is not chained (older ledger) took audience-less receipts before they were
    # refused: verify lets those stand; a ledger created since refuses them everywhere.
    return Bounds(ledger.ledger_id, at, parse_duration(age) + CLOCK_SKEW,
                  require_audience=ledger.id_chained)
