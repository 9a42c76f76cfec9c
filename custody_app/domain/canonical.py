"""RFC 8785 (JCS) canonical JSON: orjson where its output is provably the same, rfc8785 else."""

from __future__ import annotations

import json
from typing import Any

import rfc8785

try:
    import orjson
except ImportError:  # pragma: no cover - the pure path is tested by calling it directly
    orjson = None  # type: ignore[assignment]

# JCS (ECMAScript Number.toString) and orjson print the same shortest round-trip digits; they
# differ only in layout: integral floats (JCS "1", orjson "1.0"), below 1e-5 orjson switches to
# exponents sooner, at 1e16 and above JCS stays fixed longer. Inside this band they agree.
_FLOAT_LOW = 1e-5
_FLOAT_HIGH = 1e15
# JCS refuses integers an IEEE double cannot hold exactly; orjson would print them.
_INT_LIMIT = 2**53 - 1
# Keys sort by UTF-16 code units in JCS, by code points in orjson: the orders agree unless a key
# holds a character at or above U+D800 (surrogates, astral planes, U+E000..U+FFFF all mix there).
_KEY_SAFE = "\ud800"
_SORT = orjson.OPT_SORT_KEYS if orjson is not None else 0


def parse(text: str | bytes) -> Any:
    """json.loads for reading the strings of stored JSON (a value's leaves, a body's
    subject_ref, sealed text), by orjson where it is installed: the same structure, keys and
    strings; an integer past 64 bits comes back as the float json.loads would not give, so
    nothing that needs its numbers exact reads through this. json.loads is kept for what
    orjson refuses, such as an escaped lone surrogate."""
    if orjson is not None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def pure(obj: Any) -> str:
    """The reference implementation (the `rfc8785` package)."""
    return rfc8785.dumps(obj).decode("utf-8")


def _plain(obj: Any) -> bool:
    """Is every part of `obj` a JSON type whose orjson form is its JCS form?"""
    stack = [obj]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is int:
            if -_INT_LIMIT <= item <= _INT_LIMIT:
                continue
            return False
        if kind is float:
            if item != item or not _FLOAT_LOW <= abs(item) < _FLOAT_HIGH or item == int(item):
                return False
            continue
        if kind is dict:
            for key in item:
                if type(key) is not str or (not key.isascii() and max(key) >= _KEY_SAFE):
                    return False
            stack.extend(item.values())
            continue
        if kind is list:
            stack.extend(item)
            continue
        return False
    return True


def canonical_texts(texts: dict[str, str]) -> bytes:
    """`canonical(texts).encode()` for a map of text to text (sealed free text, whose
    commitment verify checks for every event): strings under ASCII keys are JCS as orjson
    prints them, so the walk of `_plain` is skipped; anything else takes `canonical`."""
    if orjson is not None and all(type(k) is str and type(v) is str and k.isascii()
                                  for k, v in texts.items()):
        try:
            return orjson.dumps(texts, option=_SORT)
        except orjson.JSONEncodeError:  # a lone surrogate
            pass
    return canonical(texts).encode("utf-8")


def canonical(obj: Any) -> str:
    """RFC 8785 canonical JSON text; byte-identical to `pure` (a property test holds it so)."""
    if orjson is not None and _plain(obj):
        try:
            return orjson.dumps(obj, option=_SORT).decode("utf-8")
        except orjson.JSONEncodeError:  # a lone surrogate, or nesting past orjson's limit
            pass
    return pure(obj)
