"""Re-clustering the vector cells runs off the write path (issue 17): on a connection of its own,
in batches of short write transactions, so a second writer's asserts keep completing while it
runs; searches stay right while vectors move; an interrupted run resumes; a forget during it
leaves no vector bytes behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from custody_app.ledger.facade import Ledger
from custody_app.recall import cells as cells_mod
from custody_app.recall import recluster as rc
from custody_app.recall import txbudget
from custody_app.recall.text import fact_text
from store import LedgerFile, open_ledger
from tests.conftest import CAUSE, WRITER, Env, day, ledger_bytes
from tests.test_recall import ids, index_clean, vector_slices
from tests.test_recall_cells import LOW, fill


def _grown(make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> Env:
    """A ledger clustered at 300 vectors that grew to 1,300 (re-clustering due) with the
    background start disabled, so the test runs the re-clustering itself."""
    env = make_env(LOW)
    fill(env, 300)
    assert env.ledger.db.recall.clustered_on() == 300
    monkeypatch.setattr(rc.Maintenance, "start", lambda self: None)
    fill(env, 1000, seed=7, start=5000)
    return env


def _put(env: Env, n: int) -> str:
    return env.ledger.assert_fact(f"acct:w{n}", "note", f"writer {n} zephyr orchid", actor=WRITER,
                                  cause=CAUSE, provenance="attested").fact_id


def test_a_second_writer_commits_between_every_batch(make_env: Callable[..., Env],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    env = _grown(make_env, monkeypatch)
    written: list[str] = []

    def between_batches(done: int, total: int) -> None:
        # The main ledger's own connection writes here: had the re-clustering kept the write
        # lock past its batch, this would wait out the busy timeout and fail.
        written.append(_put(env, len(written)))
        assert env.ledger.db.recall.moving_below() > 0 or done == total
        # Mid-move, search reads every cell and still finds the newest fact first.
        assert ids(env.ledger.recall(f"writer {len(written) - 1} zephyr orchid", k=1,
                                     strategy="vector")) == [written[-1]]

    other = open_ledger(env.path)
    try:
        # No time budget: batches of exactly 100 (the budget has a test of its own).
        cells = rc.recluster(other, env.ledger.policy, batch=100, budget_s=None,
                             progress=between_batches)
    finally:
        other.close()
    assert len(written) == 13  # 1,300 vectors in batches of 100
    assert cells == round(np.sqrt(1300))
    assert env.ledger.db.recall.moving_below() == 0
    # The size the cells were made for (issue 35), not the size the move ended at.
    assert env.ledger.db.recall.clustered_on() == 1300
    for n, fact in enumerate(written):
        assert ids(env.ledger.recall(f"writer {n} zephyr orchid", k=1, strategy="vector")) == [fact]
    index_clean(env)


class SlowRows:
    """On a clock of its own (the one the re-clustering's budget reads), each vec0 DELETE of the
    connection it traces costs `cost(n)` (n counts the deletes) and a write transaction's COMMIT
    `commit` a row deleted in it and `chunk_commit` a chunk sqlite-vec made in it (seen by
    `profile`, set as the connection's profile hook); notes each write transaction's costs."""

    def __init__(self, cost: Callable[[int], float], commit: float = 0.0,
                 chunk_commit: float = 0.0) -> None:
        self.cost = cost
        self.commit = commit
        self.chunk_commit = chunk_commit
        self.now = 0.0
        self.deleted: list[int] = []  # fact seqs, in the order deleted
        self.transactions: list[list[float]] = []  # each delete's cost and the commit's
        self.chunks: list[list[int]] = []  # for each delete, the chunks made for its row
        self._writing = False

    def __call__(self, cursor: Any, sql: str, bindings: Any) -> bool:
        if sql.startswith("BEGIN IMMEDIATE"):
            self._writing = True
            self.transactions.append([])
            self.chunks.append([])
        elif sql.startswith("DELETE FROM recall_vec"):
            cost = self.cost(len(self.deleted))
            self.now += cost
            self.deleted.append(int(bindings[0]))
            self.transactions[-1].append(cost)
            self.chunks[-1].append(0)
        elif sql == "COMMIT" and self._writing:  # not a read transaction's end
            self._writing = False
            self.now += (self.commit * len(self.transactions[-1])
                         + self.chunk_commit * sum(self.chunks[-1]))
        return True

    def profile(self, sql: str, *_: Any) -> None:
        if sql.startswith('INSERT INTO "main"."recall_vec_chunks"') and self.chunks[-1]:
            self.chunks[-1][-1] += 1


def test_each_write_transaction_ends_before_the_row_that_would_pass_its_budget(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows made slow on the budget's clock: most cost 4 ms and 2 ms more in the COMMIT, every
    6th 100 ms (four budgets). Once the COMMIT's cost is known (after the first transaction),
    a transaction of ordinary rows fits the budget with its COMMIT; only a row that no
    transaction could foresee takes one past it, and a row that alone outlasts the budget
    still moves (alone): the move ends."""
    env = _grown(make_env, monkeypatch)
    slow = SlowRows(lambda n: 0.1 if n % 6 == 5 else 0.004, commit=0.002)
    rests: list[float] = []
    monkeypatch.setattr(rc, "_rest", lambda seconds, stop: rests.append(seconds))
    other = open_ledger(env.path)
    other.timer = lambda: slow.now
    other.conn.exec_trace = slow
    try:
        cells = rc.recluster(other, env.ledger.policy, budget_s=0.025)
    finally:
        other.close()
    moves = [t for t in slow.transactions if t]  # not the ones that begin and end the move
    assert sum(len(t) for t in moves) == 1300

    def held(costs: list[float]) -> float:
        return sum(costs) + 0.002 * len(costs)
    for costs in moves:  # within budget, its COMMIT included, until its last row
        assert held(costs[:-1]) < 0.025, costs
    ordinary = [t for t in moves[1:] if 0.1 not in t]
    assert len(ordinary) > 100
    assert all(held(t) <= 0.025 for t in ordinary), max(ordinary, key=held)
    # 6 ms rows: a fifth would pass 25 ms (30 ms with the COMMIT), so four, not 50 a batch.
    assert max(len(t) for t in ordinary) == 4
    assert [0.1] in moves  # one slow row, alone
    # After each, the lock is left free longer than it was held (a waiting writer gets in).
    assert len(rests) == len(moves)
    for costs, rest in zip(moves, rests, strict=True):
        assert rest > sum(costs) + 0.002 * len(costs)
    assert cells == round(np.sqrt(1300))
    assert env.ledger.db.recall.moving_below() == 0
    index_clean(env)


def _chunks_counted(db: LedgerFile) -> list[int]:
    """The chunks each of `db`'s moves says it made, noted as they return."""
    counted: list[int] = []
    move = db.recall.move

    def counting(*args: Any) -> tuple[int, int]:
        used, chunks = move(*args)
        counted.append(chunks)
        return used, chunks
    db.recall.move = counting  # type: ignore[method-assign,assignment]
    return counted


def _reclustered_counting_chunks(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Re-cluster `env`'s grown ledger to the end on a second connection, without the pauses
    between transactions; the chunks each move said it made."""
    monkeypatch.setattr(rc, "_rest", lambda seconds, stop: None)
    other = open_ledger(env.path)
    counted = _chunks_counted(other)
    try:
        assert rc.recluster(other, env.ledger.policy) == round(np.sqrt(1300))
    finally:
        other.close()
    assert counted
    return counted


def test_a_transaction_leaves_room_for_the_chunks_its_commit_writes(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    """The first moves into new cells make a chunk for most of them, and a COMMIT writes each
    whole (0.1-0.5 ms here, against 0.01-0.04 ms a row). On the budget's clock, rows cost
    1 ms, the COMMIT 0.1 ms a row and 3 ms a chunk made: once both are measured, a transaction
    holds at most its budget, but for a chunk the row it could not foresee made."""
    env = _grown(make_env, monkeypatch)
    slow = SlowRows(lambda n: 0.001, commit=0.0001, chunk_commit=0.003)
    monkeypatch.setattr(rc, "_rest", lambda seconds, stop: None)
    other = open_ledger(env.path)
    other.timer = lambda: slow.now
    other.conn.exec_trace = slow
    other.conn.set_profile(slow.profile)
    counted = _chunks_counted(other)  # the chunks each move says it made
    try:
        rc.recluster(other, env.ledger.policy, budget_s=0.025)
    finally:
        other.close()
    moves = [(t, c) for t, c in zip(slow.transactions, slow.chunks, strict=True) if t]
    assert sum(len(t) for t, _ in moves) == 1300
    made = [sum(c) for _, c in moves]
    assert counted == made  # as sqlite-vec made them
    assert sum(made) >= round(np.sqrt(1300))  # a chunk for each new cell at least
    assert sum(1 for n in made[1:] if n) >= 2  # chunks made after the first transaction too
    for costs, chunks in moves[1:]:
        held = sum(costs) + 0.0001 * len(costs) + 0.003 * sum(chunks)
        assert held - 0.003 * chunks[-1] <= 0.025 + 1e-9, (costs, chunks)
    index_clean(env)


def test_a_sqlite_vec_without_its_chunks_table_counts_no_chunk_and_the_move_ends(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the chunks cannot be numbered (another sqlite-vec's layout), the budget counts
    rows only and the re-clustering still ends with every vector in a new cell."""
    from store.sqlite import recall as store_recall

    env = _grown(make_env, monkeypatch)
    monkeypatch.setattr(store_recall, "VEC_LAST_CHUNK", "SELECT max(rowid) FROM no_such_chunks")
    assert set(_reclustered_counting_chunks(env, monkeypatch)) == {0}
    assert env.ledger.db.recall.moving_below() == 0
    index_clean(env)


def test_the_commit_estimate_learns_by_the_row_and_by_the_chunk() -> None:
    """A transaction that made no chunk measures the COMMIT a row; one that made chunks scales
    both figures by how far it was off; dearer at once, cheaper by halves; and an estimate
    worn down to nothing by COMMITs that took no time learns again instead of dividing by
    zero (which would end the re-clustering thread)."""
    cost = rc.CommitCost()
    assert cost.of(10, 0) == pytest.approx(10 * txbudget.FIRST_ROW_COMMIT_S)
    cost.learn(10, 0, 0.001)  # 0.1 ms a row: dearer, taken at once
    assert cost.per_row == pytest.approx(0.0001)
    cost.learn(10, 0, 0.0)  # cheaper: down by half only
    assert cost.per_row == pytest.approx(0.00005)
    cost.learn(10, 4, 2 * cost.of(10, 4))  # twice the estimate: both figures doubled
    assert (cost.per_row, cost.per_chunk) == pytest.approx((0.0001, 2 * txbudget.FIRST_CHUNK_COMMIT_S))
    worn = rc.CommitCost()
    worn.per_row = worn.per_chunk = 0.0
    worn.learn(5, 2, 0.002)
    assert worn.per_chunk == pytest.approx(0.001)
    assert worn.of(5, 2) == pytest.approx(0.002)


def test_a_chunk_number_that_goes_down_counts_no_chunk_made(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunks a move made are read as the newest chunk's number now less before; a number
    that went down (a hand edit, another sqlite-vec's numbering) counts as none made, never
    as fewer than none (which would lower the COMMIT estimate below what the rows cost)."""
    from store.sqlite.recall import RecallStore

    env = _grown(make_env, monkeypatch)
    numbers = iter(range(10**6, 0, -1))
    monkeypatch.setattr(RecallStore, "_last_chunk", lambda self: next(numbers))
    assert set(_reclustered_counting_chunks(env, monkeypatch)) == {0}
    index_clean(env)


def test_vectors_move_in_old_cell_order(make_env: Callable[..., Env],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The deletes go cell by cell, in fact order within a cell, so each transaction's fall in
    the same few vec0 chunks (in fact order they spread over one chunk a row)."""
    env = _grown(make_env, monkeypatch)
    before = dict(env.ledger.db.recall.vector_cells())
    assert len(set(before.values())) > 1
    slow = SlowRows(lambda n: 0.0)
    other = open_ledger(env.path)
    other.conn.exec_trace = slow
    try:
        rc.recluster(other, env.ledger.policy)
    finally:
        other.close()
    order = [(before[seq], seq) for seq in slow.deleted]
    assert len(order) == 1300 and order == sorted(order)
    index_clean(env)


def test_a_writer_thread_keeps_writing_while_the_background_reclusters(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env(LOW)
    fill(env, 300)
    original = rc.recluster
    batches: list[float] = []

    moving = threading.Event()

    def timed(*args: object, **kwargs: object) -> int:
        def note(done: int, total: int) -> None:
            batches.append(time.monotonic())
            moving.set()
        kwargs.update(batch=50, progress=note)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rc, "recluster", timed)
    writer = Ledger.open(env.path, policy=env.policy, clock=env.clock, id_seed=404)
    stop = threading.Event()
    commits: list[float] = []
    errors: list[BaseException] = []

    def keep_writing() -> None:
        n = 0
        # From the first batch on: before it, the fill's own 1,000-op transaction holds the lock
        # (seconds on a loaded machine), which is not what this test is about.
        moving.wait(timeout=120)
        try:
            while not stop.is_set():
                writer.assert_fact(f"acct:t{n}", "note", f"thread {n}", actor=WRITER,
                                   cause=CAUSE, provenance="attested")
                commits.append(time.monotonic())
                n += 1
        except BaseException as exc:  # surfaced by the assert below
            errors.append(exc)

    thread = threading.Thread(target=keep_writing)
    thread.start()
    try:
        fill(env, 1000, seed=8, start=7000)  # due: runs in the background; fill() waits for it
    finally:
        stop.set()
        thread.join()
        writer.close()
    assert errors == []
    assert len(batches) >= 20  # 1,300+ vectors in batches of 50
    during = [t for t in commits if batches[0] < t < batches[-1]]
    assert during, "no write of the second writer completed while the re-clustering ran"
    assert env.ledger.db.recall.moving_below() == 0
    index_clean(env)


def test_an_interrupted_reclustering_is_searchable_and_resumes(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    env = _grown(make_env, monkeypatch)
    stop = threading.Event()

    def halt_after_two(done: int, total: int) -> None:
        if done >= 200:
            stop.set()

    other = open_ledger(env.path)
    try:
        assert rc.recluster(other, env.ledger.policy, batch=100, progress=halt_after_two,
                            stop=stop) == 0
    finally:
        other.close()
    ledger = env.ledger
    assert ledger.db.recall.moving_below() > 0
    index_clean(env)
    note = ledger.recall("amber basalt", strategy="vector").note
    assert "over every vector" in note  # mid-move: every cell is read
    # A forget mid-move: of a vector already moved and of one not yet moved.
    value = "Quixotic marmalade zeppelin vortex"
    fact = env.put("acct:quillon", "dessert", value)
    slices = vector_slices(ledger.embedder.embed([fact_text("acct:quillon", "dessert", value)])[0])
    env.at(day(2))
    assert ledger.forget(fact, actor="user:dpo", reason="subject_request").certificate.complete
    assert ledger.db.wal_checkpoint().complete
    assert [s for s in slices if s in ledger_bytes(env.path)] == []
    monkeypatch.undo()  # the next write that sees it due starts it in the background again
    env.put("acct:resume", "note", "resume it")
    ledger.index.settle()
    assert ledger.db.recall.moving_below() == 0
    assert ledger.index.cells.count_cells() == round(np.sqrt(ledger.db.recall.counts()[1]))
    index_clean(env)


def _recluster_on_another_connection(env: Env) -> int:
    other = open_ledger(env.path)
    try:
        return rc.recluster(other, env.ledger.policy, batch=500, budget_s=None)
    finally:
        other.close()


def test_a_second_process_whose_due_is_stale_does_not_recluster_again(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    """Two writing processes both saw the index due; one re-clustered it. The other's run must
    not begin a third set of cells (stopped by its close, it left the index half moved)."""
    env = _grown(make_env, monkeypatch)
    assert _recluster_on_another_connection(env) == round(np.sqrt(1300))
    env.ledger.db.wal_checkpoint()
    before = ledger_bytes(env.path)
    assert _recluster_on_another_connection(env) == 0
    assert ledger_bytes(env.path) == before
    assert env.ledger.db.recall.clustered_on() == 1300


def test_a_reclustering_finished_elsewhere_during_kmeans_is_not_begun_again(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    env = _grown(make_env, monkeypatch)
    kmeans = rc.kmeans
    finished: list[int] = []

    def meanwhile(*args: Any, **kwargs: Any) -> Any:
        out = kmeans(*args, **kwargs)
        if not finished:  # the first run's k-means: a second connection does all of it now
            monkeypatch.setattr(rc, "kmeans", kmeans)
            finished.append(_recluster_on_another_connection(env))
        return out

    monkeypatch.setattr(rc, "kmeans", meanwhile)
    cells = env.ledger.db.recall.cells()
    other = open_ledger(env.path)
    try:
        assert rc.recluster(other, env.ledger.policy, batch=500, budget_s=None) == 0
    finally:
        other.close()
    assert finished == [round(np.sqrt(1300))]
    assert env.ledger.db.recall.moving_below() == 0
    assert len(env.ledger.db.recall.cells()) == finished[0] != len(cells)
    index_clean(env)


def test_a_reindex_while_vectors_move_ends_the_move(make_env: Callable[..., Env],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    env = _grown(make_env, monkeypatch)
    reindexed: list[int] = []

    def reindex_once(done: int, total: int) -> None:
        if not reindexed:  # the table is rebuilt under the moving re-clustering
            reindexed.append(env.ledger.reindex())

    other = open_ledger(env.path)
    try:
        assert rc.recluster(other, env.ledger.policy, batch=100, progress=reindex_once) == 0
    finally:
        other.close()
    assert reindexed == [1300]
    assert env.ledger.db.recall.moving_below() == 0
    index_clean(env)


def test_close_stops_a_running_kmeans_promptly_and_leaves_the_cells_as_they_were(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    start = rc.Maintenance.start
    env = _grown(make_env, monkeypatch)
    monkeypatch.setattr(cells_mod, "ITERATIONS", 10**7)  # a k-means of hours if not stopped
    entered = threading.Event()
    kmeans = rc.kmeans

    def noted(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        return kmeans(*args, **kwargs)

    monkeypatch.setattr(rc, "kmeans", noted)
    ledger = env.ledger
    before = (ledger.db.recall.cells(), ledger.db.recall.vector_cells())
    start(ledger.index.maintenance)
    assert entered.wait(timeout=120)
    began = time.monotonic()
    ledger.index.close()  # what Ledger.close does first
    stopped_in = time.monotonic() - began
    assert not ledger.index.maintenance.running
    assert stopped_in < 60, f"close waited {stopped_in:.0f} s for the k-means"
    # Stopped before it changed anything: the same cells, every vector where it was.
    assert (ledger.db.recall.cells(), ledger.db.recall.vector_cells()) == before
    assert ledger.db.recall.moving_below() == 0
    assert ledger.index.maintenance.error is None
    index_clean(env)


def test_doctor_reports_a_failed_reclustering_until_one_succeeds(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_doctor import detail, doctor, outcomes

    start = rc.Maintenance.start
    env = _grown(make_env, monkeypatch)

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rc, "kmeans", failing)
    maintenance = env.ledger.index.maintenance
    start(maintenance)
    maintenance.join()
    assert isinstance(maintenance.error, OSError)
    _, report = doctor(env.path)
    assert outcomes(report)["recall-maintenance"] == "warn"
    text = detail(report, "recall-maintenance")
    assert "OSError" in text and "No space left on device" in text
    assert "next write" in text  # what to do
    monkeypatch.setattr(rc, "kmeans", cells_mod.kmeans)
    start(maintenance)
    maintenance.join()
    assert maintenance.error is None and env.ledger.db.recall.moving_below() == 0
    _, report = doctor(env.path)
    assert outcomes(report)["recall-maintenance"] == "ok"


def test_writes_while_a_reclustering_is_due_or_running_do_not_count_the_index(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a re-clustering is due, and all through it (while it runs every flush is due), the
    writer keeps the vector count itself: the table is counted at most once per clustered size.
    A count(*) of both indexes at every flush of that window cut ingest past 440k facts to ~45
    facts/s (the 320k re-clustering moves vectors for minutes)."""
    env = _grown(make_env, monkeypatch)
    assert env.ledger.db.recall.clustered_on() == 300
    store_cls = type(env.ledger.db.recall)
    original = store_cls.vector_count
    counted: list[int] = []

    def vector_count(self: Any) -> int:
        if self is env.ledger.db.recall:  # the writer's own connection, not the re-clusterer's
            counted.append(1)
        return original(self)

    monkeypatch.setattr(store_cls, "vector_count", vector_count)
    for n in range(20):
        _put(env, n)
    assert env.ledger.db.recall.clustered_on() == 300  # still due: the start is disabled
    written = 20

    def between_batches(done: int, total: int) -> None:
        nonlocal written
        _put(env, written)
        written += 1

    other = open_ledger(env.path)
    try:
        rc.recluster(other, env.ledger.policy, batch=100, budget_s=None,
                     progress=between_batches)
    finally:
        other.close()
    assert written == 20 + 14  # 1,320 vectors in batches of 100, one write after each
    assert counted == []  # counted when it first became due (during the fill), not since
    assert env.ledger.db.recall.clustered_on() == 1320  # sized on these, not on the end
    index_clean(env)
