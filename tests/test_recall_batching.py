"""A transaction group's recall rows are written together (one embed call, one executemany each)
at its commit, and what that changes cannot be seen: a fact written earlier in the transaction is
found by a recall inside it, a savepoint that rolls back drops its own rows and only those (even
when a flush ran inside it), and a group that fails to commit leaves no index row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from custody_app.domain.errors import LedgerError
from custody_app.erasure.rotate import lexical_rows
from custody_app.recall.embedders import Embedder, Vectors
from custody_app.recall.index import FLUSH_AT
from tests.conftest import CAUSE, WRITER, Env
from tests.test_recall import ids, index_clean


class Counting:
    """The ledger's own embedder, counting the calls that embed stored facts."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.calls: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(len(texts))
        return self.inner.embed(texts)


def _put(env: Env, i: int, words: str) -> str:
    return env.ledger.assert_fact(f"acct:{i}", "note", f"{words} {i}", actor=WRITER, cause=CAUSE,
                                  provenance="attested").fact_id


def test_a_group_is_embedded_in_one_call(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    counting = Counting(env.ledger.index.embedder)
    monkeypatch.setattr(env.ledger.index, "embedder", counting)
    with env.ledger.transaction():
        facts = [_put(env, i, "granite lantern") for i in range(FLUSH_AT - 1)]
    assert counting.calls == [FLUSH_AT - 1]
    assert set(ids(env.ledger.recall("granite lantern", k=FLUSH_AT + 10))) == set(facts)
    # A larger group goes in flushes of FLUSH_AT (each a short write), the rest at its end.
    counting.calls.clear()
    with env.ledger.transaction():
        more = [_put(env, 100 + i, "basalt lantern") for i in range(2 * FLUSH_AT + 5)]
    assert counting.calls == [FLUSH_AT, FLUSH_AT, 5]
    assert set(ids(env.ledger.recall("basalt", k=3 * FLUSH_AT, strategy="lexical"))) == set(more)
    index_clean(env)


def test_recall_inside_the_transaction_sees_its_earlier_writes(env: Env) -> None:
    with env.ledger.transaction():
        first = _put(env, 1, "copper windmill")
        assert ids(env.ledger.recall("copper windmill", k=3)) == [first]
        second = _put(env, 2, "copper windmill")
        assert set(ids(env.ledger.recall("copper windmill", k=3))) == {first, second}
    index_clean(env)


def test_a_rolled_back_savepoint_drops_only_its_own_rows(env: Env) -> None:
    ledger = env.ledger
    with ledger.transaction():
        kept = _put(env, 1, "saffron harbor")
        with pytest.raises(RuntimeError), ledger.transaction():
            _put(env, 2, "saffron harbor")
            # A recall here flushes the outer fact's row too, inside the savepoint that is
            # about to roll back: that row must still be written at commit.
            assert len(ids(ledger.recall("saffron harbor", k=5))) == 2
            raise RuntimeError("the op failed after writing")
        after = _put(env, 3, "saffron harbor")
    assert set(ids(ledger.recall("saffron harbor", k=5))) == {kept, after}
    index_clean(env)


def test_retract_and_confirm_in_the_same_group_as_the_assert(env: Env) -> None:
    ledger = env.ledger
    with ledger.transaction():
        gone = _put(env, 1, "violet compass")
        ledger.retract(gone, actor="user:lead", reason="wrong")
        claimed = ledger.assert_fact("acct:2", "note", "violet compass 2", actor=WRITER,
                                     cause=CAUSE, provenance="claimed").fact_id
        ledger.confirm(claimed, actor="reviewer:r1", reason="checked")
    assert ids(ledger.recall("violet compass", k=5)) == [claimed]
    index_clean(env)


def test_a_group_that_fails_leaves_no_index_row(env: Env) -> None:
    ledger = env.ledger
    before = ledger.db.recall.counts()
    with pytest.raises(LedgerError), ledger.transaction():
        _put(env, 1, "obsidian meadow")
        raise LedgerError("test_abort", "abort the group")
    assert ledger.db.recall.counts() == before
    assert ledger.index.pending() == ({}, set(), {})
    assert ids(ledger.recall("obsidian meadow", k=3)) == []
    index_clean(env)


def test_embedding_a_batch_gives_each_text_its_own_vector_bit_for_bit() -> None:
    from custody_app.recall.embedders import HashedNgramEmbedder

    embedder = HashedNgramEmbedder()
    texts = ["acct:1 plan team", "", "Zürich São naïve", "x_y x_y", "42 invoices 42", "  "]
    batch = embedder.embed(texts)
    for i, one in enumerate(texts):
        assert batch[i].tobytes() == embedder.embed([one])[0].tobytes()
    assert embedder.embed([]).shape == (0, embedder.dimensions)


def test_the_batched_embedder_makes_the_vectors_existing_ledgers_hold() -> None:
    # sha256 of these texts' vectors from the embedder before batching (commit 5f6d36b): a
    # ledger's stored vectors keep matching its queries without a re-index.
    import hashlib

    from custody_app.recall.embedders import HashedNgramEmbedder

    texts = ["acct:1 plan team", "", "Zürich São naïve", "x_y x_y", "42 invoices 42",
             "customer asked about upgrade billing invoice migrated from legacy tier T-12345 chat"]
    digest = hashlib.sha256(HashedNgramEmbedder().embed(texts).tobytes()).hexdigest()
    assert digest == "69566a0c0ed02ad053c11f40cd7cfa4acf4c3ea8b1e319cdef812a89861263d2"


def test_a_confirm_or_retract_of_a_pending_fact_is_applied_before_the_rows_are_written(
        env: Env) -> None:
    ledger = env.ledger
    with ledger.transaction():
        claimed = ledger.assert_fact("acct:1", "note", "teal anchor", actor=WRITER, cause=CAUSE,
                                     provenance="claimed").fact_id
        ledger.confirm(claimed, actor="reviewer:r1", reason="checked")
        gone = _put(env, 2, "teal anchor")
        ledger.retract(gone, actor="user:lead", reason="wrong")
        adds = ledger.index.pending()[0]
        assert adds and all(status == "live" for _, status, _ in adds.values())
    assert ids(ledger.recall("teal anchor", k=5)) == [claimed]
    assert ledger.db.recall.counts() == (1, 1)
    index_clean(env)


def test_a_large_group_is_indexed_in_bounded_batches(env: Env,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from custody_app.recall.index import FLUSH_AT

    counting = Counting(env.ledger.index.embedder)
    monkeypatch.setattr(env.ledger.index, "embedder", counting)
    with env.ledger.transaction():
        facts = [_put(env, i, "cedar quarry") for i in range(2 * FLUSH_AT + 5)]
    # No single write indexes a whole large group at its end: at most FLUSH_AT facts at once.
    assert counting.calls == [FLUSH_AT, FLUSH_AT, 5]
    assert len(ids(env.ledger.recall("cedar quarry", k=len(facts)))) == len(facts)
    index_clean(env)


def test_removals_and_moves_wait_for_the_group_end_and_stay_exact(env: Env) -> None:
    from custody_app.recall.index import FLUSH_AT, MOVE_AT

    ledger = env.ledger
    with ledger.transaction():
        claimed = [ledger.assert_fact(f"acct:{i}", "note", f"amber ridge {i}", actor=WRITER,
                                      cause=CAUSE, provenance="claimed").fact_id
                   for i in range(MOVE_AT + 20)]
        live = [_put(env, 1000 + i, "amber ridge") for i in range(len(claimed) // 2)]
    with ledger.transaction():
        # New rows (several adds-only flushes) interleaved with confirms and retractions of
        # rows already written: more moves than MOVE_AT, so one full flush runs mid-group.
        added = []
        for i, fact in enumerate(claimed):
            ledger.confirm(fact, actor="reviewer:r1", reason="checked")
            if i < 2 * FLUSH_AT:
                added.append(_put(env, 2000 + i, "amber ridge"))
            if i < len(live):
                ledger.retract(live[i], actor="user:lead", reason="wrong")
        _, removed, moved = ledger.index.pending()
        assert len(removed) < MOVE_AT and len(moved) < FLUSH_AT
        found = set(ids(ledger.recall("amber ridge", k=1000)))
    assert found == set(claimed) | set(added)
    assert set(ids(ledger.recall("amber ridge", k=1000))) == found
    index_clean(env)


def test_the_batched_lexical_rows_equal_the_per_fact_reference(env: Env) -> None:
    """The rows a group writes (each distinct word hashed once per batch) are the very rows
    `rotate.lexical_rows` makes fact by fact (what a key rotation writes), byte for byte."""
    ledger = env.ledger
    with ledger.transaction():
        for i in range(FLUSH_AT + 7):
            ledger.assert_fact(f"acct:{i % 5}", ("plan", "note", "region")[i % 3],
                               {"v": f"Zürich plan {i}", "words": ["amber", "ridge", str(i)]},
                               actor=WRITER, cause=CAUSE, space=("org", "team:sales")[i % 2],
                               provenance="claimed" if i % 4 == 0 else "attested")
    conn = ledger.db.conn
    stored = [tuple(r) for r in conn.execute(
        "SELECT rowid, terms, scope FROM recall_fts ORDER BY rowid")]
    assert len(stored) == FLUSH_AT + 7
    assert stored == lexical_rows(ledger.index, ledger.index.key())
