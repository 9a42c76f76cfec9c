"""All or nothing across key store and ledger (DESIGN 13): each erasure kind killed at each
named commit boundary (CUSTODY_FAULT) and at a few fixed instants; after each, the next open
shows the whole erasure or none of it, verifies, and every acknowledged write is there. The
long randomized runs are in bench/bench_erasure_crash.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.erasure_crash import KINDS, POINTS, build_base, trial


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("crash") / "base.db"
    build_base(path)
    return path


@pytest.mark.parametrize(("kind", "point"), [(k, p) for k in KINDS for p in POINTS[k]])
def test_a_kill_at_each_commit_boundary_leaves_all_or_nothing(
        base: Path, tmp_path: Path, kind: str, point: str) -> None:
    t = trial(kind, base, tmp_path, 0, point=point)
    assert t.killed, f"{kind} never reached {point}"
    assert t.landed == "mid", f"the kill at {point} did not stop {kind} mid-way"
    assert t.outcome in ("whole", "none"), t.outcome
    assert t.acked
    # Killed before its ledger commit: nothing; after it: the whole erasure.
    committed = point not in ("erasure.before_commit", "tx.keys_committed#2",
                              "reindex.before_commit")
    if kind != "reindex":
        assert t.outcome == ("whole" if committed else "none")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03])
def test_a_kill_at_a_fixed_instant_leaves_all_or_nothing(
        base: Path, tmp_path: Path, kind: str, delay: float) -> None:
    t = trial(kind, base, tmp_path, 1, delay=delay)
    assert t.outcome in ("whole", "none"), t.outcome
    assert t.acked
