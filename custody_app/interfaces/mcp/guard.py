"""MCP input guarded before the SDK parses it: a message too large or nested too deeply gets a
JSON-RPC error reply at once (the SDK's parser gives up on deep input without answering, and
would read any size), over stdio and over HTTP."""

from __future__ import annotations

import json
import re
from typing import Any

from custody_app.domain.commands import MAX_NESTING

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
# The envelope (message, params, arguments) sits around a tool argument: a value at the batch
# limit must reach the tool, which refuses it with the same message as --batch.
MAX_MESSAGE_DEPTH = MAX_NESTING + 8
INVALID_REQUEST = -32600
PARSE_ERROR = -32700

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(rb"[\[\]{}]")
# The id among the leading members of the top-level object (clients put it first), so the
# refusal can answer the request it refuses.
_ID = re.compile(rb'^\s*\{(?:\s*"[^"\\]*"\s*:\s*(?:"(?:[^"\\]|\\.)*"|[-\w.+]+)\s*,)*?\s*"id"\s*:\s*'
                 rb'("(?:[^"\\]|\\.){0,200}"|-?\d{1,30})\s*[,}]')


def depth(raw: bytes) -> int:
    """How deeply arrays and objects nest in JSON text (strings skipped; no parse, no recursion)."""
    deepest = level = 0
    for match in _BRACKET.finditer(_STRING.sub(b'""', raw)):
        level += 1 if match.group() in (b"[", b"{") else -1
        deepest = max(deepest, level)
    return deepest


def request_id(raw: bytes) -> Any:
    """The top-level `id` of a refused message when it can be found without parsing, else None."""
    match = _ID.match(raw[:65536])
    if match is None:
        return None
    try:
        return json.loads(match.group(1))
    except ValueError:
        return None


def refusal(raw: bytes, *, truncated: bool = False) -> dict[str, Any] | None:
    """The JSON-RPC error answering `raw`, or None when the SDK may parse it. The SDK drops
    what it cannot parse without a word, so a client waiting on it would wait forever: every
    message that is not JSON, not a JSON-RPC 2.0 object, too large or too deep is answered."""
    code, msg_id = INVALID_REQUEST, request_id(raw)
    why: str | None
    if truncated or len(raw) > MAX_MESSAGE_BYTES:
        why = f"the message is larger than {MAX_MESSAGE_BYTES} bytes"
    elif depth(raw) > MAX_MESSAGE_DEPTH:
        why = f"the message nests deeper than {MAX_MESSAGE_DEPTH} levels of arrays and objects"
    else:
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):
            message, code, why = None, PARSE_ERROR, "the message is not JSON"
        else:
            why = _not_jsonrpc(message)
            msg_id = message.get("id") if isinstance(message, dict) else None
            msg_id = msg_id if isinstance(msg_id, str | int) and not isinstance(msg_id, bool) else None
        if why is None:
            return None
    return {"jsonrpc": "2.0", "id": msg_id,
            "error": {"code": code, "message": f"{why}; nothing was run"}}


def _not_jsonrpc(message: object) -> str | None:
    if not isinstance(message, dict):
        return "the message is not a JSON-RPC object"
    if message.get("jsonrpc") != "2.0":
        return "the message is not JSON-RPC 2.0 (\"jsonrpc\": \"2.0\")"
    if not isinstance(message.get("method"), str) and "result" not in message and "error" not in message:
        return "the message has neither a method (a string) nor a result or error"
    return None
