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
    """The JSON-RPC error answering `raw`, or None when the SDK may parse it."""
    if truncated or len(raw) > MAX_MESSAGE_BYTES:
        why = f"the message is larger than {MAX_MESSAGE_BYTES} bytes"
    elif depth(raw) > MAX_MESSAGE_DEPTH:
        why = f"the message nests deeper than {MAX_MESSAGE_DEPTH} levels of arrays and objects"
    else:
        return None
    return {"jsonrpc": "2.0", "id": request_id(raw),
            "error": {"code": INVALID_REQUEST, "message": f"{why}; nothing was run"}}
