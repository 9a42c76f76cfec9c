"""rotate-index-key is all or nothing (DESIGN 14): killed at each commit boundary (notably
after the key store committed) and at 6 random instants (fixed seed), the next read-write
open shows the old key with the old index or the new key with the new index, never an index
under a destroyed key; verify notices an index under another key. Real child processes,
real SIGKILL, real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from custody_app.ledger.facade import Ledger
from custody_app.recall import text
from tests.rotate_crash import (
    BOUNDARIES,
    build_base,
    copy_base,
    index_key,
    judge,
    probe_word,
    run_child,
)
from tests.rotate_crash import trials as kill_trials


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rotate") / "base.db"
    build_base(path, facts=40)
    return path


@pytest.mark.parametrize("point", BOUNDARIES)
def test_a_kill_at_each_commit_boundary_leaves_old_or_new(base: Path, tmp_path: Path,
                                                          point: str) -> None:
    target = tmp_path / "l.db"
    copy_base(base, target)
    killed, _ = run_child(target, fault=point)
    assert killed, f"{point} was never reached"
    outcome = judge(target, index_key(base))
    assert outcome in ("old", "new"), outcome


def test_random_kills_leave_old_or_new(base: Path, tmp_path: Path) -> None:
    result = kill_trials(base, tmp_path, kills=6, seed=31)
    assert result["problems"] == [], result
    outcomes = result["outcomes"]
    assert isinstance(outcomes, dict) and set(outcomes) <= {"old", "new"}


def test_verify_notices_an_index_under_another_key(base: Path, tmp_path: Path) -> None:
    """The state a kill left before this change (the key store swapped, the index not):
    made by hand by swapping in the key store of another rotation of the same ledger."""
    target, other = tmp_path / "l.db", tmp_path / "o.db"
    copy_base(base, target)
    copy_base(base, other)
    with Ledger.open(other) as led:
        led.rotate_index_key()
    Path(f"{target}.keys").write_bytes(Path(f"{other}.keys").read_bytes())
    with Ledger.open(target, readonly=True) as led:
        report = led.verify()
    assert not report.valid and report.problem is not None
    assert "word index key" in report.problem, report.problem
    with Ledger.open(target) as led:  # the remedy the problem names
        led.rotate_index_key()
        assert led.verify().valid


def test_doctor_names_a_rotation_cut_short_and_the_open_finishes_it(base: Path,
                                                                    tmp_path: Path) -> None:
    from custody_app.doctor.checks import diagnose

    target = tmp_path / "l.db"
    copy_base(base, target)
    killed, _ = run_child(target, fault="rotate.ledger_committed")
    assert killed
    lines = {c.name: c for c in diagnose(target).checks}
    assert lines["index-key"].outcome == "warn" and "cut short" in lines["index-key"].detail
    with Ledger.open(target, readonly=True) as led:  # before the roll-forward: reads still work
        assert led.keys is not None and led.keys.pending_index_key() is not None
        match = f'"{text.term(led.keys.index_key, text.words(probe_word(0))[0])}"'
        assert led.db.recall.lexical(match, 5)
    assert judge(target, index_key(base)) == "new"
    assert {c.name: c for c in diagnose(target).checks}["index-key"].outcome == "ok"
