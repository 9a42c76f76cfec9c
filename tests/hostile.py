"""Hostile batch input for the reliability suite: hypothesis strategies for lines, and the
check every line must pass (shared by tests/test_reliability_hostile.py and the bench)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from custody_app.domain.commands import NOT_YET, OPS
from custody_app.ledger.facade import Ledger
from custody_app.ledger.ops import Aliases, result_line, run_op

FIELDS = ("subject", "predicate", "value", "actor", "cause", "space", "provenance", "valid_from",
          "valid_to", "session", "supersedes", "sources", "llm", "fact_id", "reason", "valid_at",
          "tx_at", "include", "limit", "query", "k", "strategy", "set", "before", "dry_run",
          "ref", "id", "include_claimed", "colour")

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=2**63 - 2, max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["", " ", "\x00", "\u202e", "\ufeff", "@", "@nowhere", "@a1", "acct:1",
                     "agent:x", "nobody:x", "agent:", "claimed", "verified", "subject_request"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
times = st.one_of(
    st.sampled_from(["2026-09-01T00:00:00Z", "9999-12-31T23:59:59.999999Z",
                     "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "0001-01-01T00:00:00Z",
                     "2026-09-01T00:00:00", "2026-02-30T00:00:00Z", "2026-09-01T25:00:00Z",
                     "2026-09-01", "yesterday", "", "2026-09-01T00:00:00+99:00",
                     "10000-01-01T00:00:00Z", "2026-09-01T00:00:00.1234567890Z", "NaN"]),
    st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
    st.text(max_size=40))
huge = st.integers(min_value=1_000, max_value=300_000).map(lambda n: "x" * n)
field_values = st.one_of(json_values, times, huge, st.just("@a1"), st.just("@ghost"),
                         st.just({"kind": "tool", "ref": "r"}), st.just({"kind": "tool"}))
op_names = st.one_of(st.sampled_from(sorted(OPS) + list(NOT_YET)), st.text(max_size=12),
                     st.integers(), st.none())


@st.composite
def op_objects(draw: st.DrawFn) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        obj["op"] = draw(op_names)
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=7, unique=True)):
        obj[name] = draw(field_values)
    return obj


_A = {"actor": "agent:x"}
TEMPLATES: dict[str, dict[str, Any]] = {
    "assert": {"subject": "acct:1", "predicate": "plan", "value": "pro", **_A,
               "cause": {"kind": "tool", "ref": "r"}, "provenance": "attested"},
    "retract": {"fact_id": "@a1", **_A, "reason": "r"}, "confirm": {"fact_id": "@a1",
                                                                   "actor": "user:rev"},
    "reject": {"fact_id": "@a1", "actor": "user:rev", "reason": "r"},
    "affirm": {"fact_id": "@a1", **_A}, "hold": {"fact_id": "@a1", **_A, "reason": "r"},
    "release": {"fact_id": "@a1", **_A, "reason": "r"},
    "forget": {"fact_id": "@a1", **_A, "reason": "error"},
    "forget_subject": {"subject": "acct:1", **_A, "reason": "error"},
    "sweep": {"before": "2026-01-01T00:00:00Z", "dry_run": True},
    "as_of": {"subject": "acct:1", "valid_at": "2026-09-01T00:00:00Z"},
    "history": {"fact_id": "@a1"}, "why": {"fact_id": "@a1"}, "verify": {},
    "recall": {"query": "pro", "k": 3}, "clock": {"set": "2026-09-01T00:00:00Z"},
    "checkpoint": {},
}


@st.composite
def near_valid_ops(draw: st.DrawFn) -> dict[str, Any]:
    """A valid op with one or two fields replaced, dropped or added: reaches deep validation."""
    name = draw(st.sampled_from(sorted(TEMPLATES)))
    obj: dict[str, Any] = {"op": name, **TEMPLATES[name]}
    for _ in range(draw(st.integers(1, 2))):
        key = draw(st.one_of(st.sampled_from(sorted(obj)), st.sampled_from(FIELDS)))
        if key != "op" and draw(st.integers(0, 4)) == 0:
            obj.pop(key, None)
        else:
            obj[key] = draw(field_values)
    return obj


def _deep(n: int, leaf: str = "1") -> str:
    return "[" * n + leaf + "]" * n


def _encode(obj: Any) -> str:
    return json.dumps(obj, allow_nan=True)


hostile_lines = st.one_of(
    near_valid_ops().map(_encode), near_valid_ops().map(_encode), op_objects().map(_encode),
    json_values.map(_encode),
    st.text(max_size=200),
    st.binary(max_size=120).map(lambda b: b.decode("utf-8", errors="surrogateescape")),
    st.integers(min_value=60, max_value=50_000).map(
        lambda n: '{"op":"assert","subject":"a:1","predicate":"p","actor":"agent:x",'
                  '"cause":{"kind":"tool","ref":"r"},"value":' + _deep(n) + "}"),
    st.integers(min_value=1, max_value=200_000).map(lambda n: _deep(n)),
    st.sampled_from(['{"op":"assert","value":NaN}', '{"op":"as_of","limit":Infinity}',
                     '{"op":"as_of","limit":-Infinity}', '{"op":"as_of"', "{}", "[]", "null",
                     '{"op":"assert","op":"retract"}', '{"op":"\\ud800"}', '{"id":"\\udfff"}',
                     '{"op":"retract","fact_id":"@a1","actor":"agent:x","reason":"' + "r" * 501
                     + '"}']),
)


def valid_setup(ledger: Ledger, aliases: Aliases | None = None) -> Aliases:
    """One believed fact under alias `a1` (a fresh one each call), so hostile lines can name it."""
    aliases = aliases if aliases is not None else Aliases()
    with ledger.unit_of_work():  # re-keys acct:1 if a hostile forget_subject erased it
        fact = ledger.assert_fact("acct:1", "plan", "pro", actor="agent:x",
                                  cause={"kind": "tool", "ref": "r"}, provenance="attested")
    aliases.names["a1"] = (fact.fact_id, 0)
    return aliases


def check_line(ledger: Ledger, aliases: Aliases, number: int, line: str) -> dict[str, Any]:
    """Run one line; a failed op must carry a code (not internal_error) and change nothing."""
    before = (ledger.db.events.count(), ledger.db.events.head())
    out = run_op(ledger, aliases, number, line)
    text = result_line(out)
    text.encode("utf-8")  # the output line can always be written
    parsed = json.loads(text)
    assert parsed["line"] == number and isinstance(parsed["ok"], bool)
    if parsed["ok"]:
        assert parsed["op"] in OPS
    else:
        code = parsed["error"]["code"]
        assert isinstance(code, str) and code and code != "internal_error", parsed
        assert isinstance(parsed["error"]["message"], str) and parsed["error"]["message"]
        after = (ledger.db.events.count(), ledger.db.events.head())
        assert after == before, f"a failed op changed the ledger: {line[:200]!r}"
    return parsed
