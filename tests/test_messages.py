"""Refusals that say what to do next: the closest op or field, how to become a reviewer, what a
pending replacement blocks and how to resolve it, how to name a ledger."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from custody_app import Ledger
from custody_app.domain.errors import LedgerError
from custody_app.interfaces.batch import run_batch

CAUSE = {"kind": "tool", "ref": "crm#1"}


def _batch(path: Path, *lines: dict[str, object]) -> list[dict[str, object]]:
    out = io.StringIO()
    with Ledger.open(path) as ledger:
        run_batch(ledger, io.StringIO("".join(json.dumps(x) + "\n" for x in lines)), out, sign=False)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_unknown_op_and_mistyped_field_get_the_closest_name(tmp_path: Path) -> None:
    first, second, third = _batch(
        tmp_path / "m.db", {"op": "asert"},
        {"op": "retract", "fact_id": "f_x", "actor": "agent:a", "reson": "typo"},
        {"op": "frobnicate"})
    assert first["error"] == {"code": "unknown_op",
                              "message": "unknown op 'asert'; did you mean 'assert'?"}
    assert second["error"]["code"] == "bad_request"  # type: ignore[index]
    assert second["error"]["message"] == "unknown field 'reson'; did you mean 'reason'?"  # type: ignore[index]
    assert third["error"]["message"] == "unknown op 'frobnicate'"  # type: ignore[index]


def test_not_a_reviewer_says_how_to_become_one(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "r.db") as ledger:
        claim = ledger.assert_fact("acct:1", "plan", "pro", actor="agent:bot", cause=CAUSE)
        before = ledger.verify().events
        with pytest.raises(LedgerError) as info:
            ledger.confirm(claim.fact_id, actor="agent:helper")
        assert ledger.verify().events == before
    assert info.value.code == "not_reviewer"
    assert "add \"agent:helper\" to that list" in info.value.message
    assert "[review] reviewers" in info.value.message and "kind user, reviewer" in info.value.message


def test_a_pending_replacement_is_named_with_how_to_resolve_it(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "p.db") as ledger:
        old = ledger.assert_fact("acct:1", "plan", "basic", actor="agent:bot", cause=CAUSE,
                                 provenance="attested")
        pending = ledger.assert_fact("acct:1", "plan", "pro", actor="agent:bot", cause=CAUSE,
                                     supersedes=old.fact_id)
        with pytest.raises(LedgerError) as info:
            ledger.assert_fact("acct:1", "plan", "team", actor="agent:other", cause=CAUSE,
                               supersedes=old.fact_id)
        message = info.value.message
        assert "already superseded" not in message
        assert f"has a replacement waiting for review, {pending.fact_id}" in message
        assert "confirms or rejects" in message and info.value.details["pending"] == pending.fact_id
        # Once the claim is confirmed it is a real supersession, and says so.
        ledger.confirm(pending.fact_id, actor="reviewer:dana")
        with pytest.raises(LedgerError) as done:
            ledger.assert_fact("acct:1", "plan", "team", actor="agent:other", cause=CAUSE,
                               supersedes=old.fact_id)
    assert done.value.message == f"fact {old.fact_id} is already superseded by {pending.fact_id}"


def test_a_ledger_that_cannot_be_opened_says_how_to_name_one(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder.db"
    folder.mkdir()
    done = subprocess.run([sys.executable, "-m", "custody_app", "verify", "--ledger", str(folder)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 3
    assert "name the ledger with --ledger PATH" in done.stderr
