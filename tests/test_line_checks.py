"""A batch line's checks settled from its text (issue 35) refuse exactly what the walk over the
parsed value refuses: nesting past MAX_NESTING, a lone surrogate from an escape or from invalid
UTF-8; and a repeated key is named as the key-by-key check named it (fixed seed)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custody_app.domain.commands import MAX_NESTING
from custody_app.domain.errors import LedgerError
from custody_app.ledger import ops

_text = st.text(st.sampled_from(["a", "{", "[", "\\", "\u00e9", "\ud800", "\udcff", "\u2028",
                                 '"', "x"]), max_size=6)
_scalars = st.none() | st.booleans() | st.integers() | _text
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_text, inner, max_size=3), max_leaves=12)


def _nested(depth: int) -> Any:
    value: Any = "end"
    for _ in range(depth):
        value = [value]
    return value


def _outcome(data: dict[str, Any], text: str | None) -> str | None:
    try:
        ops.check_line(data, 1, text)
    except LedgerError as exc:
        return f"{exc.code}: {exc.message}"
    return None


@settings(max_examples=600, derandomize=True, deadline=None)
@given(st.dictionaries(_text, _json | st.sampled_from(
    [_nested(MAX_NESTING), _nested(MAX_NESTING + 1), "[" * 80, "{" * 70 + "\\u00e9"]),
    max_size=4), st.booleans())
def test_checks_from_the_text_refuse_what_the_walk_refuses(data: dict[str, Any],
                                                           ascii_only: bool) -> None:
    try:
        text = json.dumps(data, ensure_ascii=ascii_only)
    except UnicodeEncodeError:
        return
    parsed = json.loads(text)
    assert _outcome(parsed, text) == _outcome(parsed, None)


def test_invalid_utf8_read_with_surrogateescape_is_still_refused() -> None:
    text = b'{"op": "as_of", "subject": "caf\xe9"}'.decode("utf-8", "surrogateescape")
    assert (_outcome(json.loads(text), text) or "").startswith("bad_json")


def test_a_lone_surrogate_escape_is_still_refused() -> None:
    text = '{"op": "as_of", "subject": "\\ud800"}'
    assert (_outcome(json.loads(text), text) or "").startswith("bad_json")


def test_nesting_past_the_limit_is_still_refused() -> None:
    text = json.dumps({"op": "assert", "value": _nested(MAX_NESTING + 1)})
    assert (_outcome(json.loads(text), text) or "").startswith("bad_request")


def _key_by_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ops._DuplicateKey(key)
        out[key] = value
    return out


@pytest.mark.parametrize("text", [
    '{"a": 1, "b": 2}', '{"a": 1, "a": 2}', '{"a": {"c": 1, "c": 2}, "a": 3}',
    '{"x": 1, "y": 2, "y": 3, "x": 4}', '[{"k": 1}, {"k": 2, "j": 1, "k": 3}]',
])
def test_a_repeated_key_is_named_as_before(text: str) -> None:
    def named(hook: Any) -> Any:
        try:
            return json.loads(text, object_pairs_hook=hook)
        except ops._DuplicateKey as exc:
            return ("duplicate", exc.key)

    assert named(ops._unique_keys) == named(_key_by_key)


def _parsed(parse: Any, text: str) -> Any:
    try:
        return ("value", parse(text))
    except ops._DuplicateKey as exc:
        return ("duplicate", exc.key)
    except (ValueError, RecursionError) as exc:
        return (type(exc).__name__, str(exc))


@settings(max_examples=600, derandomize=True, deadline=None)
@given(st.lists(st.sampled_from(['{', '}', '[', ']', '"', "a", ":", ",", "1", " ", "\ufeff",
                                 "\\", "NaN", "e", '"a":1', '"a":2']), max_size=14).map("".join)
       | st.builds(lambda value, bom: ("\ufeff" if bom else "") + json.dumps(value),
                   _json, st.booleans()))
def test_a_line_parses_to_what_json_loads_gives_and_fails_as_it_fails(text: str) -> None:
    """The batch's decoder, made once, against json.loads making one for each line: the same
    value, or the same refusal with the same message (a leading BOM, a repeated key)."""
    assert _parsed(ops.parse_line, text) == _parsed(
        lambda t: json.loads(t, object_pairs_hook=ops._unique_keys), text)
