"""Actions you can search: each filter in the API, the batch op and the CLI, paging, the
subject kept as its hash, the index upgraded onto an older ledger and rebuilt by --repair."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from custody_app import Ledger
from custody_app.domain.timeutil import ManualClock
from tests.conftest import Env, day
from tests.test_batch_cli import cli


def seed(env: Env) -> dict[str, int]:
    seqs = {}
    plan = [("refund", "billing.issue_refund", "agent:bot", "s1", "acct:1", day(1)),
            ("close", "helpdesk.close", "agent:bot", "s1", None, day(2)),
            ("refund2", "billing.issue_refund", "agent:other", "s2", "acct:2", day(3)),
            ("mail", "mail.send", "agent:other", "s3", "acct:1", day(4))]
    for ref, tool, actor, session, subject, at in plan:
        env.at(at)
        seqs[ref] = env.ledger.act(session, tool, ref, "ok", actor=actor, subject=subject).seq
    return seqs


def refs(result: Any) -> list[str]:
    return [a.ref for a in result.actions]


def test_each_filter_finds_exactly_its_actions_newest_first(env: Env) -> None:
    seed(env)
    search = env.ledger.actions
    assert refs(search()) == ["mail", "refund2", "close", "refund"]
    assert refs(search(tool="billing.issue_refund")) == ["refund2", "refund"]
    assert refs(search(actor="agent:other")) == ["mail", "refund2"]
    assert refs(search(session="s1")) == ["close", "refund"]
    assert refs(search(subject="acct:1")) == ["mail", "refund"]
    assert refs(search(subject="acct:404")) == []
    assert refs(search(since=day(2), until=day(4))) == ["refund2", "close"]
    assert refs(search(tool="billing.issue_refund", actor="agent:bot")) == ["refund"]
    page = search(limit=3)
    assert refs(page) == ["mail", "refund2", "close"] and page.next_before_seq is not None
    assert refs(search(limit=3, before_seq=page.next_before_seq)) == ["refund"]


def test_the_subject_is_stored_as_its_hash_never_in_plaintext(env: Env) -> None:
    seed(env)
    rows = env.ledger.db.actions.dump()
    bodies = [r.body for r in env.ledger.db.events.iter_all()]
    assert not any("acct:1" in str(r) for r in rows)
    assert not any('"acct:1"' in b for b in bodies)


def test_batch_op_and_cli(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with Ledger.open(path, clock=ManualClock()) as ledger:
        ledger.act("s1", "billing.issue_refund", "R1", "ok", actor="agent:bot", subject="acct:9")
        ledger.act("s2", "mail.send", "M1", "ok", actor="agent:bot")
    done = cli("--create", "--batch", "-", "--ledger", path, stdin=json.dumps(
        {"op": "actions", "id": "q", "subject": "acct:9"}) + "\n")
    [line] = [json.loads(x) for x in done.stdout.splitlines() if '"id": "q"' in x]
    assert line["ok"] and [a["ref"] for a in line["result"]["actions"]] == ["R1"]
    text = cli("actions", "--tool", "mail.send", "--ledger", path)
    assert text.returncode == 0 and "mail.send M1" in text.stdout and "R1" not in text.stdout
    as_json = json.loads(cli("actions", "--actor", "agent:bot", "--json", "--ledger", path).stdout)
    assert [a["ref"] for a in as_json["actions"]] == ["M1", "R1"]
    bad = cli("actions", "--since", "yesterday", "--ledger", path)
    assert bad.returncode == 1 and "invalid_time" in bad.stderr


@pytest.mark.sqlite_only  # builds an older SQLite schema
def test_an_older_ledger_gets_the_index_backfilled_and_repair_rebuilds_it(env: Env) -> None:
    seqs = seed(env)
    conn = env.ledger.db.conn
    conn.execute("DROP TABLE actions")
    conn.pragma("user_version", 2)
    ledger = env.reopen()
    assert refs(ledger.actions(subject="acct:1")) == ["mail", "refund"]
    conn = ledger.db.conn
    conn.execute("DELETE FROM actions WHERE seq = ?", (seqs["close"],))
    report = ledger.rebuild()
    assert any("action" in d for d in report.differences)
    assert ledger.rebuild(repair=True).repaired
    assert ledger.rebuild().differences == []
    assert refs(ledger.actions(session="s1")) == ["close", "refund"]
