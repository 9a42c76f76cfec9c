"""The first recall after an open does not wait for the in-process vector copy (issue 35): a copy
of more than `loading.BACKGROUND_ROWS` rows loads in a background thread on a connection of its
own, recalls meanwhile are answered by sqlite-vec's KNN, and give the same top 10 as the copy
once it is adopted. A forget while the copy loads leaves no buffer holding the forgotten vector
when it returns; the bulk read of sqlite-vec's chunks equals its rows read one by one."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from custody_app.ledger.facade import Ledger
from custody_app.recall import loading
from custody_app.recall import search as search_mod
from custody_app.recall.matrix import VectorMatrix
from store import LedgerFile
from store.sqlite import vec_chunks
from tests.conftest import CAUSE, WRITER, Env, day
from tests.test_recall import DPO, ids
from tests.test_recall_cells import LOW
from tests.test_recall_cells import fill as fill_cells
from tests.test_recall_matrix import fill

QUERIES = 20


def varied(env: Env, n: int, seed: int = 5) -> list[str]:
    """`n` facts of 5-9 words drawn from 400 made-up ones; returns the vocabulary. (Exactly
    equal distances are broken by float rounding, differently in sqlite-vec's arithmetic and
    the copy's; fill's 24 words made many, this text almost none.)"""
    rng = random.Random(seed)
    vocabulary = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 9)))
                  for _ in range(400)]
    with env.ledger.transaction():
        for i in range(n):
            env.put(f"acct:{i % 40}", f"note_{i}", " ".join(rng.sample(vocabulary,
                                                                        rng.randint(5, 9))))
    return vocabulary


@pytest.fixture
def background(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every copy loads in the background, and each load waits at `gate` before it reads;
    `twins` collects the copies the threads build (their buffers, to check they are zeroed)."""
    monkeypatch.setattr(loading, "BACKGROUND_ROWS", 0)
    state: dict[str, Any] = {"gate": threading.Event(), "twins": []}
    twin = VectorMatrix._twin

    def gated(self: VectorMatrix, db: LedgerFile) -> VectorMatrix:
        assert state["gate"].wait(30)
        made = twin(self, db)
        state["twins"].append(made)
        return made

    monkeypatch.setattr(VectorMatrix, "_twin", gated)
    return state


def settle(ledger: Ledger) -> None:
    """Wait for the background load to finish (the next search adopts it)."""
    loader = ledger.index.matrix._loader
    if loader is not None:
        loader._thread.join(30)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_a_recall_before_the_copy_has_loaded_returns_the_same_top_10_as_after(
        env: Env, background: dict[str, Any]) -> None:
    vocabulary = varied(env, 300)
    ledger = env.ledger
    rng = random.Random(7)
    queries = [" ".join(rng.sample(vocabulary, 3)) for _ in range(QUERIES)]
    before = {}
    for strategy in ("vector", "hybrid"):
        for query in queries:
            result = ledger.recall(query, k=10, strategy=strategy)
            # Answered while the copy has not even begun to load (the thread waits at the gate).
            assert ledger.index.matrix.loading and len(ledger.index.matrix) == 0
            assert ("in an in-process copy" not in result.note
                    and "while the in-process copy loads" in result.note)
            before[strategy, query] = ids(result)
    background["gate"].set()
    settle(ledger)
    for strategy in ("vector", "hybrid"):
        for query in queries:
            result = ledger.recall(query, k=10, strategy=strategy)
            assert "in an in-process copy" in result.note and not ledger.index.matrix.loading
            assert ids(result) == before[strategy, query]
    assert len(ledger.index.matrix) == 300


def test_small_copies_still_load_in_the_search_that_needs_them(env: Env) -> None:
    fill(env, 50)
    result = env.ledger.recall("amber basalt", strategy="vector")
    assert "in an in-process copy" in result.note and not env.ledger.index.matrix.loading


def test_a_write_while_the_copy_loads_is_applied_to_it_when_adopted(
        env: Env, background: dict[str, Any]) -> None:
    """Writes do not stop the load (an agent writing more often than a load takes would keep
    the copy from ever loading, a load begun at every recall): they wait and are applied to
    the loaded copy, with no second load."""
    seqs = fill(env, 60)
    ledger = env.ledger
    ledger.recall("amber")  # starts a load, held at the gate
    first = ledger.index.matrix._loader
    new = env.put("acct:new", "note", "quixotic marmalade zeppelin")
    claimed = env.put("acct:q", "note", "saffron reef claim", provenance="claimed")
    env.ledger.confirm(claimed, actor="user:reviewer", reason="checked")  # a status move
    assert ledger.index.matrix._loader is first
    assert ids(ledger.recall("quixotic marmalade zeppelin", k=1, strategy="vector")) == [new]
    background["gate"].set()
    settle(ledger)
    result = ledger.recall("quixotic marmalade zeppelin", k=1, strategy="vector")
    assert ids(result) == [new] and "in an in-process copy" in result.note
    assert ids(ledger.recall("saffron reef claim", k=1, strategy="vector")) == [claimed]
    assert len(background["twins"]) == 1  # one load, then the writes applied to it
    assert len(ledger.index.matrix) == len(seqs) + 2


def test_another_processs_write_before_the_loads_snapshot_is_in_the_adopted_copy(
        env: Env, background: dict[str, Any]) -> None:
    fill(env, 60)
    ledger = env.ledger
    ledger.recall("amber")
    other = Ledger.open(env.path, policy=env.policy, clock=env.clock, id_seed=97)
    try:
        new = other.assert_fact("acct:new", "note", "quixotic marmalade zeppelin",
                                actor=WRITER, cause=CAUSE, provenance="attested").fact_id
    finally:
        other.close()
    background["gate"].set()  # the thread's snapshot holds the other process's write...
    settle(ledger)
    assert ids(ledger.recall("quixotic marmalade zeppelin", k=1, strategy="vector")) == [new]
    assert len(ledger.index.matrix) == 61


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("when", ["loaded, not yet adopted", "half-loaded"])
@pytest.mark.parametrize("mode", ["float32", "bits"])
def test_a_forget_while_the_copy_loads_leaves_no_buffer_holding_its_vector(
        env: Env, background: dict[str, Any], when: str, mode: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    fill(env, 40)
    ledger = env.ledger
    if mode == "bits":  # 41 rows: neither float32 rows nor int8 codes fit, sign bits do
        ledger.index.matrix.max_bytes = 41 * ledger.embedder.dimensions - 1
        ledger.index.matrix.sign_bits = True
    target = env.put("acct:zz", "secret", "quixotic marmalade zeppelin")
    seq = int(ledger.db.facts.get(target).assert_seq)  # type: ignore[union-attr]
    [(_, raw)] = ledger.db.recall.vectors_of([seq])
    vector = np.frombuffer(raw, dtype=np.float32)
    held = threading.Event()
    if when == "half-loaded":
        # The thread stops after its first block, holding it, until told to stop.
        blocks = type(ledger.db.recall).iter_vector_blocks

        def slow(self: Any, dimensions: int) -> Iterator[Any]:
            for block in blocks(self, dimensions):
                yield block
                held.set()
                loader = ledger.index.matrix._loader
                while loader is not None and not loader._stop.wait(0.01):
                    pass
                # Slow to notice: a forget that did not wait for the thread would return
                # while it still holds the block.
                time.sleep(2.0)
        monkeypatch.setattr(type(ledger.db.recall), "iter_vector_blocks", slow)
    ledger.recall("anything")
    background["gate"].set()
    if when == "half-loaded":
        assert held.wait(30)
    else:
        settle(ledger)
    [twin] = background["twins"]
    assert twin.bits == (mode == "bits")
    # float32 rows (41 vectors fit the budget), or the sign bits of each
    buffer = twin._codes8 if mode == "bits" else twin._rows
    vector = twin.encode(vector)
    assert (buffer == vector).all(axis=1).sum() == 1  # the thread's copy holds it now
    env.at(day(2))
    ledger.forget(target, actor=DPO, reason="subject_request")
    # Before forget returned, the load was stopped and what it held zeroed.
    assert not (buffer == vector).all(axis=1).any()
    assert not ledger.index.matrix.holds(seq)
    assert target not in ids(ledger.recall("quixotic marmalade zeppelin", k=50,
                                           strategy="vector"))


def test_a_load_that_cannot_open_the_ledger_falls_back_to_loading_in_the_search(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loading, "BACKGROUND_ROWS", 0)
    fill(env, 30)

    def broken() -> LedgerFile:
        raise OSError("no second connection here")
    env.ledger.index.matrix._opener = lambda: broken
    assert "in an in-process" not in env.ledger.recall("amber", strategy="vector").note
    settle(env.ledger)
    assert "in an in-process copy" in env.ledger.recall("amber", strategy="vector").note


@pytest.mark.sqlite_only
def test_the_chunk_read_equals_the_rows_read_one_by_one(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """After quarantines, supersessions and a forget (freed slots in the chunks)."""
    seqs = fill(env, 120)
    ledger = env.ledger
    some = list(seqs)[:5]
    env.at(day(2))
    ledger.forget(some[0], actor=DPO, reason="subject_request")
    env.put("acct:1", "note_1", "superseded value")
    rows = sorted(ledger.db.recall.vectors())
    blocks = list(ledger.db.recall.iter_vector_blocks(ledger.index.embedder.dimensions))
    got = sorted((int(s), v.tobytes(), st.decode(), int(sp), int(sb))
                 for seqs_, block, statuses, space, subject in blocks
                 for s, v, st, sp, sb in zip(seqs_, block, statuses, space, subject, strict=True))
    assert got == [(s, bytes(v), st, sp, sb) for s, v, st, sp, sb in rows]
    assert {r[2] for r in rows} == {"live", "quarantined"}
    # A table in a layout the chunk read does not know is read row by row, to the same rows.
    monkeypatch.setattr(vec_chunks, "_known_layout", lambda conn: False)
    again = sorted((int(s), v.tobytes(), st.decode(), int(sp), int(sb))
                   for seqs_, block, statuses, space, subject
                   in ledger.db.recall.iter_vector_blocks(ledger.index.embedder.dimensions)
                   for s, v, st, sp, sb in zip(seqs_, block, statuses, space, subject, strict=True))
    assert again == got


@pytest.mark.sqlite_only
def test_no_ledger_connection_maps_its_file(env: Env) -> None:
    """Every mapped page a process read stays in its RSS (file-backed, counted by `top`): 658 MB
    after open + 100 recalls of a 1M-fact ledger mapped 1 GB. Nothing is mapped, read-write or
    read-only."""
    fill(env, 30)
    env.ledger.recall("amber")
    assert env.ledger.db.conn.pragma("mmap_size") == 0
    reader = Ledger.open(env.path, readonly=True)
    try:
        reader.recall("amber")
        assert reader.db.conn.pragma("mmap_size") == 0
    finally:
        reader.close()


def test_while_the_copy_loads_the_cells_read_are_capped(
        make_env: Callable[..., Env], background: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first recalls after an open answer at once: sqlite-vec's KNN reads no more cells
    than hold about LOADING_PROBE_ROWS vectors (but enough for the pool) while the copy loads;
    the policy's share once it is loaded (or when none is kept)."""
    monkeypatch.setattr(search_mod, "LOADING_PROBE_ROWS", 40)  # 2 cells of 20 vectors
    env = make_env(LOW.replace("ann_probe = 0.08", "ann_probe = 0.5"))  # 10 of 20 cells
    fill_cells(env, 400)
    ledger = env.ledger
    note = ledger.recall("amber basalt", strategy="vector").note
    assert ledger.index.matrix.loading
    # a pool of 50: 5 cells of 20 vectors hold twice it; fewer are never read
    assert "the 5 nearest of 20 k-means cells" in note and "while the in-process copy loads" in note
    background["gate"].set()
    settle(ledger)
    ledger.index.matrix.drop()
    ledger.index.matrix.max_bytes = 0  # none kept: the policy's share
    assert "the 10 nearest of 20 k-means cells" in ledger.recall("amber basalt",
                                                                strategy="vector").note


def test_the_copy_loads_on_a_thread_of_lower_cpu_priority(
        env: Env, background: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The first recalls after an open are answered while the copy loads: on a busy machine the
    loading thread must not take the CPU from them (Linux: that thread alone is niced)."""
    seen: list[int] = []
    twin = VectorMatrix._twin

    def noted(self: VectorMatrix, db: LedgerFile) -> VectorMatrix:
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return twin(self, db)

    monkeypatch.setattr(VectorMatrix, "_twin", noted)
    fill(env, 30)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    env.ledger.recall("anything")
    background["gate"].set()
    settle(env.ledger)
    assert seen == [min(mine + loading.NICER, 19)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine  # ours unchanged
