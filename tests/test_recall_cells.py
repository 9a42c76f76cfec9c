"""The clustered vector index (issue 4 latency): from the policy's `ann_min_facts` on, sqlite-vec's
table is partitioned into k-means cells and a query reads only the nearest ones. These tests run
with a low threshold so a few hundred facts are clustered: search stays right, filters on rare
subjects fall back to every vector, erasure still removes the vector bytes, verify still checks
the index, growth re-clusters, and another process's re-clustering is picked up."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from custody_app.ledger.facade import Ledger
from custody_app.recall import matrix
from custody_app.recall.text import fact_text
from tests.conftest import CAUSE, SUITE_DEFAULT_POLICY, WRITER, Env, day, ledger_bytes
from tests.test_recall import ids, index_clean, vector_slices

DEFAULT = SUITE_DEFAULT_POLICY.read_text()
LOW = DEFAULT.replace("ann_min_facts = 20000", "ann_min_facts = 100")
WORDS = ("amber basalt cobalt dune ember fjord glacier harbor iris juniper kelp lagoon meadow "
         "nebula orchid prairie quartz reef saffron tundra umber valley willow xenon yarrow "
         "zephyr").split()


@pytest.fixture(autouse=True)
def _no_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about sqlite-vec's cells: no in-process matrix (as above its budget)."""
    monkeypatch.setattr(matrix, "MAX_BYTES", 0)


def fill(env: Env, n: int, seed: int = 1, start: int = 0) -> list[str]:
    """`n` attested facts of random word triples, one transaction; returns their ids."""
    rng = random.Random(seed)
    out = []
    with env.ledger.transaction():
        for i in range(start, start + n):
            words = " ".join(rng.sample(WORDS, 3))
            out.append(env.ledger.assert_fact(f"acct:{i}", "note", f"{words} {i}", actor=WRITER,
                                              cause=CAUSE, provenance="attested").fact_id)
    env.ledger.index.settle()  # a re-clustering it made due runs in the background
    return out


def test_the_default_policy_keeps_small_ledgers_exact(make_env: Callable[..., Env]) -> None:
    env = make_env()
    fill(env, 150)
    assert env.ledger.index.cells.count_cells() == 1
    note = env.ledger.recall("amber basalt", strategy="vector").note
    assert "over every vector" in note


def test_clustered_search_finds_what_exact_search_finds(make_env: Callable[..., Env]) -> None:
    env = make_env(LOW)
    facts = fill(env, 400)
    ledger = env.ledger
    cells = ledger.index.cells.count_cells()
    assert cells == 20  # round(sqrt(400)); clustered when the index grew past 100, again at 400
    assert ledger.db.recall.clustered_on() == 400
    index_clean(env)
    # Each fact's own text, as a query, finds that fact first (its cell is the nearest).
    rng = random.Random(5)
    for fact_id in rng.sample(facts, 25):
        view = ledger.as_of(subject=ledger.db.facts.get(fact_id).subject).facts[0]  # type: ignore[union-attr]
        result = ledger.recall(f"{view.value}", k=5, strategy="vector")
        assert ids(result)[0] == fact_id
        assert f"nearest of {cells} k-means cells" in result.note
    # Top 10 through the cells against numpy over every believed vector (same embedder).
    texts = {f: fact_text(f"acct:{i}", "note", ledger.as_of(subject=f"acct:{i}").facts[0].value)
             for i, f in enumerate(facts)}
    matrix = ledger.embedder.embed(list(texts.values()))
    overlap = []
    for query in (" ".join(rng.sample(WORDS, 2)) for _ in range(30)):
        q = ledger.embedder.embed_query(query)
        exact = {list(texts)[i] for i in np.argsort(-(matrix @ q))[:10]}
        overlap.append(len(exact & set(ids(ledger.recall(query, k=10, strategy="vector")))) / 10)
    assert np.mean(overlap) >= 0.8


def test_a_rare_subject_filter_falls_back_to_every_vector(make_env: Callable[..., Env]) -> None:
    env = make_env(LOW)
    fill(env, 300)
    odd = env.put("acct:odd", "note", "violet umbrella stand")
    ledger = env.ledger
    assert ledger.index.cells.count_cells() > 1
    # A query far from the odd fact's cell, filtered to its subject: the probed cells hold no
    # match, so the search reads every vector rather than return nothing.
    result = ledger.recall("amber basalt cobalt", k=5, strategy="vector", subject="acct:odd")
    assert ids(result) == [odd]


def test_growth_reclusters_and_another_process_sees_new_cells(make_env: Callable[..., Env],
                                                             tmp_path: Path) -> None:
    env = make_env(LOW)
    fill(env, 120)
    ledger = env.ledger
    # Clustered (in the background) after the group that passed 100 committed.
    assert ledger.db.recall.clustered_on() == 120
    assert ledger.index.cells.count_cells() == 16
    policy = tmp_path / "ledger.db.policy.toml"
    other = Ledger.open(env.path, policy=policy, clock=env.clock, id_seed=99)
    try:
        assert other.index.cells.count_cells() == 16
        fill(env, 400, seed=2, start=1000)  # 520 facts: past 3x the 120 clustered on
        assert ledger.db.recall.clustered_on() == 520
        assert ledger.index.cells.count_cells() == 23
        # The other connection reloads the centroids (the store's version moved on) and its
        # writes land in the new cells.
        assert other.index.cells.count_cells() == 23
        other.assert_fact("acct:late", "note", "zephyr yarrow xenon", actor=WRITER, cause=CAUSE,
                          provenance="attested")
        assert other.verify().index_problems == []
    finally:
        other.close()
    index_clean(env)


def test_forget_after_clustering_leaves_no_vector_bytes(make_env: Callable[..., Env]) -> None:
    env = make_env(LOW)
    fill(env, 60)
    ledger = env.ledger
    value = "Quixotic marmalade zeppelin vortex"
    fact = env.put("acct:quillon", "dessert", value)
    vector = ledger.embedder.embed([fact_text("acct:quillon", "dessert", value)])[0]
    slices = vector_slices(vector)
    fill(env, 60, seed=3, start=500)  # the index passes 100: every vector is moved to a cell
    assert ledger.index.cells.count_cells() > 1
    assert ids(ledger.recall("marmalade zeppelin", k=3))[0] == fact
    assert ledger.db.wal_checkpoint().complete
    before = ledger_bytes(env.path)
    assert sum(s in before for s in slices) >= 0.9 * len(slices)
    env.at(day(2))
    assert ledger.forget(fact, actor="user:dpo", reason="subject_request").certificate.complete
    assert ledger.db.wal_checkpoint().complete
    after = ledger_bytes(env.path)
    # Neither the live table nor the pages of the table dropped at re-clustering keep it.
    assert [s for s in slices if s in after] == []
    index_clean(env)


def test_reindex_clusters_a_large_index_at_once(make_env: Callable[..., Env]) -> None:
    env = make_env(LOW)
    fill(env, 90)
    ledger = env.ledger
    assert ledger.index.cells.count_cells() == 1
    fill(env, 60, seed=4, start=200)
    assert ledger.reindex() == 150
    assert ledger.index.cells.count_cells() == 16
    assert ledger.db.recall.clustered_on() == 150
    index_clean(env)


def test_the_vector_count_reads_no_vector_and_equals_a_scan_of_the_table(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    """`vector_count` counts sqlite-vec's rowids table (a full count of the vec0 table read
    every chunk: the 1M ingest's memory peak): it equals a count of the vec0 table itself after
    inserts, a re-clustering's moves, supersessions, retractions and a forget, and falls back
    to that scan where the rowids table is missing."""
    from store.sqlite import recall as store_recall

    env = make_env(LOW)
    facts = fill(env, 300)
    ledger = env.ledger
    assert ledger.index.cells.count_cells() > 1  # the moves of a re-clustering ran
    with ledger.transaction():
        for i, fact in enumerate(facts[:20]):
            ledger.assert_fact(f"acct:{i}", "note", f"replaced {i}", actor=WRITER, cause=CAUSE,
                               provenance="attested", supersedes=fact)
        for fact in facts[20:30]:
            ledger.retract(fact, actor=WRITER, reason="wrong")
    ledger.forget_subject("acct:40", actor=WRITER, reason="subject_request")

    def scanned() -> int:
        return int(ledger.db.conn.execute("SELECT count(*) FROM recall_vec").fetchone()[0])

    store = ledger.db.recall
    assert store.vector_count() == scanned() == len(store.indexed()[1]) == 300 - 10 - 1
    monkeypatch.setattr(store_recall, "VEC_COUNT", "SELECT count(*) FROM no_such_rowids")
    assert store.vector_count() == scanned()
    index_clean(env)


def test_after_a_hand_edit_of_the_rowids_table_the_count_still_equals_what_a_scan_reads(
        make_env: Callable[..., Env]) -> None:
    """sqlite-vec reads a vec0 table's rows through its rowids table, so the count taken from
    that table agrees with what the in-process copy streams in, even after another process
    deletes or forges rows of it (a count that overstated or understated the rows would size
    the copy wrongly)."""
    import apsw

    from store.sqlite.opening import configure_pragmas, load_sqlite_vec

    env = make_env()
    fill(env, 40)
    other = apsw.Connection(str(env.path))
    configure_pragmas(other)
    load_sqlite_vec(other)
    seqs = [r[0] for r in other.execute("SELECT rowid FROM recall_vec_rowids LIMIT 3")]
    with other:
        other.execute("DELETE FROM recall_vec_rowids WHERE rowid IN (?, ?)", seqs[:2])
        other.execute("INSERT INTO recall_vec_rowids(rowid, chunk_id, chunk_offset) "
                      "VALUES (999999, 1, 255)")
    other.close()
    store = env.ledger.db.recall
    streamed = sum(len(rows) for rows in store.iter_vectors())
    scanned = int(env.ledger.db.conn.execute("SELECT count(*) FROM recall_vec").fetchone()[0])
    assert store.vector_count() == scanned == streamed == 40 - 2 + 1
