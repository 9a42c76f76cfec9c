"""Sealed free text (DESIGN 13): which fields of which events are sealed, taking them out of
an event body and putting them back, their salted commitment, and the pre-upgrade body."""

from __future__ import annotations

import hashlib
from typing import Any

from custody_app.domain.canonical import canonical, canonical_texts

# The free text attached to a fact: an assert's cause ref and detail, the reason of an event
# about it (and a receipt's subject claim). Forget and expire reasons are fixed codes, never free text.
SEALED_FIELDS: dict[str, tuple[str, ...]] = {
    # A receipt's signed `subject` claim names the data principal: sealed with the fact, so an
    # erasure takes it (verify re-checks the receipt's signature while it can be opened).
    "assert": ("cause.ref", "cause.detail", "cause.receipt.subject"),
    "retract": ("reason",), "confirm": ("reason",), "reject": ("reason",),
    "hold": ("reason",), "release": ("reason",),
}
BODY_KEY = "sealed_text"
# What a read shows in place of sealed text that was erased (or whose key is gone).
ERASED_TEXT = "(erased)"
# What reads show for a value or free text held sealed that this process cannot open because
# the ledger's key store is missing: not erased, and never shown as erased.
SEALED_TEXT = "(sealed: key store missing)"

Texts = dict[str, str]


def _parent(body: dict[str, Any], path: str) -> tuple[dict[str, Any] | None, str]:
    """The dict holding the path's leaf, copied on the way down (so the caller's body, a
    shallow copy, can be changed without touching the original's nested dicts)."""
    *parents, leaf = path.split(".")
    node: Any = body
    for name in parents:
        child = node.get(name) if isinstance(node, dict) else None
        if isinstance(child, dict):
            child = node[name] = dict(child)
        node = child
    return (node if isinstance(node, dict) else None), leaf


def split(kind: str, body: dict[str, Any]) -> tuple[dict[str, Any], Texts]:
    """The body without its free text, and the free text by dotted field name."""
    out = dict(body)
    texts: Texts = {}
    for path in SEALED_FIELDS.get(kind, ()):
        node, leaf = _parent(out, path)
        if node is not None and isinstance(node.get(leaf), str):
            texts[path] = node.pop(leaf)
    return out, texts


def merge(body: dict[str, Any], texts: Texts) -> dict[str, Any]:
    """The body with its free text back in place (and no `sealed_text` block)."""
    out = dict(body)
    out.pop(BODY_KEY, None)
    for path, text in texts.items():
        node, leaf = _parent(out, path)
        if node is not None:
            node[leaf] = text
    return out


def erased_texts(body: dict[str, Any], marker: str = ERASED_TEXT) -> Texts:
    """What reads show for sealed fields whose text was erased (or, `SEALED_TEXT`, could not
    be opened: no key store)."""
    block = body.get(BODY_KEY) or {}
    return {str(path): marker for path in block.get("fields") or ()}


def text_commitment(salt: str, texts: Texts) -> str:
    """sha256(salt || canonical(texts)), as chain.commitment does for a value."""
    return hashlib.sha256(bytes.fromhex(salt) + canonical_texts(texts)).hexdigest()


def block(salt: str, texts: Texts, *, upgraded: bool = False) -> dict[str, Any]:
    """The `sealed_text` block an event body carries instead of its free text."""
    out: dict[str, Any] = {"fields": sorted(texts), "commitment": text_commitment(salt, texts)}
    if upgraded:
        out["upgraded"] = True
    return out


def is_upgraded(body: dict[str, Any]) -> bool:
    """Sealed by the schema upgrade: its hash covers the body as it was, text included."""
    blk = body.get(BODY_KEY)
    return isinstance(blk, dict) and blk.get("upgraded") is True


def hashed_body(body_text: str, body: dict[str, Any], texts: Texts | None) -> str | None:
    """The text an event's hash covers: its body, except for an upgraded event, whose hash
    covers the body before the upgrade (rebuilt from the opened text; None once erased)."""
    if not is_upgraded(body):
        return body_text
    if texts is None:
        return None
    return canonical(merge(body, texts))


class UpgradeDigest:
    """`upgrade_digest` fed one body at a time (verify's walk keeps no body for it)."""

    __slots__ = ("_hash", "count", "first")

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.count = 0
        self.first: int | None = None

    def add(self, seq: int, body: str) -> None:
        self._hash.update(
            f"{seq}:{hashlib.sha256(body.encode('utf-8')).hexdigest()}\n".encode("ascii"))
        self.count += 1
        if self.first is None:
            self.first = seq

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def upgrade_digest(entries: list[tuple[int, str]]) -> str:
    """What the upgrade's `seal_text` event records of the bodies it rewrote ((seq, body) in
    seq order), so an upgraded event whose text is later erased is still tamper-evident."""
    digest = UpgradeDigest()
    for seq, body in entries:
        digest.add(seq, body)
    return digest.hexdigest()
