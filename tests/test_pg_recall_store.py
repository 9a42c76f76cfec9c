"""store.postgres.recall against store.sqlite.recall on a real server: the same rows and calls
give the same answers; BM25 ranks and scores as FTS5's bm25() over a few hundred rows (through
adds, removals and status moves), and the vector KNN is exact with the same filters."""

from __future__ import annotations

import inspect
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from custody_app.recall import text
from store.postgres import recall as pg_recall
from store.postgres import recall_search
from store.postgres.recall import RecallStore
from store.rows import FactRow, vec_row
from store.sqlite.opening import open_ledger
from tests.pg_scaffold import pg_prepare, put_rows

KEY = b"k" * 32
DIMS = 8
SPACES = ["ops", "sales", "hr"]
SUBJECTS = [f"acct:{i}" for i in range(12)]
WORDS = [f"w{i}" for i in range(120)]


def term(word: str) -> str:
    return text.term(KEY, word)


def _corpus(n: int, seed: int = 7) -> tuple[list[Any], list[Any], list[FactRow], list[Any]]:
    """(lexical rows, vector rows, facts, events) of n facts with Zipf-like word use."""
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(len(WORDS))]
    lexical, vectors, facts, events = [], [], [], []
    np_rng = np.random.default_rng(seed)
    for seq in range(1, n + 1):
        words = rng.choices(WORDS, weights, k=rng.randint(0, 14))
        space, subject = rng.choice(SPACES), rng.choice(SUBJECTS)
        status = "quarantined" if seq % 5 == 0 else "live"
        lexical.append((seq, " ".join(map(term, words)),
                        term("space:" + space) + " " + term("subject:" + subject)))
        vec = np_rng.standard_normal(DIMS).astype(np.float32)
        vec /= np.linalg.norm(vec)
        vectors.append(vec_row(seq, seq % 3, vec.tobytes(), status, space, "ref:" + subject))
        facts.append(FactRow(seq, f"f{seq}", subject, "note", space, "2026-01-01", None,
                             "observed", None, None, None, None, None, 0, "agent", None,
                             "active" if status == "live" else "quarantined", None))
        events.append((seq, "assert", f"2026-01-01T00:00:{seq:04d}", "agent", "p", f"f{seq}",
                       subject, json.dumps({"subject_ref": "ref:" + subject}), b"sealed%d" % seq, "s",
                       f"h{seq - 1}", f"h{seq}"))
    return lexical, vectors, facts, events


def _match(words: list[str], space: str | None, subject: str | None) -> str:
    """As custody_app.recall.search.lexical_match builds it."""
    match = "terms: (" + " OR ".join(term(w) for w in dict.fromkeys(words)) + ")"
    if space is not None:
        match += " AND scope: " + term("space:" + space)
    if subject is not None:
        match += " AND scope: " + term("subject:" + subject)
    return match


def _queries(seed: int = 11) -> list[tuple[str, bool]]:
    rng = random.Random(seed)
    out = []
    for i in range(80):
        words = rng.sample(WORDS[:60], rng.randint(1, 4)) + (["absent"] if i % 9 == 0 else [])
        space = rng.choice(SPACES) if i % 3 == 0 else None
        subject = rng.choice(SUBJECTS) if i % 7 == 0 else None
        out.append((_match(words, space, subject), i % 2 == 0))
    return out


@pytest.fixture
def both(pg_url: str, tmp_path: Path) -> Any:
    lf = open_ledger(tmp_path / "l.db")
    with psycopg.connect(pg_url) as pg:
        pg_prepare(pg, pg_recall.DDL)
        yield lf, pg, RecallStore(pg)
    lf.conn.close()


def _same_ranking(sq: Any, pg: Any, limit: int = 10) -> tuple[int, int]:
    """Every query ranks the same ids with the same scores on both; (queries with hits,
    scores equal to the last bit)."""
    with_hits = exact = 0
    for match, live in _queries():
        want = sq.lexical(match, limit, live_only=live)
        got = pg.lexical(match, limit, live_only=live)
        assert [s for s, _ in got] == [s for s, _ in want], match
        assert [x for _, x in got] == pytest.approx([x for _, x in want], rel=1e-12), match
        with_hits += bool(want)
        exact += [x for _, x in got] == [x for _, x in want]
    return with_hits, exact


@pytest.mark.parametrize("page", [8192, 7])
def test_bm25_and_knn_as_sqlite_through_changes(both: Any, page: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """(A page of 7 rows makes the vector search keep its best across many pages.)"""
    monkeypatch.setattr(recall_search, "VEC_PAGE", page)
    lf, pg, store = both
    lexical, vectors, facts, events = _corpus(400)
    with lf.write(), pg.transaction():
        put_rows(pg, lf.conn, events, facts)
        for recall in (lf.recall, store):
            recall.create("test-embedder", DIMS)
            recall.add_many(lexical[:300], vectors[:300])
            for row, vec in zip(lexical[300:], vectors[300:], strict=True):
                recall.add(row[0], row[1], row[2], vec[1], vec[2], vec[3],
                           random.Random(row[0]).choice(SPACES), "ref")
    with_hits, exact = _same_ranking(lf.recall, store)
    assert with_hits >= 60 and exact == 80
    # Removals (one, many, a batch with re-adds and status moves) keep the statistics right.
    with lf.write(), pg.transaction():
        for recall in (lf.recall, store):
            recall.remove(7)
            recall.remove_many(list(range(100, 180)))
            recall.apply([1, 2, 3], [(4, "quarantined"), (6, "quarantined")],
                         [lexical[1], lexical[2]], [vectors[1], vectors[2]])
            recall.set_status(8, "quarantined")
    with_hits, exact = _same_ranking(lf.recall, store)
    assert with_hits >= 60 and exact == 80
    for name, args in [("lexical_rows_count", ()), ("counts", ()), ("indexed", ()),
                       ("which_indexed", ([1, 3, 7, 99, 100, 500],)),
                       ("lexical_of", ([2, 7, 50],)),
                       ("doc_freq", ([term(w) for w in WORDS[:30]] + ["hnothere"],)),
                       ("embedder", ()), ("exists", ())]:
        assert getattr(store, name)(*args) == getattr(lf.recall, name)(*args), name
    # The vector half: exact KNN with every filter, as sqlite-vec answers it.
    rng = np.random.default_rng(3)
    for i in range(40):
        query = rng.standard_normal(DIMS).astype(np.float32).tobytes()
        statuses = ("live",) if i % 2 else ("live", "quarantined")
        space = SPACES[i % 3] if i % 4 == 0 else None
        subject = "ref:" + SUBJECTS[i % 12] if i % 5 == 0 else None
        cells = [i % 3] if i % 6 == 0 else None
        want = lf.recall.vector(query, 10, statuses, space, subject, cells)
        got = store.vector(query, 10, statuses, space, subject, cells)
        assert [s for s, _ in got] == [s for s, _ in want]
        assert [d for _, d in got] == pytest.approx([d for _, d in want], abs=1e-5)
        assert want


def test_bm25_ties_and_common_terms(both: Any) -> None:
    """Rows scoring alike come in fact seq order on both; a term in most rows gets FTS5's
    1e-6 IDF floor; a MATCH that is not of the built form finds nothing."""
    lf, pg, store = both
    rows = [(seq, " ".join([term("a")] * (1 + seq % 2) + [term("b")] * (seq < 6)),
             term("space:x") + " " + term("subject:y")) for seq in range(1, 13)]
    # A query term also in some rows' scope column: bm25 counts only the terms column's rows
    # for its IDF (the phrase's column filter), and matches only there.
    rows += [(seq, term("c"), term("b") + " " + term("space:x")) for seq in range(13, 20)]
    with lf.write(), pg.transaction():
        for recall in (lf.recall, store):
            recall.create("e", DIMS)
            recall.add_many(rows, [])
    for match in (_match(["a"], None, None), _match(["b", "a"], "x", None),
                  _match(["a", "b", "a"], None, "y")):
        want, got = lf.recall.lexical(match, 20), store.lexical(match, 20)
        assert got == want
        assert len({s for _, s in want}) < len(want)  # ties were there to break
    assert store.lexical("terms: (a OR", 5) == lf.recall.lexical("terms: (a OR", 5) == []


def _ordered(name: str, answer: Any) -> Any:
    """sqlite-vec scans its vectors chunk by chunk (a moved vector goes to its new cell's
    chunk); the server store gives them in fact seq order, which the callers ask for or
    impose themselves."""
    if name in ("vector_cells", "vectors"):
        return sorted(answer)
    if name == "vector_seqs":
        return sorted(answer)
    if name == "vector_seqs_by_cell":
        pairs = sorted(zip(*answer, strict=True))
        return [p[0] for p in pairs], [p[1] for p in pairs]
    return answer


def test_bookkeeping_as_sqlite(both: Any) -> None:
    lf, pg, store = both
    lexical, vectors, facts, events = _corpus(60, seed=5)
    cell_of = {seq: seq % 4 + 10 for seq in range(1, 61)}
    with lf.write(), pg.transaction():
        put_rows(pg, lf.conn, events, facts)
        versions = []
        for recall in (lf.recall, store):
            assert recall.exists() is False and recall.doc_freq(["h1"]) is None
            recall.create("e", DIMS)
            recall.repartition(DIMS, [bytes([i]) * 32 for i in range(3)], vectors)
            recall.add_many(lexical, [])
            recall.note_maintenance_error("boom")
            recall.begin_moving(10, [bytes([9]) * 32] * 4)
            moved = recall.move(recall.vectors_of([5, 3, 999, 1] + list(range(6, 40))),
                                lambda v: cell_of[round(float(np.frombuffer(v, np.float32)[0])
                                                        * 0) + 1], 10, lambda made: False)
            versions.append(recall.vec_version())
            assert moved[0] == 37
        assert all(versions)
        calls: list[tuple[str, tuple[Any, ...]]] = [
            ("cells", ()), ("cells_version", ()), ("moving_below", ()), ("clustered_on", ()),
            ("maintenance_error", ()), ("vector_cells", ()), ("vector_seqs", ()),
            ("vector_seqs", (10,)), ("vector_seqs_by_cell", (10,)), ("vectors", ()),
            ("vectors_of", ([4, 2, 999],)), ("vector_count", ()),
            ("hits", ([3, 1, 999],)), ("embedder", ())]
        for name, args in calls:
            assert _ordered(name, getattr(store, name)(*args)) == _ordered(
                name, getattr(lf.recall, name)(*args)), name
        assert [r for page in store.iter_vectors(7) for r in page] == sorted(lf.recall.vectors())
        for recall in (lf.recall, store):
            recall.end_moving(60)
            recall.note_maintenance_error(None)
            before = recall.vec_version()
            old, new = recall.set_status(9, "live")
            assert (old, recall.vec_version()) == (before, new) and old != new
        for name in ("cells", "cells_version", "moving_below", "clustered_on",
                     "maintenance_error", "vector_cells", "indexed"):
            assert getattr(store, name)() == _ordered(name, getattr(lf.recall, name)()), name
        for recall in (lf.recall, store):
            recall.recreate_lexical(lexical[:10])
        assert store.counts() == lf.recall.counts() == (10, 60)
        assert store.doc_freq([term("w0")]) == lf.recall.doc_freq([term("w0")])


def test_move_stops_when_enough(both: Any) -> None:
    """`enough` ends a move: what it reports gone through is exactly what moved."""
    _, pg, store = both
    _, vectors, _, _ = _corpus(40, seed=2)
    with pg.transaction():
        store.create("e", DIMS)
        store.repartition(DIMS, [], vectors)
        asked: list[int] = []

        def enough(made: int) -> bool:
            asked.append(made)
            return len(asked) == 5

        used, made = store.move(store.vectors_of(list(range(1, 41))), lambda v: 7, 5, enough)
        moved = sorted(s for s, c in store.vector_cells() if c == 7)
        assert (made, asked) == (0, [0] * 5)
        assert moved == list(range(1, used + 1)) and 5 <= used < 40


def test_every_public_method_of_the_sqlite_store_with_its_signature() -> None:
    from store.sqlite.recall import RecallStore as SqliteRecall

    for name in dir(SqliteRecall):
        if not name.startswith("_"):
            assert name in dir(RecallStore), name
            want = inspect.signature(getattr(SqliteRecall, name))
            assert inspect.signature(getattr(RecallStore, name)) == want, name
