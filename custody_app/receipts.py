"""The public import path for tool wrappers: `from custody_app.receipts import sign`."""

from __future__ import annotations

from custody_app.domain.receipts import Receipt, json_sha256, resolve_pointer
from custody_app.keys.receipts import new_issuer_key, public_hex, receipt_problem, sign

__all__ = ["Receipt", "json_sha256", "new_issuer_key", "public_hex", "receipt_problem",
           "resolve_pointer", "sign"]
