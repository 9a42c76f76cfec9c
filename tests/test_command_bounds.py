"""The command's bounds on a value (issue 35): depth_of level by level, and the size check
settled by orjson's compact form where it can, agree exactly with the plain definitions."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from custody_app.domain.commands import MAX_NESTING, depth_of, json_larger_than, json_size

SCALARS = (st.none() | st.booleans() | st.integers() | st.text(max_size=4)
           | st.floats(allow_nan=True, allow_infinity=True))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=3), inner, max_size=4)
                      | st.tuples(inner, inner), max_leaves=40)


def _depth(value: Any) -> int:
    """The definition: how many levels of lists and objects nest."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list | tuple):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@settings(max_examples=1500, derandomize=True, deadline=None)
@given(VALUES)
def test_depth_of_is_the_nesting_depth(value: Any) -> None:
    assert depth_of(value) == _depth(value)


def test_depth_of_stops_one_past_the_limit() -> None:
    deep: list[Any] = []
    node = deep
    for _ in range(500):
        node.append([])
        node = node[0]
    assert depth_of(deep) == MAX_NESTING + 1
    assert depth_of([[], {}, [{}]]) == 3 and depth_of("x") == 0 and depth_of({}) == 1


@settings(max_examples=1000, derandomize=True, deadline=None)
@given(VALUES, st.integers(min_value=0, max_value=400))
def test_the_size_check_agrees_with_json(value: Any, limit: int) -> None:
    assert json_larger_than(value, limit) == (json_size(value) > limit)


def test_the_size_check_on_values_orjson_refuses_or_prints_shorter() -> None:
    for value in ({1: "a" * 50}, 2**70, [math.inf] * 30, [-math.inf, math.nan] * 20,
                  [1e16, 1e-7, 1e300] * 10, {"k": "\x01\u2028" * 20}, [0] * 40, [[]] * 40):
        size = json_size(value)
        assert size == len(json.dumps(value, ensure_ascii=False))
        for limit in (size - 1, size, size // 4, size // 2):
            assert json_larger_than(value, limit) == (size > limit), (value, limit)
