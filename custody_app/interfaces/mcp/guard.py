"""MCP input guarded before the SDK parses it. The SDK drops what it cannot read without a word
(a client waiting on it would wait forever), so every message is checked first and every
request the SDK would drop is answered here, per JSON-RPC 2.0: not JSON (or not UTF-8) -32700;
not a request object, or an id that is not a string or an integer, -32600 (with `id: null` when
the id is the problem); `params` that is not an object, or a string in it that is not Unicode
text (a lone surrogate), -32602. A notification (no id) never gets a reply, over stdio; over
HTTP its refusal is the status code. Too large or too deep: -32600, over stdio and HTTP."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from mcp import types
from pydantic import ValidationError

from custody_app.domain.commands import MAX_NESTING

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
# The envelope (message, params, arguments) sits around a tool argument: a value at the batch
# limit must reach the tool, which refuses it with the same message as --batch.
MAX_MESSAGE_DEPTH = MAX_NESTING + 8
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
# JSON numbers a tool accepts: integers an IEEE double holds exactly (RFC 8785, I-JSON), finite.
MAX_SAFE_INTEGER = 2**53 - 1

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(rb"[\[\]{}]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# The id among the leading members of the top-level object (clients put it first), so the
# refusal can answer the request it refuses.
_ID = re.compile(rb'^\s*\{(?:\s*"[^"\\]*"\s*:\s*(?:"(?:[^"\\]|\\.)*"|[-\w.+]+)\s*,)*?\s*"id"\s*:\s*'
                 rb'("(?:[^"\\]|\\.){0,200}"|-?\d{1,30})\s*[,}]')


@dataclass(frozen=True)
class Refusal:
    """A message refused before the SDK: the JSON-RPC error, whether it answers a request (a
    notification's or a response's refusal is never sent over stdio), and the HTTP status."""

    error: dict[str, Any]
    answers_request: bool
    status: int = 400

    def text(self) -> str:
        return json.dumps(self.error)


def depth(raw: bytes) -> int:
    """How deeply arrays and objects nest in JSON text (strings skipped; no parse, no recursion)."""
    deepest = level = 0
    for match in _BRACKET.finditer(_STRING.sub(b'""', raw)):
        level += 1 if match.group() in (b"[", b"{") else -1
        deepest = max(deepest, level)
    return deepest


def valid_id(value: object) -> bool:
    """A request id MCP accepts: a string or an integer (never a boolean, a float or null)."""
    return isinstance(value, str | int) and not isinstance(value, bool)


def request_id(raw: bytes) -> Any:
    """The top-level `id` of a refused message when it can be found without parsing, else None."""
    match = _ID.match(raw[:65536])
    if match is None:
        return None
    try:
        found = json.loads(match.group(1))
    except ValueError:
        return None
    return found if valid_id(found) and not _has_surrogate(found) else None


def _refused(code: int, msg_id: Any, why: str, *, request: bool = True,
             status: int = 400) -> Refusal:
    return Refusal({"jsonrpc": "2.0", "id": msg_id,
                    "error": {"code": code, "message": f"{why}; nothing was run"}},
                   request, status)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def refusal(raw: bytes, *, truncated: bool = False) -> Refusal | None:
    """The JSON-RPC error answering `raw`, or None when the SDK may parse it."""
    if truncated or len(raw) > MAX_MESSAGE_BYTES:
        return _refused(INVALID_REQUEST, request_id(raw),
                        f"the message is larger than {MAX_MESSAGE_BYTES} bytes", status=413)
    if depth(raw) > MAX_MESSAGE_DEPTH:
        return _refused(INVALID_REQUEST, request_id(raw), "the message nests deeper than "
                        f"{MAX_MESSAGE_DEPTH} levels of arrays and objects")
    try:
        message = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return _refused(PARSE_ERROR, None, "the message is not JSON (one JSON value in UTF-8)")
    return check_message(message, raw)


def check_message(message: object, raw: bytes) -> Refusal | None:
    """Why a parsed message is not one the SDK answers, as the error the client gets."""
    if not isinstance(message, dict):
        return _refused(INVALID_REQUEST, None, "the message is not a JSON-RPC object (a batch "
                        "is not accepted: send one message per line or POST)")
    has_id, msg_id = "id" in message, message.get("id")
    reply_id = msg_id if has_id and valid_id(msg_id) and not _has_surrogate(msg_id) else None
    method = message.get("method")
    # Never answered, even refused: a notification (a method, no id) and a response (no method,
    # a result or an error). Anything else is a request, or an object too broken to be one
    # (answered, with `id: null` when its id cannot be used).
    request = not ("method" in message and not has_id) and not (
        "method" not in message and ("result" in message or "error" in message))
    if message.get("jsonrpc") != "2.0":
        return _refused(INVALID_REQUEST, reply_id, 'the message is not JSON-RPC 2.0 ("jsonrpc": '
                        '"2.0")', request=request)
    if "method" not in message and "result" not in message and "error" not in message:
        return _refused(INVALID_REQUEST, reply_id, "the message has neither a method nor a "
                        "result or error", request=request)
    if has_id and reply_id is None:
        return _refused(INVALID_REQUEST, None, "the id must be a string or an integer (not "
                        "null, a boolean, a fraction, an array or an object)", request=request)
    if "method" in message:
        if not isinstance(method, str) or _has_surrogate(method):
            return _refused(INVALID_REQUEST, reply_id, "the method must be a string of Unicode "
                            "text", request=request)
        params = message.get("params", {})
        if not isinstance(params, dict):
            return _refused(INVALID_PARAMS, reply_id, f"params of {method!r} must be an object",
                            request=request)
        if _has_surrogate(params):
            return _refused(INVALID_PARAMS, reply_id, "a string in params holds a lone "
                            "surrogate (\\ud800-\\udfff), which is not Unicode text",
                            request=request)
    if _has_surrogate(message):
        return _refused(INVALID_REQUEST, reply_id, "a string in the message holds a lone "
                        "surrogate, which is not Unicode text", request=request)
    try:
        types.jsonrpc_message_adapter.validate_json(raw, by_name=False)
    except ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"][1:]) or "the message"
        return _refused(INVALID_REQUEST, reply_id, f"the message is not a JSON-RPC 2.0 request, "
                        f"notification or response the server reads ({where})", request=request)
    return None


def _has_surrogate(value: object) -> bool:
    """Whether a string anywhere in a JSON value (keys included) holds a lone surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def out_of_range(value: object, path: str = "arguments") -> str | None:
    """Where a JSON value holds a number no tool accepts (an integer beyond +/-(2^53 - 1), or
    a float that is not finite), with the number, else None."""
    stack: list[tuple[str, object]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and abs(item) > MAX_SAFE_INTEGER:
            digits = str(item)
            shown = digits if len(digits) <= 40 else f"{digits[:20]}... ({len(digits)} digits)"
            return f"{where} is {shown}"
        if isinstance(item, float) and not math.isfinite(item):
            return f"{where} is {item!r}"
        if isinstance(item, dict):
            stack.extend((f"{where}.{k}", v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(item))
    return None
