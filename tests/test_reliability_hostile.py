"""Hostile batch input: hypothesis-generated lines (wrong types, huge strings, deep nesting,
invalid UTF-8, NaN, far-future and malformed times, unknown ops, aliases to nowhere) through the
real batch runner: every line gets a result, a failure carries a code and changes nothing.

Derandomized (a fixed seed): the suite tries the same lines in every clone and asserts only
properties every result must have; the long randomized run is bench/bench_reliability.py."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from custody_app.domain.errors import LedgerError
from custody_app.domain.timeutil import ManualClock
from custody_app.interfaces.batch import run_batch
from custody_app.ledger.facade import Ledger
from tests.hostile import check_line, hostile_lines, valid_setup

TRIED = {"lines": 0, "ok": 0}


@pytest.mark.slow
def test_hostile_lines_through_the_batch_runner(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "hostile.db", clock=ManualClock()) as ledger:
        aliases = valid_setup(ledger)

        @settings(max_examples=int(os.environ.get("HOSTILE_EXAMPLES", "600")), deadline=None,
                  database=None, derandomize=True, suppress_health_check=list(HealthCheck))
        @given(line=hostile_lines)
        def check(line: str) -> None:
            TRIED["lines"] += 1
            out = check_line(ledger, aliases, TRIED["lines"], line)
            TRIED["ok"] += out["ok"]
            if out["ok"] and out["op"] not in ("as_of", "history", "why", "verify", "recall"):
                valid_setup(ledger, aliases)  # the next lines get a believed `a1` again

        check()
        report = ledger.verify()
        assert report.valid, report.problem
        assert ledger.rebuild().differences == []
    # Properties only (checked per line in check_line): which codes a generated corpus happens
    # to produce is not a property, so nothing here depends on it.
    assert TRIED["lines"] >= 100


@pytest.mark.parametrize("line", [
    "[" * 100_000 + "]" * 100_000,
    '{"op":"as_of","valid_at":"9999-12-31T23:59:59-14:00"}',
    '{"op":"as_of","limit":99999999999999999999999}',
    '{"op":"as_of","valid_at":"0765-05-30T19:25:37+00:00","valid_to":1}',
    '{"id":"\\ud800","op":"nope"}',
    '{"op":"assert","subject":"a:1","predicate":"p","actor":"agent:x",'
    '"cause":{"kind":"tool","ref":"r"},"value":' + "[" * 900 + "]" * 900 + "}",
    b'{"op":"as_of","subject":"\xff\xfe"}'.decode("utf-8", errors="surrogateescape"),
])
def test_lines_that_used_to_crash_the_runner(tmp_path: Path, line: str) -> None:
    with Ledger.open(tmp_path / "h.db", clock=ManualClock()) as ledger:
        aliases = valid_setup(ledger)
        out = check_line(ledger, aliases, 1, line)
        assert out["ok"] is False


def test_a_time_before_year_1000_keeps_four_digits(tmp_path: Path) -> None:
    """Found by the hostile-input run: the clock set to year 765 broke every later op."""
    with Ledger.open(tmp_path / "h.db", clock=ManualClock()) as ledger:
        aliases = valid_setup(ledger)
        out = check_line(ledger, aliases, 1, '{"op":"as_of","valid_at":"0765-05-30T19:25:37Z"}')
        assert out["ok"] and out["result"]["valid_at"] == "0765-05-30T19:25:37.000000Z"


def test_deep_value_through_the_python_api_is_a_coded_refusal(tmp_path: Path) -> None:
    deep: object = 1
    for _ in range(65):  # one past the limit of 64 levels
        deep = [deep]
    with Ledger.open(tmp_path / "h.db") as ledger, pytest.raises(LedgerError) as caught:
        ledger.assert_fact("a:1", "p", deep, actor="agent:x", cause={"kind": "tool", "ref": "r"})
    assert caught.value.code == "bad_request" and "deeper than" in caught.value.message


@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(lines=st.lists(hostile_lines, min_size=1, max_size=8))
def test_a_hostile_file_gets_one_result_per_line_in_process(lines: list[str]) -> None:
    import tempfile
    with tempfile.TemporaryDirectory() as tmp, Ledger.open(Path(tmp) / "f.db") as ledger:
        before = (ledger.db.events.count(), ledger.db.events.head())
        clean = [ln.replace("\n", " ").replace("\r", " ") for ln in lines]
        out = io.StringIO()
        outcome = run_batch(ledger, [ln + "\n" for ln in clean], out, sign=False)
        results = [json.loads(r) for r in out.getvalue().splitlines()]
        expected = [n for n, ln in enumerate(clean, 1) if ln.strip() and not ln.strip().startswith("#")]
        assert [r["line"] for r in results] == expected
        assert all(r["ok"] or r["error"]["code"] != "internal_error" for r in results)
        assert outcome.ok + outcome.failed == len(expected)
        if outcome.ok == 0:
            assert (ledger.db.events.count(), ledger.db.events.head()) == before


def test_hostile_bytes_through_the_command_line(tmp_path: Path) -> None:
    """One real process: invalid UTF-8, NaN, deep nesting, far-future times, unknown ops and
    aliases to nowhere on stdin; exit 1, one coded result per line, ledger untouched."""
    lines = [b'{"op":"as_of","subject":"\xc3\x28"}', b"\xff\xfe\xfd", b'{"op":"assert","value":NaN}',
             b"[" * 50_000 + b"]" * 50_000, b'{"op":"as_of","valid_at":"10000-01-01T00:00:00Z"}',
             b'{"op":"teleport"}', b'{"op":"retract","fact_id":"@nowhere","actor":"agent:x",'
             b'"reason":"r"}', b'{"id":"\\ud800","op":"verify"}', b'{"op":"clock","set":"x"}']
    db = tmp_path / "cli.db"
    done = subprocess.run([sys.executable, "-m", "custody_app", "--create", "--batch", "-",
                           "--ledger", str(db)],
                          input=b"\n".join(lines) + b"\n", capture_output=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert b"Traceback" not in done.stderr
    results = [json.loads(r) for r in done.stdout.decode("utf-8").splitlines()]
    assert [r["line"] for r in results] == list(range(1, len(lines) + 1))
    assert all(not r["ok"] and r["error"]["code"] for r in results)
    assert [r["error"]["code"] for r in results][:2] == ["bad_json", "bad_json"]
    with Ledger.open(db) as ledger:
        assert ledger.db.events.count() == 0
