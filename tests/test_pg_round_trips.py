"""Few round trips (issue 33): what one `assert_fact` costs on a server, counted on the wire
(tests/pg_roundtrips.py: a loopback TCP proxy counting request-and-answer turns per
connection), for the ledger's connection and its key store's. The limits are the counts
measured when the write path was trimmed (commit history of store/postgres/readcache.py and
keystore.py), plus a margin of 2: a change that adds round trips to the write path fails here.

Measured on the wire (loopback TCP, PostgreSQL 18, steady state: statements already prepared),
(ledger, key store) round trips of one assert: before (main b05ea5f) (22, 24) when the assert
makes its subject's key (the key store's transaction, then its high-water mark's) and (22, 9)
when the key exists; after (9, 8) and (10, 3)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from custody_app.ledger.facade import Ledger
from tests.pg_roundtrips import TurnCounter

CAUSE = {"kind": "tool", "ref": "rt"}
# (ledger, key store) round trips of one assert, measured, plus 2 each.
LIMITS = {"new subject": (9 + 2, 8 + 2), "known subject": (10 + 2, 3 + 2)}


@pytest.fixture
def counted(pg_url: str) -> Iterator[tuple[Ledger, TurnCounter]]:
    proxy = TurnCounter.before(pg_url)
    ledger = Ledger.open(proxy.url(pg_url))
    try:
        yield ledger, proxy
    finally:
        ledger.close()
        proxy.close()


class Undo(Exception):
    """Raised to roll a test's write transaction back."""


def turns_of(ledger: Ledger, proxy: TurnCounter, call: Any) -> tuple[int, int]:
    """(ledger, key store) round trips `call` cost."""
    wires = list(proxy.wires)
    keys = [w for w in wires if w.says(b"keystore_changes")]
    main = [w for w in wires if w not in keys and w.says(b"events")]
    assert len(keys) == 1 and len(main) == 1, [bytes(w.sent[:200]) for w in wires]
    before = (main[0].turns, keys[0].turns)
    call()
    assert len(proxy.wires) == len(wires), "the assert opened a connection of its own"
    return main[0].turns - before[0], keys[0].turns - before[1]


def put(ledger: Ledger, subject: str, n: int) -> Any:
    return lambda: ledger.assert_fact(subject, "plan", {"v": n}, actor="agent:rt", cause=CAUSE,
                                      provenance="attested")


def test_an_assert_costs_a_handful_of_round_trips(counted: tuple[Ledger, TurnCounter]) -> None:
    ledger, proxy = counted
    # Warm: the policy's record and the recall layout happen once per ledger, and psycopg
    # prepares a statement on its 5th run (one more round trip then): count the steady state.
    for n in range(8):
        put(ledger, f"acct:warm{n}", n)()
        put(ledger, f"acct:warm{n}", n)()
    new = turns_of(ledger, proxy, put(ledger, "acct:new", 2))
    known = turns_of(ledger, proxy, put(ledger, "acct:new", 3))
    print(f"round trips of one assert (ledger, key store): new subject {new}, known {known}")
    assert new[0] <= LIMITS["new subject"][0] and new[1] <= LIMITS["new subject"][1], new
    assert known[0] <= LIMITS["known subject"][0] and known[1] <= LIMITS["known subject"][1], \
        known
    # What was written is what a ledger without the proxy reads back.
    assert [f.fact_id for f in ledger.as_of(subject="acct:new").facts]


def test_cached_reads_see_the_transactions_own_writes(pg_url: str) -> None:
    """Inside a write transaction the head, a ledger_meta entry, a fact and the key store's
    entries are answered from a cache: each answer changes as soon as the transaction writes."""
    with Ledger.open(pg_url) as ledger:
        put(ledger, "acct:c", 0)()
        db = ledger.db
        with ledger.transaction():
            head = db.events.head()
            assert db.events.head() == head
            put(ledger, "acct:c", 1)()
            after = db.events.head()
            assert after is not None and head is not None and after[0] == head[0] + 1
            assert db.meta("probe") is None
            db.texts.set_meta("probe", "one")
            assert db.meta("probe") == "one"
            db.texts.set_meta("probe", "two")
            assert db.meta("probe") == "two"
            assert ledger.keys is not None
            store = ledger.keys.store
            assert store.meta("probe") is None
            store.put_meta("probe", b"one")
            assert store.meta("probe") == b"one"
        # A state row goes out with the next statement (store.postgres.failures.later): every
        # way of reading sees it, a server-side cursor's too; then all of it is rolled back.
        fact = db.facts.get(ledger.as_of(subject="acct:c").facts[0].fact_id)
        assert fact is not None
        with pytest.raises(Undo), ledger.transaction():
            state = db.facts.latest_state(fact.assert_seq)
            assert state is not None
            pushed = replace(state, from_seq=after[0] + 100, tx_from="2999-01-01T00:00:00Z")
            db.facts.push_state(pushed)
            assert [r for r in db.facts.dump_rows()[1] if r[1] == pushed.from_seq]
            db.facts.push_state(replace(pushed, from_seq=after[0] + 101))
            assert db.facts.latest_state(fact.assert_seq) == replace(pushed,
                                                                     from_seq=after[0] + 101)
            raise Undo
        assert db.facts.latest_state(fact.assert_seq) == state
        with ledger.transaction():
            assert db.events.head() == after
            assert db.meta("probe") == "two"
            assert ledger.keys.store.meta("probe") == b"one"
