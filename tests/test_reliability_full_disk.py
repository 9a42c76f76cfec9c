"""A full disk, simulated with PRAGMA max_page_count on the ledger's connection: every write
that does not fit is refused with `disk_full`, nothing of it is stored, and the ledger works
again once there is room."""

from __future__ import annotations

import io
import json
import os

import pytest

from custody_app.domain.errors import LedgerError
from custody_app.interfaces.batch import run_batch
from tests.conftest import CAUSE, Env


def fill(env: Env, spare_pages: int = 3) -> None:
    conn = env.ledger.db.conn
    conn.pragma("max_page_count", int(conn.pragma("page_count")) + spare_pages)


def snapshot(env: Env) -> tuple[object, ...]:
    db = env.ledger.db
    return db.events.count(), db.events.head(), db.facts.dump()


def big(n: int = 3000) -> str:
    return os.urandom(n).hex()  # incompressible, and no identifier for redaction to mask


def healthy(env: Env) -> None:
    report = env.ledger.verify()
    assert report.valid, report.problem
    assert env.ledger.rebuild().differences == []


def test_write_on_a_full_disk_is_refused_whole_and_the_ledger_recovers(env: Env) -> None:
    for i in range(5):
        env.put(f"acct:{i}", "plan", f"plan-{i}")
    fill(env)
    refused = None
    for i in range(200):
        before = snapshot(env)
        try:
            env.put(f"acct:{i}", "note", big())
        except LedgerError as exc:
            refused = exc
            break
    assert refused is not None, "the page limit never filled"
    assert refused.code == "disk_full"
    assert "disk is full" in refused.message and "nothing of it was stored" in refused.message
    assert snapshot(env) == before          # not one row of the refused write
    healthy(env)
    env.ledger.db.conn.pragma("max_page_count", 1 << 30)
    fact = env.put("acct:99", "note", big())
    assert env.status(fact) == "active"
    env.reopen()
    healthy(env)


def test_forget_on_a_full_disk_erases_nothing(env: Env) -> None:
    source = env.put("acct:1", "summary", "a long value to forget " * 20)
    derived = env.put("acct:1", "digest", "derived from it " * 20, sources=[source])
    fill(env, spare_pages=0)
    for size in (400, 40, 4):  # fill the pages right up, even their slack
        for _ in range(500):
            try:
                env.put("acct:2", "note", big(size))
            except LedgerError:
                break
    # An assert also writes its sealed free text (another table): the first of the two to fill
    # stops it, so an event without free text fills the events table's slack too.
    for _ in range(500):
        try:
            env.ledger.checkpoint()  # an event and nothing else
        except LedgerError:
            break
    before = snapshot(env)
    with pytest.raises(LedgerError) as caught:
        env.ledger.forget(source, actor="user:dpo", reason="error")
    assert caught.value.code == "disk_full"
    assert snapshot(env) == before
    assert [env.status(source), env.status(derived)] == ["active", "active"]
    assert env.ledger.as_of(subject="acct:1", predicate="summary").facts[0].value.startswith("a long")
    healthy(env)


def test_batch_on_a_full_disk_reports_each_refused_op_and_keeps_the_rest(env: Env) -> None:
    env.put("acct:0", "plan", "pro")  # the recall index has its first vector chunk
    fill(env, spare_pages=12)
    lines = [json.dumps({"op": "assert", "subject": f"acct:{i}", "predicate": "note",
                         "value": big(1500), "actor": "agent:bot", "cause": CAUSE,
                         "provenance": "attested"}) for i in range(40)]
    before = env.ledger.db.events.count()
    out = io.StringIO()
    # Groups of 4 ops share a transaction (a savepoint per op); when SQLite rolls a whole
    # group's transaction back, none of its results may claim ok.
    outcome = run_batch(env.ledger, lines, out, chunk=4)
    results = [json.loads(r) for r in out.getvalue().splitlines()]
    assert len(results) == 40 and outcome.ok + outcome.failed == 40
    assert outcome.failed > 0 and outcome.ok > 0
    assert {r["error"]["code"] for r in results if not r["ok"]} == {"disk_full"}
    for r in results:
        if r["ok"]:
            assert env.ledger.db.facts.get(r["result"]["fact_id"]) is not None
    written = env.ledger.db.events.count() - before
    assert written in (outcome.ok, outcome.ok + 1)   # + the policy event of a first write
    healthy(env)
