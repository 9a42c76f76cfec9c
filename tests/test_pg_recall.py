"""Recall on a PostgreSQL ledger (issue 34), end to end through the service: the same corpus and
queries rank the same facts, with the same scores, as on SQLite; only believed facts are served;
the indexes change in the write's own transaction (a rolled-back write leaves no row, a reader
on another connection finds a fact in recall exactly when it sees the fact); and the strategy
statement names the server's indexes, never FTS5 or sqlite-vec."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from custody_app.domain.readmodels import RecallResult
from custody_app.ledger.facade import Ledger
from custody_app.recall import matrix as matrix_mod
from tests.conftest import CAUSE, REVIEWER, WRITER, Env, day

DPO = "user:dpo"
STRATEGIES = ("hybrid", "lexical", "vector")
# The fixed corpus: few words, so bm25 ties, common terms and near-identical vectors abound.
WORDS = ("teal", "kayak", "paddle", "harbor", "invoice", "refund", "zurich", "lodz", "münchen",
         "firmware", "battery", "pairing", "renewal", "gold", "silver", "plan", "called", "asked")
SPACES = ("org", "team:a")
QUERIES = ("teal kayak", "refund invoice", "battery firmware pairing", "gold plan renewal",
           "munchen harbor", "lodz", "asked about the silver plan", "kayak", "called zurich",
           "paddles", "renewals invoices", "nothing matches xyzzy")
SERVER_TABLES = ("recall_docs", "recall_postings", "recall_terms", "recall_stats",
                 "recall_vec", "recall_cells")


def ids(result: RecallResult) -> list[str]:
    return [h.fact.fact_id for h in result.results]


def corpus() -> list[tuple[str, str, str, str, str]]:
    """(subject, predicate, value, space, provenance) of 60 facts, fixed by a seed: some values
    repeated word for word under other subjects (equal bm25 and vectors: ties), a fifth claimed
    (quarantined)."""
    rng = random.Random(34)
    out = []
    for i in range(60):
        if i % 7 == 6:  # a repeat of an earlier value, under another subject
            value = out[i - 6][2]
        else:
            value = " ".join(rng.choices(WORDS, k=rng.randint(2, 9)))
        out.append((f"acct:{i % 13}", f"note{i}", value, SPACES[i % 2],
                    "claimed" if i % 5 == 4 else "attested"))
    return out


def ranked(ledger: Ledger, keys: dict[str, str], query: str,
           **options: Any) -> list[tuple[str, float, int | None, int | None]]:
    """A recall's hits as (fact key, score, lexical rank, vector rank), in order."""
    res = ledger.recall(query, **options)
    return [(keys[h.fact.fact_id], h.score, h.lexical_rank, h.vector_rank) for h in res.results]


def every_answer(ledger: Ledger) -> dict[tuple[str, str, bool, str | None], Any]:
    keys: dict[str, str] = {}
    for fact in ledger.db.facts.dump()[0]:
        keys[fact.fact_id] = fact.predicate
    out: dict[tuple[str, str, bool, str | None], Any] = {}
    for query in QUERIES:
        for strategy in STRATEGIES:
            for claimed in (False, True):
                for space in (None, "team:a"):
                    out[(query, strategy, claimed, space)] = ranked(
                        ledger, keys, query, k=10, strategy=strategy, include_claimed=claimed,
                        space=space)
    return out


def fill(ledger: Ledger) -> None:
    with ledger.transaction():
        for subject, predicate, value, space, provenance in corpus():
            ledger.assert_fact(subject, predicate, value, actor=WRITER, cause=CAUSE,
                               space=space, provenance=provenance)


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process copy", "store KNN"])
def test_the_same_corpus_ranks_the_same_facts_on_both_backends(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch, in_process: bool) -> None:
    """Every query, strategy, status and space filter: the same facts in the same order, with
    the same fused scores and the same rank in each half, on a SQLite file and on the server
    (the vector half from the in-process copy, and from each store's own KNN)."""
    if not in_process:
        monkeypatch.setattr(matrix_mod, "MAX_BYTES", 0)
    answers = []
    for address in (tmp_path / "ledger.db", pg_url):
        env = Env(address)
        fill(env.ledger)
        # A supersession, a retraction and a forgetting move the statistics on both.
        facts = {f.predicate: f.fact_id for f in env.ledger.db.facts.dump()[0]}
        env.ledger.assert_fact("acct:0", "note0", "teal harbor renewal", actor=WRITER,
                               cause=CAUSE, provenance="attested", supersedes=facts["note0"])
        env.ledger.retract(facts["note3"], actor=WRITER, reason="typo")
        env.ledger.forget(facts["note8"], actor=DPO, reason="subject_request")
        answers.append(every_answer(env.ledger))
        env.ledger.close()
    sqlite, server = answers
    assert any(len(v) >= 10 for v in sqlite.values())  # the queries do find things
    assert {k: v for k, v in server.items() if v != sqlite[k]} == {}


# ---- believed facts only, on the server ----------------------------------------------------------

def indexed_on_server(url: str, fact_ids: list[str]) -> set[str]:
    """Those facts with a row in any of the server's recall tables, read directly."""
    with psycopg.connect(url) as conn:
        seqs = dict(conn.execute("SELECT assert_seq, fact_id FROM facts WHERE fact_id = ANY(%s)",
                                 (fact_ids,)).fetchall())
        held = set()
        for table in ("recall_docs", "recall_postings", "recall_vec"):
            held |= {int(r[0]) for r in conn.execute(
                f"SELECT fact_seq FROM {table} WHERE fact_seq = ANY(%s)", (list(seqs),))}
    return {seqs[s] for s in held}


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("in_process", [True, False], ids=["in-process copy", "store KNN"])
def test_the_server_serves_believed_facts_only(make_env: Callable[..., Env],
                                               monkeypatch: pytest.MonkeyPatch,
                                               in_process: bool) -> None:
    if not in_process:
        monkeypatch.setattr(matrix_mod, "MAX_BYTES", 0)
    env = make_env()
    ledger = env.ledger
    live = env.put("acct:1", "note", "teal kayak paddle live")
    old = env.put("acct:2", "note", "teal kayak paddle superseded")
    newer = env.put("acct:2", "note", "a replacement without those words", supersedes=old)
    retracted = env.put("acct:3", "note", "teal kayak paddle retracted")
    ledger.retract(retracted, actor=WRITER, reason="typo")
    rejected = env.put("acct:4", "note", "teal kayak paddle rejected", provenance="claimed")
    ledger.reject(rejected, actor=REVIEWER, reason="not true")
    forgotten = env.put("acct:5", "note", "teal kayak paddle forgotten")
    ledger.forget(forgotten, actor=DPO, reason="subject_request")
    quarantined = env.put("acct:7", "note", "teal kayak paddle quarantined", provenance="claimed")
    expired = env.put("acct:6", "note", "teal kayak paddle expired", space="team:a")
    env.at(day(10))
    swept = ledger.sweep(before=day(5), space="team:a")
    assert expired in swept.expired
    dead = [old, retracted, rejected, forgotten, expired]
    assert [env.status(f) for f in dead] == [
        "superseded", "retracted", "retracted", "forgotten", "expired"]
    # No dead fact keeps a row in any recall table; the quarantined one does (with its status).
    assert indexed_on_server(str(env.path), dead + [live, newer, quarantined]) == {
        live, newer, quarantined}
    for strategy in STRATEGIES:
        # k=50: the vector half answers with every believed fact, so this is the whole set.
        got = set(ids(ledger.recall("teal kayak paddle", k=50, strategy=strategy)))
        assert got <= {live, newer} and live in got
        claimed = set(ids(ledger.recall("teal kayak paddle", k=50, strategy=strategy,
                                        include_claimed=True)))
        assert claimed <= {live, newer, quarantined} and {live, quarantined} <= claimed
    # Claims quarantined take no candidate slot: 60 of them matching the query better than any
    # believed fact (more than the pool of 50 each half reads) leave both believed ones found.
    with ledger.transaction():
        for i in range(60):
            env.put(f"acct:{100 + i}", "note", "teal kayak paddle", provenance="claimed")
    for strategy in STRATEGIES:
        assert set(ids(ledger.recall("teal kayak paddle", k=2, strategy=strategy))) <= {
            live, newer}
        assert live in ids(ledger.recall("teal kayak paddle", k=2, strategy=strategy))
    ledger.confirm(quarantined, actor=REVIEWER)
    assert quarantined in ids(ledger.recall("teal kayak paddle quarantined", k=3,
                                            strategy="lexical"))


# ---- the write's own transaction -------------------------------------------------------------------

def recall_rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as conn:
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                for t in SERVER_TABLES}


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_rolled_back_write_leaves_no_posting_on_the_server(env: Env) -> None:
    env.put("acct:1", "note", "amber basalt ridge")
    before = recall_rows(str(env.path))
    seen: list[str] = []
    with pytest.raises(RuntimeError, match="abandoned"):
        with env.ledger.transaction():
            seen.append(env.put("acct:2", "note", "zircon heron quay"))
            # Inside the transaction its own recall finds it (the rows are written there).
            assert ids(env.ledger.recall("zircon heron", strategy="lexical")) == seen
            raise RuntimeError("abandoned")
    assert recall_rows(str(env.path)) == before
    for strategy in STRATEGIES:
        assert seen[0] not in ids(env.ledger.recall("zircon heron quay", k=50,
                                                    strategy=strategy))
    assert ids(env.ledger.recall("zircon heron", strategy="lexical")) == []


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_another_connection_finds_a_fact_in_recall_exactly_when_it_sees_it(env: Env) -> None:
    writer = env.ledger
    reader = Ledger.open(env.path, clock=env.clock, id_seed=99)
    try:
        def sees(fact_id: str) -> bool:
            fact = reader.db.facts.get(fact_id)
            return fact is not None and fact.status == "active"

        def recalled(fact_id: str) -> dict[str, bool]:
            return {s: fact_id in ids(reader.recall("opal lantern wharf", k=50, strategy=s))
                    for s in STRATEGIES}

        env.put("acct:1", "note", "unrelated words")
        assert recalled("none") == dict.fromkeys(STRATEGIES, False)  # the reader's copy loads
        with writer.transaction():
            fact = env.put("acct:2", "note", "opal lantern wharf")
            writer.recall("opal", strategy="lexical")  # the index rows are written now
            assert not sees(fact)
            assert recalled(fact) == dict.fromkeys(STRATEGIES, False)
        assert sees(fact)
        assert recalled(fact) == dict.fromkeys(STRATEGIES, True)
        with writer.transaction():
            writer.retract(fact, actor=WRITER, reason="typo")
            writer.recall("opal", strategy="lexical")
            assert sees(fact)
            assert recalled(fact) == dict.fromkeys(STRATEGIES, True)
        assert not sees(fact)
        assert recalled(fact) == dict.fromkeys(STRATEGIES, False)
    finally:
        reader.close()


# ---- what recall says it did ---------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("in_process", [True, False], ids=["in-process copy", "store KNN"])
def test_the_strategy_statement_names_the_backends_own_indexes(
        make_env: Callable[..., Env], backend: str, monkeypatch: pytest.MonkeyPatch,
        in_process: bool) -> None:
    if not in_process:
        monkeypatch.setattr(matrix_mod, "MAX_BYTES", 0)
    env = make_env()
    for i, words in enumerate(("amber basalt ridge", "amber quay", "basalt heron")):
        env.put(f"acct:{i}", "note", words)
    notes = {s: env.ledger.recall("amber basalt", strategy=s).note for s in STRATEGIES}
    if backend == "sqlite":
        assert "FTS5 bm25" in notes["lexical"] and "FTS5 bm25" in notes["hybrid"]
        assert all("sqlite-vec" in notes[s] for s in ("vector", "hybrid"))
        return
    for note in notes.values():
        assert "FTS5 bm25 gave" not in note and "sqlite-vec" not in note, note
        assert "SQLite" not in note, note
    for strategy in ("lexical", "hybrid"):
        assert "BM25 inside PostgreSQL" in notes[strategy]
    for strategy in ("vector", "hybrid"):
        assert "the server's recall_vec table" in notes[strategy]
        assert ("in-process copy" in notes[strategy]) == in_process
        assert ("KNN in this process on vectors read from" in notes[strategy]) != in_process
    assert "recall_vec" not in notes["lexical"] and "BM25" not in notes["vector"]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_erasure_proof_names_the_servers_recall_tables(env: Env) -> None:
    fact = env.put("acct:77", "note", "call Meera on 98450 12345")
    cert = env.ledger.forget(fact, actor=DPO, reason="subject_request").certificate
    assert cert is not None
    places = [p.place for p in cert.places if p.place.startswith("recall indexes")]
    assert places == ["recall indexes (the server's recall_docs, recall_postings, recall_terms, "
                      "recall_vec, its in-process copy)"]
    assert [p.outcome for p in cert.places if p.place == places[0]] == ["clean"]



# ---- the planner's statistics after a bulk rebuild ----------------------------------------------

@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_rebuild_leaves_the_planner_statistics_of_the_recall_tables(env: Env) -> None:
    """A reindex (what `copy` runs on the destination, and an embedder change) ANALYZEs the
    recall tables in its transaction: the BM25 query is planned on real sizes at once, not on
    a guess of a few rows (which joined every posting with every fact) until autovacuum."""
    with env.ledger.transaction():
        for i in range(120):
            env.put(f"acct:{i}", "note", f"teal kayak paddle {i} harbor invoice")

    def planned() -> dict[str, float]:
        with psycopg.connect(str(env.path)) as conn:
            return {r[0]: float(r[1]) for r in conn.execute(
                "SELECT relname, reltuples FROM pg_class WHERE relname = ANY(%s)",
                (["recall_docs", "recall_postings", "recall_terms"],)).fetchall()}

    assert max(planned().values()) <= 0  # not analyzed since they were empty: a guess
    assert env.ledger.reindex() == 120
    sizes = planned()
    assert sizes["recall_docs"] == 120 and sizes["recall_postings"] >= 120 * 6
    assert sizes["recall_terms"] > 120
