"""The demo's tool receipts, bound to the ledger they are replayed into. The sample's receipts
are signed by the two demo issuers (their private keys ship in sample_data/demo_keys, for the
demo only) for no ledger in particular; a receipt that names no `audience` is refused (DESIGN
14), so `--demo` re-signs each one naming the new ledger's id before replaying the sample."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from custody_app.domain.receipts import Receipt
from custody_app.domain.resources import resource
from custody_app.keys import crypto

# The demo issuers the demo policy registers, and the file of each one's private key.
DEMO_KEYS = {"gateway:crm": "sample_data/demo_keys/crm-gateway.key",
             "gateway:billing": "sample_data/demo_keys/billing-gateway.key"}


def bind_receipt(receipt: dict[str, Any], key_pem: str, audience: str) -> dict[str, Any]:
    """The same receipt for the ledger `audience`, signed again with the issuer's key."""
    draft = Receipt.model_validate({**receipt, "audience": audience})
    signature = crypto.sign(crypto.private_from_pem(key_pem), draft.statement())
    return draft.model_copy(update={"signature": signature}).model_dump(exclude_none=True)


def bind_demo_receipts(text: str, ledger_id: str) -> str:
    """A sample batch (JSON Lines with comments) with every demo issuer's receipt, an op's
    `receipt` or its `cause.receipt`, re-signed for the ledger `ledger_id`; other lines as
    they are."""
    keys: dict[str, str] = {}
    out = []
    for line in text.splitlines(keepends=True):
        if not line.lstrip().startswith("{") or '"receipt"' not in line:
            out.append(line)
            continue
        op = json.loads(line)
        for holder in (op, op.get("cause") or {}):
            receipt = holder.get("receipt")
            issuer = receipt.get("issuer") if isinstance(receipt, dict) else None
            if isinstance(receipt, dict) and isinstance(issuer, str) and issuer in DEMO_KEYS:
                if issuer not in keys:
                    keys[issuer] = Path(resource(DEMO_KEYS[issuer])).read_text(encoding="ascii")
                holder["receipt"] = bind_receipt(receipt, keys[issuer], ledger_id)
        out.append(json.dumps(op, ensure_ascii=False, separators=(",", ":")) + "\n")
    return "".join(out)
