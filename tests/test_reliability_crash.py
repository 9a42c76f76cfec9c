"""Crash safety: a writer process appending through the Python API is SIGKILLed at random
moments, at least 30 times; after each kill the ledger opens, verifies, its projection equals a
rebuild, every acknowledged write is there and no group of writes is half there."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CAUSE, Env
from tests.reliability import Acks, check_ledger, crash_run


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_nothing_acknowledged(tmp_path: Path) -> None:
    stats = crash_run(tmp_path / "crash.db", kills=32, budget_s=300.0, seed=7)
    assert stats.problems == []
    assert stats.kills >= 30
    assert stats.writes_checked >= 200, stats      # the kills landed in real write traffic
    assert stats.events >= stats.writes_checked


# ---- the checker itself can fail --------------------------------------------------------------
def test_checker_reports_an_acknowledged_write_that_is_missing(env: Env) -> None:
    fact = env.ledger.assert_fact("acct:1", "plan", "pro", actor="agent:a", cause=CAUSE,
                                  provenance="attested")
    acks = Acks()
    acks.add([f"ack assert {fact.fact_id} {fact.event_id}", f"ack assert f_gone {'0' * 64}"])
    env.ledger.close()
    problems = check_ledger(env.path, acks)
    assert any("0000000000" in p and "missing" in p for p in problems)
    assert any("f_gone" in p for p in problems)
    env.reopen()


def test_checker_reports_a_half_written_group(env: Env) -> None:
    for i in range(2):
        env.ledger.assert_fact("acct:1", "note", i, actor="agent:a",
                               cause={"kind": "tool", "ref": "grp-x"}, provenance="attested")
    env.ledger.close()
    assert check_ledger(env.path, Acks()) == ["group grp-x is half-written: 2 of 3 asserts"]
    env.reopen()


def test_a_master_key_write_cut_short_leaves_no_empty_key_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process dying while it creates the master key must not leave a half-written key file
    (the ledger could never be opened again)."""
    import os

    from custody_app.keys.keyring import MASTER_ENV
    from custody_app.ledger.facade import Ledger
    monkeypatch.delenv(MASTER_ENV, raising=False)

    def dies(fd: int) -> None:
        raise KeyboardInterrupt("killed while writing the key")

    monkeypatch.setattr(os, "fsync", dies)
    with pytest.raises(KeyboardInterrupt):
        Ledger.open(tmp_path / "new.db")
    assert not (tmp_path / "new.db.keys.master").exists()
    monkeypatch.undo()
    with Ledger.open(tmp_path / "new.db") as ledger:
        ledger.assert_fact("acct:1", "plan", "pro", actor="agent:a", cause=CAUSE)
        assert ledger.verify().valid
