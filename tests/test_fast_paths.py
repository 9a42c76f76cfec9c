"""The ingest fast paths equal their references: orjson canonical JSON is byte-identical to
`rfc8785` (property test, fixed seed), and the C stemmer gives the snowball fallback's stems."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custody_app.domain import canonical as jcs
from custody_app.recall import text

ROOT = Path(__file__).resolve().parent.parent

# Keys and strings drawn from the whole of Unicode (astral planes and U+E000..U+FFFF included,
# where UTF-16 and code point orders differ), numbers from the whole double range.
_keys = st.text(max_size=6) | st.text(st.sampled_from(["a", "Z", "\u00e9", "\ud7ff", "\ue000", "\uffff",
                                                      "\U0001f600", "\U00010000"]), max_size=3)
_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**60), max_value=2**60)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
            | st.sampled_from([0.0, -0.0, 1.0, 1e-5, 9.999999999999999e-06, 1e15, 1e16, 1e21,
                               2**53 - 1, 2**53, -(2**53), 0.1, 123.456, "\u2028", "\x00\x1f\x7f"]))
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=5)
                     | st.dictionaries(_keys, inner, max_size=5), max_leaves=30)


def _outcome(fn: object, value: object) -> tuple[str, str]:
    try:
        return ("ok", fn(value))  # type: ignore[operator]
    except Exception as exc:  # the two paths must refuse the same inputs with the same error
        return ("error", type(exc).__name__)


@settings(derandomize=True, max_examples=1500, deadline=None)
@given(_json)
def test_canonical_fast_path_is_byte_identical_to_rfc8785(value: object) -> None:
    assert _outcome(jcs.canonical, value) == _outcome(jcs.pure, value)


@pytest.mark.parametrize("value", [
    {"\ue000": 1, "\U0001f600": 2},  # JCS sorts the astral key first (UTF-16 surrogates)
    1.0, -0.0, 1e16, 2.5e-6, 2**53, "\ud800", {"a": [1.5, {"b": 1e-7}]}, (1, 2), {1: "x"},
])
def test_canonical_fast_path_edge_cases(value: object) -> None:
    assert _outcome(jcs.canonical, value) == _outcome(jcs.pure, value)


def test_canonical_fast_path_is_taken_for_plain_events() -> None:
    # Guards the speed-up itself: a typical event body must not fall back to the slow path.
    event = {"seq": 7, "kind": "assert", "cause": {"kind": "message", "ref": "m_1"},
             "value": {"confidence": 0.731, "seats": 12, "note": "Zürich"}, "ok": True}
    assert jcs.orjson is not None and jcs._plain(event)


@settings(derandomize=True, max_examples=1500, deadline=None)
@given(st.dictionaries(_keys | st.sampled_from(["cause.ref", "cause.detail", "reason"]),
                       st.text(max_size=12) | st.sampled_from(["\ud800", "\u2028", "\x00\x1f\x7f",
                                                               "a\\\"b", "\U0001f600"]),
                       max_size=4))
def test_the_sealed_text_fast_path_is_byte_identical_to_rfc8785(texts: dict[str, str]) -> None:
    fast = _outcome(jcs.canonical_texts, texts)
    slow = _outcome(jcs.pure, texts)
    assert fast == (slow if slow[0] == "error" else ("ok", slow[1].encode("utf-8")))


def test_the_sealed_text_fast_path_refuses_what_the_walk_refuses() -> None:
    # Not a map of text to text: the walk decides (and refuses as rfc8785 does).
    for bad in ({"a": 1.0}, {"a": ["x"]}, {"\ue000": "x", "\U0001f600": "y"}):
        assert _outcome(jcs.canonical_texts, bad) == _outcome(
            lambda v: jcs.pure(v).encode("utf-8"), bad)


def _word_list() -> list[str]:
    """Words of the repository's docs, sample data and code, each with common English suffixes
    (the stemmer's rules act on them), plus accented and digit-bearing words."""
    found: set[str] = set()
    for pattern in ("*.md", "sample_data/**/*", "custody_app/**/*.py", "policies/*"):
        for path in ROOT.glob(pattern):
            if path.is_file():
                found |= set(re.findall(r"\w+", path.read_text(errors="ignore").lower()))
    suffixes = ("", "s", "es", "ed", "ing", "ly", "ness", "ation", "ational", "ization",
                "fulness", "ies", "ied", "eed", "eedly", "ement", "able", "ance", "ism", "iveness")
    base = sorted(found)[:2500]
    words = {w + s for w in base for s in suffixes} | found
    words |= {"zürich", "naïve", "café", "generously", "skies", "dying", "news", "épée", "x2"}
    return sorted(words)


@pytest.mark.skipif(text.fast_stem("a") is None, reason="PyStemmer is not installed")
def test_c_stemmer_gives_the_fallback_stems() -> None:
    words = _word_list()
    assert len(words) > 20_000
    differ = [w for w in words if text.fast_stem(w) != text.pure_stem(w)]
    assert differ == []


def test_words_use_the_fallback_stemmer_when_pystemmer_is_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sample = "Customers were running generously migrated invoices"
    with_c = text.words(sample)
    monkeypatch.setattr(text, "_FAST", None)
    text._stem.cache_clear()
    try:
        assert text.words(sample) == with_c == ["custom", "run", "generous", "migrat", "invoic"]
    finally:
        text._stem.cache_clear()


@settings(derandomize=True, max_examples=600, deadline=None)
@given(_json)
def test_parse_reads_what_json_loads_reads(value: object) -> None:
    """The erasure and read paths parse stored JSON with orjson where it can: the same
    structure, keys and strings as json.loads for every text this ledger writes (canonical
    JSON, json.dumps), as str or bytes; numbers the same as floats (orjson reads an integer
    past 64 bits as a float)."""
    for doc in (jcs.canonical(value) if _outcome(jcs.canonical, value)[0] == "ok" else None,
                 json.dumps(value, ensure_ascii=False, default=list)):
        if doc is None:
            continue
        try:
            data = doc.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: only an escaped one can be stored
            doc = json.dumps(value, default=list)
            data = doc.encode("utf-8")
        assert _as_floats(jcs.parse(doc)) == _as_floats(json.loads(doc))
        assert _as_floats(jcs.parse(data)) == _as_floats(json.loads(data))


def _as_floats(value: object) -> str:
    """`value` with every number as a float (bools kept), for comparing parses."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k!r}:{_as_floats(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_as_floats(v) for v in value) + "]"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))
    return repr(value)


def test_parse_falls_back_where_orjson_refuses() -> None:
    escaped = '{"a": "\\ud800 lone", "b": [1, 2.5]}'
    assert jcs.parse(escaped) == json.loads(escaped) and jcs.parse(escaped.encode()) == {
        "a": "\ud800 lone", "b": [1, 2.5]}


def test_row_values_bind_each_column_in_order() -> None:
    """The bulk writes' attrgetters give what a getattr per column gives (an UPDATE's key
    last), for rows whose every field differs."""
    from dataclasses import fields

    from store import rows

    for cls, columns, values in ((rows.EventRow, rows.EVENT_COLUMNS, rows.event_values),
                                 (rows.FactRow, rows.FACT_COLUMNS, rows.fact_values),
                                 (rows.StateRow, rows.STATE_COLUMNS, rows.state_values)):
        row = cls(*(f"{f.name}-{n}" for n, f in enumerate(fields(cls))))  # type: ignore[arg-type]
        assert values(row) == tuple(getattr(row, c) for c in columns)
    fact = rows.FactRow(*(f"v{n}" for n in range(len(rows.FACT_COLUMNS))))  # type: ignore[arg-type]
    assert rows.fact_update_values(fact) == (
        *[getattr(fact, c) for c in rows.FACT_COLUMNS if c != "assert_seq"], fact.assert_seq)
