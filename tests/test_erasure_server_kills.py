"""Kill trials for forget and forget-subject on a real PostgreSQL server (issue 34): a forked
child runs the erasure on a copy of a base ledger (a database made from the base's as a
template) and is SIGKILLed at each named crash point and at 30 instants drawn over the
erasure's measured duration (fixed seed). After each, a read-write open in this process must
show the erasure whole (forgotten, its forget events or tombstone, the old key generation
retired or the subject's key destroyed, no scrub left pending) or never started (every value
readable, the old key still opening it), never in between; verify and the fold agree, every
value no erasure touches reads back, the acknowledged write made before it is there, and the
key store and the ledger agree (no unfinished destruction or re-key). The rotate-epoch trials
are tests/test_epoch_crash.py; longer runs and the published table: bench/bench_erasure_server_kills.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.erasure_crash import (
    SERVER_POINTS,
    Forker,
    build_base,
    check,
    drop_server_copy,
    server_copier,
    server_trial,
    server_trials,
)

SERVER_KILLS = 30


@pytest.fixture(scope="module")
def server_base(pg_server: Any, tmp_path_factory: pytest.TempPathFactory,
                ) -> Iterator[tuple[Any, Any, Forker]]:
    """The base ledger on the worker's server, a copier from it and the forking child (the
    local folders, master key files included, under a temporary $XDG_DATA_HOME)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("kills-xdg")))
    url = pg_server.fresh_database()
    forker = None
    try:
        build_base(url)
        forker = Forker()
        yield pg_server, server_copier(pg_server, url), forker
    finally:
        if forker is not None:
            forker.close()
        drop_server_copy(pg_server, url)
        mp.undo()


@pytest.mark.parametrize("kind", ["forget", "forget_subject"])
def test_server_kills_at_every_point_and_random_instants_leave_all_or_nothing(
        server_base: tuple[Any, Any, Forker], kind: str) -> None:
    server, make, forker = server_base
    result = server_trials(kind, server, make, forker, kills=SERVER_KILLS, seed=34)
    randoms, killed = result["randoms"], int(str(result["killed_mid"]))
    assert isinstance(randoms, list)
    print(f"{kind} server kill trials: window {result['window_s']:.3f} s, "
          f"{len(randoms)} random, {killed} mid-erasure, whole {result['whole']}, none "
          f"{result['none']}, broken {result['broken']}, {result['seconds']:.1f} s")
    assert result["problems"] == [], result["problems"]
    assert killed >= SERVER_KILLS
    named = {t.point: t.outcome for t in result["named"]}  # type: ignore[attr-defined]
    assert set(named) == set(SERVER_POINTS[kind])
    # Before the ledger commits: nothing; after it: the whole erasure, rolled forward.
    for point, outcome in named.items():
        committed = point not in ("erasure.before_commit", "tx.keys_committed#2")
        assert outcome == ("whole" if committed else "none"), (point, outcome)
    # The random instants reached both sides of the commit.
    assert result["whole"] and result["none"], result


@pytest.mark.parametrize("kind", ["forget", "forget_subject"])
def test_the_judge_names_an_erasure_the_open_left_half_done(
        server_base: tuple[Any, Any, Forker], kind: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker itself can fail: killed after the ledger committed, judged by an open that
    does not roll the key store forward (the bug these trials exist to catch), the erasure is
    named half done (its old key generation, or the subject's key, still live), never whole."""
    server, make, forker = server_base
    target = make(f"judge_{kind}")
    try:
        killed, lines = forker.run(kind, target, point="erasure.ledger_committed")
        assert killed
        monkeypatch.setattr("custody_app.ledger.facade.roll_forward", lambda ledger: [])
        outcome, acked = check(kind, target, lines)
        assert acked
        assert outcome not in ("whole", "none") and "half:" in outcome, outcome
    finally:
        drop_server_copy(server, target)


def test_a_kill_before_the_commit_leaves_the_value_and_after_it_rolls_forward(
        server_base: tuple[Any, Any, Forker]) -> None:
    """The two sides of the commit, one forget-subject each, judged separately."""
    server, make, forker = server_base
    before = server_trial("forget_subject", server, make, forker, 900,
                          point="erasure.before_commit")
    after = server_trial("forget_subject", server, make, forker, 901,
                         point="erasure.ledger_committed")
    assert (before.outcome, before.landed) == ("none", "mid")
    assert (after.outcome, after.landed) == ("whole", "mid")
