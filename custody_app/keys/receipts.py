"""Tool receipts with keys: issuer key pairs, signing a receipt (what a tool wrapper calls),
and checking one against the issuers a policy registers (at the door and in `verify`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import ValidationError

from custody_app.domain.errors import LedgerError
from custody_app.domain.receipts import (
    Receipt,
    action_gap,
    covers,
    json_sha256,
    predicate_gap,
    subject_gap,
)
from custody_app.domain.timeutil import format_time, parse_time
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
         grant: str | None = None, subject: str | None = None, predicate: str | None = None,
         audience: str | None = None, ref: str | None = None) -> dict[str, Any]:
    """A signed receipt for one tool call, as the JSON a write cites in `cause.receipt`.
    Only sha256 digests of the arguments' and output's canonical JSON go into it, with the
    claims that bind it: the `subject` and `predicate` it answers, the ledger it is for
    (`audience`, a ledger's id) and, for an action, the action's `ref`."""
    fields: dict[str, Any] = {
        "v": 1, "issuer": issuer, "receipt_id": receipt_id, "tool": tool,
        "issued_at": issued_at or format_time(datetime.now(UTC)), "session": session,
        "args_sha256": json_sha256(arguments), "output_sha256": json_sha256(output),
        "principal": principal, "grant": grant, "subject": subject, "predicate": predicate,
        "audience": audience, "ref": ref}
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


# How far a receipt's issued_at may lie after the ledger's clock (clocks of two machines).
CLOCK_SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class Bounds:
    """Where and when a receipt is checked: this ledger's id (None: a ledger without one
    refuses every receipt naming an audience), the event's time and the policy's age limit.
    `require_audience`: a receipt that names no audience is refused (at the door always;
    verify lets an older ledger, whose id is not chained, keep the receipts it took before)."""

    ledger_id: str | None
    at: str
    max_age: timedelta
    require_audience: bool = True


def receipt_problem(receipt: Receipt, issuers: dict[str, str], session: str | None,
                    tool: str | None = None, bounds: Bounds | None = None) -> tuple[str, str] | None:
    """(check, why) for the first check the receipt fails, or None: the issuer is registered,
    the signature is its, it is for this ledger (`audience`), this session (and, for an
    action, this tool), and (with `bounds`) it is neither older than the age limit nor
    issued after the event."""
    public = issuers.get(receipt.issuer)
    rid = receipt.receipt_id
    if public is None:
        return "issuer", f"issuer {receipt.issuer!r} is not registered in [provenance] receipt_issuers"
    if not signature_ok(receipt, public):
        return "signature", f"the signature of receipt {rid!r} is not {receipt.issuer}'s"
    if bounds is not None and receipt.audience is None and bounds.require_audience:
        return "audience", (f"receipt {rid!r} names no audience, so it could be cited in any "
                            "ledger that registers its issuer: the issuer must sign it for this "
                            f"ledger (audience = {bounds.ledger_id or 'this ledger id'!r}, "
                            "the `ledger_id` that `custody-app verify` reports)")
    if bounds is not None and receipt.audience is not None and receipt.audience != bounds.ledger_id:
        return "audience", (f"receipt {rid!r} is for ledger {receipt.audience!r}, not this one "
                            f"({bounds.ledger_id or 'a ledger without an id'})")
    if session != receipt.session:
        where = f"session {session!r}" if session else "no session"
        return "session", (f"receipt {rid!r} is for session {receipt.session!r}, "
                           f"this write is in {where}")
    if tool is not None and tool != receipt.tool:
        return "tool", f"receipt {rid!r} is for tool {receipt.tool!r}, not {tool!r}"
    if bounds is not None:
        age = parse_time(bounds.at) - parse_time(receipt.issued_at)
        if age > bounds.max_age:
            return "age", (f"receipt {rid!r} was issued at {receipt.issued_at}, more than the "
                           f"policy's max_receipt_age ({bounds.max_age}) before {bounds.at}")
        if -age > CLOCK_SKEW:
            return "age", (f"receipt {rid!r} was issued at {receipt.issued_at}, after this "
                           f"event ({bounds.at})")
    return None


def check_receipt(receipt: Receipt, issuers: dict[str, str], session: str | None,
                  tool: str | None = None, bounds: Bounds | None = None) -> None:
    """Refuse (`receipt_invalid`, naming the check) a receipt that fails a check."""
    problem = receipt_problem(receipt, issuers, session, tool, bounds)
    if problem is not None:
        raise LedgerError("receipt_invalid", problem[1], check=problem[0],
                          receipt_id=receipt.receipt_id)


def check_action_receipt(receipt: Receipt, issuers: dict[str, str], bounds: Bounds, *,
                         session: str, tool: str, ref: str, args_digest: str | None) -> None:
    """An action's receipt: genuine, for this ledger, session and time (`receipt_invalid`),
    and for this action: tool, ref, arguments (`receipt_mismatch`, naming the check)."""
    check_receipt(receipt, issuers, session, None, bounds)
    gap = action_gap(receipt, tool, ref, args_digest)
    if gap is not None:
        raise LedgerError("receipt_mismatch", f"{gap[1]}: the receipt does not authorise this "
                          "action", check=gap[0], receipt_id=receipt.receipt_id)


@dataclass(frozen=True)
class Claim:
    """What a write says the receipt covers: the fact, and where in the call it is."""

    subject: str
    predicate: str
    value: Any
    pointer: str | None
    output: Any
    subject_pointer: str | None
    arguments: Any


def coverage_gap(receipt: Receipt, claim: Claim) -> tuple[str, str] | None:
    """(check, why) where the receipt does not cover the fact, or None when it does: it
    names the fact's subject and predicate, and its output is the value (at the pointer)."""
    gap = subject_gap(receipt, claim.subject, claim.subject_pointer, claim.arguments)
    if gap is not None:
        return "subject", gap
    gap = predicate_gap(receipt, claim.predicate, claim.pointer)
    if gap is not None:
        return "predicate", gap
    gap = covers(receipt, claim.value, claim.pointer, claim.output)
    if gap is not None:
        return "output_digest", gap
    return None


def provenance_from(receipt: Receipt, issuers: dict[str, str], bounds: Bounds, *,
                    session: str | None, claim: Claim, declared: str) -> str | None:
    """`verified` when the receipt is genuine, in bounds and covers the fact (session,
    subject, predicate, value); None when it is genuine but does not cover the fact: it then
    changes nothing (the writer's own standing decides). Refused (`receipt_invalid`, naming
    the check) when a check of the receipt itself fails, or when the write claims coverage
    (names a pointer, a subject pointer, or declares `verified`) the receipt does not give."""
    check_receipt(receipt, issuers, session, None, bounds)
    gap = coverage_gap(receipt, claim)
    if gap is None:
        return "verified"
    if claim.pointer is not None or claim.subject_pointer is not None or declared == "verified":
        raise LedgerError("receipt_invalid", f"receipt {receipt.receipt_id!r} does not cover "
                          f"the fact: {gap[1]}", check=gap[0], receipt_id=receipt.receipt_id)
    return None
