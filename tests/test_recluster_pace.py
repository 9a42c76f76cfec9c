"""The re-clustering keeps pace with writes (issue 35): beside a writer of the same process that
writes back to back, SQLite's busy handler let the writer keep the lock (it polls at 1, 2, 5,
10... ms and the gap between two of the writer's transactions is microseconds), so a
re-clustering begun at 20k facts was still moving vectors at 100k. This process's connections now
take turns at the write lock (store/sqlite/gate.py), the re-clustering's first."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from custody_app.recall import embedding
from custody_app.recall import index as index_module
from custody_app.recall import recluster as rc
from custody_app.recall.cells import regrow_due
from custody_app.recall.embedders import make_embedder
from custody_app.recall.embedding import EmbeddingWorker
from store import open_ledger
from store.sqlite.gate import Gate
from tests.conftest import Env
from tests.test_recall import index_clean
from tests.test_recall_cells import LOW, fill

DEADLINE_S = 120.0  # a bound on the test, not a timing asserted: on main's code it never ends



def _until(condition: Callable[[], bool]) -> None:
    """Spin until another thread has reached the state `condition` reads."""
    while not condition():
        time.sleep(0.001)

def test_a_reclustering_completes_while_a_writer_writes_back_to_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = tmp_path / "low.toml"
    policy.write_text(LOW, encoding="utf-8")
    env = Env(tmp_path / "l.db", policy)
    try:
        fill(env, 300)
        monkeypatch.setattr(rc.Maintenance, "start", lambda self: None)
        fill(env, 1000, seed=7, start=5000)  # due now, not started
        monkeypatch.undo()
        assert env.ledger.db.recall.clustered_on() == 300
        # A writer that always holds the lock but for the instant between two transactions
        # (each holds it 5 ms: a write with its key store's fsyncs on a busy disk).
        hog = open_ledger(str(env.path))
        stop = threading.Event()
        writes = [0]

        def write_back_to_back() -> None:
            while not stop.is_set():
                with hog.write():
                    hog.put_meta("test_hog", str(writes[0]))
                    time.sleep(0.005)
                writes[0] += 1

        writer = threading.Thread(target=write_back_to_back)
        writer.start()
        maintenance = rc.Maintenance(env.path, env.ledger.policy)
        try:
            while writes[0] < 5:  # the writer is under way before the re-clustering begins
                time.sleep(0.01)
            maintenance.start()
            deadline = time.monotonic() + DEADLINE_S
            while maintenance.running and time.monotonic() < deadline:
                time.sleep(0.05)
            finished_while_writing = not maintenance.running
        finally:
            stop.set()
            writer.join()
            maintenance.close()
            hog.close()
        assert maintenance.error is None
        assert finished_while_writing
        assert env.ledger.db.recall.moving_below() == 0
        assert env.ledger.db.recall.clustered_on() == 1300
        assert maintenance.progress[0] == maintenance.progress[1] == 1300
        index_clean(env)
    finally:
        env.ledger.close()


def test_a_priority_waiter_goes_before_the_ordinary_ones_waiting_with_it() -> None:
    gate = Gate()
    order: list[str] = []
    assert gate.enter()  # held by this thread
    assert not gate.enter()  # a second connection of the same thread: left to SQLite

    ordinary = threading.Thread(target=_take, args=(gate, order, "writer", False))
    ordinary.start()
    _until(lambda: bool(gate._cond._waiters))  # type: ignore[attr-defined]  # the writer waits
    first = threading.Thread(target=_take, args=(gate, order, "recluster", True))
    first.start()
    _until(lambda: gate._priority_waiting > 0)
    gate.leave()
    ordinary.join()
    first.join()
    assert order == ["recluster", "writer"]


def _take(gate: Gate, order: list[str], name: str, priority: bool) -> None:
    """One turn at the gate, noted in `order`."""
    assert gate.enter(priority=priority)
    order.append(name)
    gate.leave()


def test_cells_made_for_a_smaller_index_than_recorded_are_due_again() -> None:
    """A ledger whose re-clustering recorded the size it ended at (main's code: 142 cells made
    at 20k, recorded as clustered on 84k) is due once it holds three times what its cells were
    made for (about their number squared), not three times the size recorded."""
    assert regrow_due(89_000, 84_000, 20_000, cells=142)
    assert not regrow_due(89_000, 84_000, 20_000, cells=290)  # cells made for ~84k
    assert not regrow_due(50_000, 20_000, 20_000, cells=141)
    assert regrow_due(60_000, 20_000, 20_000, cells=141)
    assert regrow_due(20_000, 0, 20_000, cells=1)  # never clustered


def test_a_priority_connection_does_not_go_twice_while_a_writer_waits() -> None:
    """Under CPU starvation a woken writer could miss the whole rest between two of the
    re-clustering's turns; the gate owes it the next turn instead."""
    gate = Gate()
    order: list[str] = []

    holder = threading.Event()
    release = threading.Event()

    def recluster_turn() -> None:
        assert gate.enter(priority=True)
        holder.set()
        release.wait()
        gate.leave()

    first = threading.Thread(target=recluster_turn)
    first.start()
    holder.wait()
    writer = threading.Thread(target=_take, args=(gate, order, "writer", False))
    writer.start()
    _until(lambda: bool(gate._cond._waiters))  # type: ignore[attr-defined]  # the writer waits
    # The re-clustering's next turn is asked for before its first ends (the writer slow to
    # wake): the writer's turn must still come first.
    again = threading.Thread(target=_take, args=(gate, order, "recluster", True))
    again.start()
    _until(lambda: gate._priority_waiting > 0)
    release.set()
    writer.join()
    again.join()
    first.join()
    assert order == ["writer", "recluster"]


def test_under_deferred_embedding_the_re_clustering_follows_the_vectors_not_the_facts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a model embedder (the shipped default) the writes add lexical rows only and a
    worker adds the vectors later. The index's due check counted the facts written: past
    ann_min_facts every commit began a re-clustering that read every vector's seq to find too
    few vectors, while the vectors lagged (a 100k-fact ingest under minilm-l6 began one at
    each of its commits from 40k on). Now the worker counts the vectors it adds, and the
    owner's next commit starts the re-clustering they made due."""
    deferred = frozenset({make_embedder("hashed-ngram").name})  # made by the worker here
    monkeypatch.setattr(embedding, "OFF_WRITE_PATH", deferred)
    monkeypatch.setattr(index_module, "OFF_WRITE_PATH", deferred)
    worker_start = EmbeddingWorker.start
    monkeypatch.setattr(EmbeddingWorker, "start", lambda self: None)  # held: vectors lag
    starts: list[int] = []
    maintenance_start = rc.Maintenance.start

    def counted(self: rc.Maintenance) -> None:
        starts.append(1)
        maintenance_start(self)
    monkeypatch.setattr(rc.Maintenance, "start", counted)
    policy = tmp_path / "low.toml"
    policy.write_text(LOW, encoding="utf-8")
    env = Env(tmp_path / "l.db", policy)
    try:
        assert env.ledger.index.deferred and env.ledger.index.embedding is not None
        for group in range(8):  # 400 facts, four times ann_min_facts, in 8 commits
            fill(env, 50, seed=group, start=group * 50)
        assert env.ledger.db.recall.vector_count() == 0
        assert starts == []  # nothing to cluster yet: no re-clustering begun
        worker_start(env.ledger.index.embedding)
        assert env.ledger.index.settle_embedding(DEADLINE_S)
        assert env.ledger.db.recall.vector_count() == 400
        fill(env, 1, seed=9, start=400)  # the owner's next commit starts it
        assert starts == [1]
        env.ledger.index.settle()
        assert env.ledger.index.cells.count_cells() > 1
        assert env.ledger.db.recall.clustered_on() >= 400
        assert env.ledger.db.recall.moving_below() == 0
    finally:
        env.ledger.close()
