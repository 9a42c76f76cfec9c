"""Concurrency: two writer processes and a reader process on one ledger for a bounded time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability import concurrency_run


@pytest.mark.slow
def test_two_writers_and_a_reader(tmp_path: Path) -> None:
    """No refusal at all reaches a caller (no "database is locked": the store retries), no
    child crashes, the chain stays linear (seq 1..n, each linked to the one before) and
    verifies, every acknowledged write is in it, and the reader's view only moves forward."""
    stats = concurrency_run(tmp_path / "shared.db", seconds=8.0, seed=11)
    assert stats.problems == []
    assert stats.errors == []
    assert stats.writes_acked >= 100 and stats.reads >= 100 and stats.verifies >= 1, stats
    assert stats.events >= stats.writes_acked
