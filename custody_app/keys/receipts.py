"""Tool receipts with keys: issuer key pairs, signing a receipt (what a tool wrapper calls),
and checking one against the issuers a policy registers (at the door and in `verify`)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import ValidationError

from custody_app.domain.errors import LedgerError
from custody_app.domain.receipts import Receipt, covers, json_sha256
from custody_app.domain.timeutil import format_time
from custody_app.files.output import write_new_files
from custody_app.keys import crypto


def public_hex(private_raw: bytes) -> str:
    """The issuer's public key as the policy registers it: 64 hex digits (raw Ed25519)."""
    public = Ed25519PrivateKey.from_private_bytes(private_raw).public_key()
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def new_issuer_key(path: str | Path) -> str:
    """Write a fresh Ed25519 key (PKCS#8 PEM, mode 0600) to `path` and its public half to
    `path.pub` (0644), whatever the umask, through the one output helper: never over an
    existing file (`key_exists`) nor a ledger, key or non-regular file (`output_protected`);
    returns the public key in hex."""
    raw = crypto.new_signing_key()
    write_new_files([(path, crypto.private_pem(raw), False),
                     (f"{path}.pub", public_hex(raw) + "\n", True)])
    return public_hex(raw)


def _private(key: bytes | str | Path) -> bytes:
    """Raw private key bytes from raw bytes, PEM text or a PEM file's path."""
    if isinstance(key, bytes) and len(key) == 32:
        return key
    text = key.decode() if isinstance(key, bytes) else str(key)
    if "-----BEGIN" not in text:
        try:
            text = Path(text).read_text(encoding="ascii")
        except OSError as exc:
            raise LedgerError("key_unreadable", f"cannot read issuer key {text}: "
                              f"{exc.strerror}") from None
    try:
        return crypto.private_from_pem(text)
    except ValueError as exc:
        raise LedgerError("key_unreadable", f"the issuer key is not usable: {exc}") from None


def sign(key: bytes | str | Path, *, issuer: str, receipt_id: str, tool: str, session: str,
         arguments: Any, output: Any, issued_at: str | None = None, principal: str | None = None,
         grant: str | None = None) -> dict[str, Any]:
    """A signed receipt for one tool call, as the JSON a write cites in `cause.receipt`.
    Only sha256 digests of the arguments' and output's canonical JSON go into it."""
    fields: dict[str, Any] = {
        "v": 1, "issuer": issuer, "receipt_id": receipt_id, "tool": tool,
        "issued_at": issued_at or format_time(datetime.now(UTC)), "session": session,
        "args_sha256": json_sha256(arguments), "output_sha256": json_sha256(output),
        "principal": principal, "grant": grant}
    try:
        draft = Receipt.model_validate({**fields, "signature": "0" * 128})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise LedgerError("bad_request", f"receipt field '{err['loc'][0]}': {err['msg']}") from None
    signature = crypto.sign(_private(key), draft.statement())
    return draft.model_copy(update={"signature": signature}).model_dump(exclude_none=True)


def signature_ok(receipt: Receipt, public: str) -> bool:
    """Is the receipt signed by the Ed25519 key `public` (64 hex digits)?"""
    try:
        key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public))
        key.verify(bytes.fromhex(receipt.signature), receipt.statement())
    except (InvalidSignature, ValueError):
        return False
    return True


def receipt_problem(receipt: Receipt, issuers: dict[str, str], session: str | None,
                    tool: str | None = None) -> tuple[str, str] | None:
    """(check, why) for the first check the receipt fails, or None: the issuer is registered,
    the signature is its, the receipt is for this session (and, for an action, this tool)."""
    public = issuers.get(receipt.issuer)
    if public is None:
        return "issuer", f"issuer {receipt.issuer!r} is not registered in [provenance] receipt_issuers"
    if not signature_ok(receipt, public):
        return "signature", f"the signature of receipt {receipt.receipt_id!r} is not {receipt.issuer}'s"
    if session != receipt.session:
        where = f"session {session!r}" if session else "no session"
        return "session", (f"receipt {receipt.receipt_id!r} is for session {receipt.session!r}, "
                           f"this write is in {where}")
    if tool is not None and tool != receipt.tool:
        return "tool", f"receipt {receipt.receipt_id!r} is for tool {receipt.tool!r}, not {tool!r}"
    return None


def check_receipt(receipt: Receipt, issuers: dict[str, str], session: str | None,
                  tool: str | None = None) -> None:
    """Refuse (`receipt_invalid`, naming the check) a receipt that fails a check."""
    problem = receipt_problem(receipt, issuers, session, tool)
    if problem is not None:
        raise LedgerError("receipt_invalid", problem[1], check=problem[0],
                          receipt_id=receipt.receipt_id)


def provenance_from(receipt: Receipt, issuers: dict[str, str], *, session: str | None,
                    value: Any, pointer: str | None, output: Any, declared: str) -> str:
    """The provenance a cited receipt earns a write: `verified` when its output covers the
    value, else `attested`. Refused (`receipt_invalid`) when a check fails, or when the write
    names a pointer or declares `verified` and the output does not cover the value."""
    check_receipt(receipt, issuers, session)
    gap = covers(receipt, value, pointer, output)
    if gap is not None and (pointer is not None or declared == "verified"):
        raise LedgerError("receipt_invalid", f"receipt {receipt.receipt_id!r} does not cover "
                          f"the value: {gap}", check="output_digest",
                          receipt_id=receipt.receipt_id)
    return "verified" if gap is None else "attested"
