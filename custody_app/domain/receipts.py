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
                 "output_sha256", "principal", "grant")


class Receipt(BaseModel):
    """A tool call as its gateway signed it: digests of the arguments and the output, never
    the output itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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
