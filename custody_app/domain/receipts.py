"""Tool receipts (pure): the signed statement a tool gateway makes about one call, the exact
bytes it signs, digests of JSON by RFC 8785, and whether a receipt's output covers a value."""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any, Literal

import rfc8785
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from custody_app.domain.errors import LedgerError
from custody_app.domain.timeutil import normalise


def _time(value: Any) -> Any:
    try:
        return normalise(value)
    except LedgerError as exc:
        raise PydanticCustomError("invalid_time", exc.message) from None


# Control characters (C0, DEL, C1) and bidirectional overrides, refused in receipt fields: they
# are shown by explain and the terminal app, where they could drive the terminal.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _plain(text: str) -> str:
    if _UNSAFE.search(text):
        raise PydanticCustomError("bad_request", "holds a control character or a bidirectional "
                                  "override")
    return text


# Defined here rather than taken from models: models' Cause embeds a Receipt.
Text = Annotated[str, Field(min_length=1, max_length=500), AfterValidator(_plain)]
Hash = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Time = Annotated[str, BeforeValidator(_time)]

Signature = Annotated[str, Field(pattern=r"^[0-9a-f]{128}$")]
Pointer = Annotated[str, Field(max_length=500, pattern=r"^(/.*)?$")]
# The fields of a receipt the signature covers, in the order the docs list them.
SIGNED_FIELDS = ("v", "issuer", "receipt_id", "tool", "issued_at", "session", "args_sha256",
                 "output_sha256", "principal", "grant", "subject", "predicate", "audience", "ref")


class Receipt(BaseModel):
    """A tool call as its gateway signed it: digests of the arguments and the output, never
    the output itself."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    v: Literal[1] = 1
    issuer: Text
    receipt_id: Text
    tool: Text
    issued_at: Time
    session: Text
    args_sha256: Hash
    output_sha256: Hash
    principal: Text | None = None
    grant: Text | None = None
    subject: Text | None = None
    """The subject the call was about, as the gateway signs it: a fact citing the receipt must
    be about this subject (else the write names it in the signed arguments, `subject_pointer`)."""
    predicate: Text | None = None
    """The predicate the output answers; without it, the write's pointer's last token must be
    the fact's predicate."""
    audience: Text | None = None
    """The id of the one ledger this receipt is for; another ledger refuses it."""
    ref: Text | None = None
    """For an action's receipt: the action's ref (a refund number...), which the act must carry."""
    signature: Signature

    def statement(self) -> bytes:
        """The exact bytes the issuer signed."""
        return statement(self.model_dump(exclude={"signature"}))


def statement(fields: dict[str, Any]) -> bytes:
    """Canonical JSON of the signed fields (absent optional fields are left out)."""
    body = {k: fields[k] for k in SIGNED_FIELDS if fields.get(k) is not None}
    return rfc8785.dumps({"custody_receipt": body})


def json_sha256(value: Any) -> str:
    """sha256 (hex) of a JSON value's RFC 8785 canonical form."""
    return hashlib.sha256(rfc8785.dumps(value)).hexdigest()


_MISSING = object()


def resolve_pointer(document: Any, pointer: str) -> Any:
    """RFC 6901: the part of `document` a JSON pointer names, or `_MISSING`."""
    if pointer == "":
        return document
    node = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif (isinstance(node, list) and token.isdigit() and (token == "0" or token[0] != "0")
              and int(token) < len(node)):
            node = node[int(token)]
        else:
            return _MISSING
    return node


def covers(receipt: Receipt, value: Any, pointer: str | None, output: Any) -> str | None:
    """Why the receipt's output does not cover `value`, or None when it does. Without a
    pointer the value must be the whole output; with one, `output` (the tool's output, which
    the ledger never stores) must hash to the receipt's digest and the pointer name the value."""
    if pointer is None:
        if json_sha256(value) != receipt.output_sha256:
            return "the value is not the receipt's output (its digest differs)"
        return None
    if output is None:
        return "a pointer into the output needs the output itself (field 'tool_output')"
    if json_sha256(output) != receipt.output_sha256:
        return "the tool output given does not match the receipt's output digest"
    part = resolve_pointer(output, pointer)
    if part is _MISSING:
        return f"the pointer {pointer!r} names nothing in the output"
    if json_sha256(part) != json_sha256(value):
        return f"the value is not what the pointer {pointer!r} names in the output"
    return None


def subject_gap(receipt: Receipt, subject: str, subject_pointer: str | None,
                arguments: Any) -> str | None:
    """Why the receipt does not name `subject`, or None: its signed `subject` claim, or the
    signed call arguments (given in full, hashing to `args_sha256`) at `subject_pointer`."""
    if receipt.subject is not None:
        if receipt.subject != subject:
            return f"the receipt is about subject {receipt.subject!r}, not {subject!r}"
        return None
    if subject_pointer is None:
        return ("the receipt names no subject: it needs a signed 'subject' claim, or the write "
                "names the subject in the signed arguments (cause.subject_pointer, "
                "tool_arguments)")
    if arguments is None:
        return "cause.subject_pointer needs the call's arguments themselves (field 'tool_arguments')"
    if json_sha256(arguments) != receipt.args_sha256:
        return "the tool arguments given do not match the receipt's arguments digest"
    named = resolve_pointer(arguments, subject_pointer)
    if named is _MISSING or named != subject:
        return f"the arguments at {subject_pointer!r} do not name subject {subject!r}"
    return None


def predicate_gap(receipt: Receipt, predicate: str, pointer: str | None) -> str | None:
    """Why the receipt does not answer `predicate`, or None: its signed `predicate` claim, or
    (without one) the last token of the pointer the write names into the output."""
    if receipt.predicate is not None:
        if receipt.predicate != predicate:
            return f"the receipt answers predicate {receipt.predicate!r}, not {predicate!r}"
        return None
    last = None if not pointer else pointer.rsplit("/", 1)[1].replace("~1", "/").replace("~0", "~")
    if last != predicate:
        return (f"the receipt names no predicate and the pointer {pointer!r} does not end in "
                f"{predicate!r}" if pointer else
                f"the receipt names no predicate, so the whole output cannot be {predicate!r}")
    return None


def spend_key(receipt: Receipt, pointer: str | None) -> tuple[str, str, str]:
    """What a receipt covers once, in a ledger: its issuer, its id, and the field the write
    cites it for (the pointer; '' for the whole output, as RFC 6901 spells it). The first fact
    it raises spends it; a later write citing it for that field earns nothing from it."""
    return receipt.issuer, receipt.receipt_id, pointer or ""


def digest_of(args_digest: str | None) -> str | None:
    """The sha256 hex an act's `args_digest` names (`sha256:HEX` or bare HEX), else None."""
    if args_digest is None:
        return None
    algo, _, hexpart = args_digest.rpartition(":")
    return hexpart if algo in ("", "sha256") and len(hexpart) == 64 else None


def action_gap(receipt: Receipt, tool: str, ref: str, args_digest: str | None) -> tuple[str, str] | None:
    """(check, why) where an action's receipt does not match the action, or None: the same
    tool, the same ref where the receipt signs one, the act's args digest its args_sha256."""
    rid = receipt.receipt_id
    if receipt.tool != tool:
        return "tool", f"receipt {rid!r} is for tool {receipt.tool!r}, not {tool!r}"
    if receipt.ref is not None and receipt.ref != ref:
        return "ref", f"receipt {rid!r} is for action {receipt.ref!r}, not {ref!r}"
    if digest_of(args_digest) != receipt.args_sha256:
        return "arguments", (f"the action's args_digest is not receipt {rid!r}'s arguments digest "
                             f"(sha256:{receipt.args_sha256})")
    return None
