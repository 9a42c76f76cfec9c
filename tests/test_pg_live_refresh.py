"""Live refresh across machines (issue 34): the terminal app on a ledger on a PostgreSQL server
hears another process's commits through LISTEN/NOTIFY, with no poll running: a fact asserted
and a claim confirmed by a second process (`custody-app --batch -`, a real process, each result
printed once committed) reach the Beliefs and Review screens. The latency from the commit to the
screen is printed (bench/bench_live_refresh.py measures it); the tests assert only that the
change arrives before a generous timeout, with the fallback poll set to an hour, so nothing but
a notification can have brought it. When the listening connection is lost the app says so on
screen, polls, and listens again; a write committed meanwhile is shown once it hears again."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from textual.widgets import DataTable

from custody_app.interfaces.tui import app as app_module
from custody_app.ledger.facade import Ledger
from store.postgres.schema import SCHEMA_VERSION
from tests.conftest import SUITE_DEFAULT_POLICY
from tests.test_pg_surfaces import CAUSE, ROOT, _env, fact, ops
from tests.test_tui_live import until
from tests.tuikit import app_on, build_story, idle, keys, notes

GENEROUS_S = 30.0
LISTENERS = "SELECT pid FROM pg_stat_activity WHERE datname = %s AND query LIKE 'LISTEN %%'"


class Batch:
    """`custody-app --batch - --ledger URL`, one long-lived operator process: each op line
    sent, its result line read back once committed (the moment the commit is known)."""

    def __init__(self, url: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "custody_app", "--batch", "-", "--ledger", url],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=ROOT, env=_env())

    def run(self, op: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """(the op's result, the monotonic time its line arrived: after its commit)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(op) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        committed = time.monotonic()
        assert line, self.proc.stderr.read() if self.proc.stderr else "no answer"
        answer = json.loads(line)
        assert answer.get("ok", True) and "result" in answer, answer
        return answer["result"], committed

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=120)


@pytest.fixture
def batch(pg_url: str) -> Iterator[Batch]:
    run = Batch(pg_url)
    try:
        yield run
    finally:
        if run.proc.poll() is None:
            run.close()


@pytest.fixture
def no_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's fallback poll (and its retry) set to an hour: a change that reaches the screen
    within the test came through a notification."""
    monkeypatch.setattr(app_module, "POLL_S", 3600.0)


async def _arrives(pilot: Any, check: Any, since: float, what: str) -> float:
    assert await until(pilot, check, seconds=GENEROUS_S), f"{what}: not shown"
    latency = time.monotonic() - since
    print(f"{what}: on screen {latency * 1000:.0f} ms after the other process's commit")
    return latency


async def test_another_processs_assert_and_confirm_reach_the_screens_through_notify(
        pg_url: str, batch: Batch, no_poll: None) -> None:
    story = build_story(pg_url)  # type: ignore[arg-type]
    app = app_on(pg_url, watch=True)  # type: ignore[arg-type]
    async with app.run_test(size=(180, 40)) as pilot:
        await idle(pilot)
        assert await until(pilot, lambda: app.listening is True, seconds=GENEROUS_S)
        table = app.screen.query_one("#facts", DataTable)
        assert story["plan2"] in keys(table)
        heard = app.notifications
        result, committed = batch.run(fact("acct:7", "plan", "enterprise", space="org"))
        await _arrives(pilot, lambda: result["fact_id"] in keys(table), committed,
                       "an assert by another process, on the Beliefs screen")
        assert app.notifications > heard
        # The Review screen: a reviewer's confirm in the other process removes the claim.
        await pilot.press("2")
        await idle(pilot)
        queue = app.screen.query_one("#queue", DataTable)
        assert story["claim"] in keys(queue)
        heard = app.notifications
        _, committed = batch.run({"op": "confirm", "fact_id": story["claim"],
                                  "actor": "user:rev", "reason": "checked on another host"})
        await _arrives(pilot, lambda: story["claim"] not in keys(queue), committed,
                       "a confirm by another process, on the Review screen")
        assert app.notifications > heard
        assert "not live" not in app.sub_title
    assert batch.close() == 0


async def test_a_lost_listener_is_said_on_screen_and_what_committed_meanwhile_is_shown(
        pg_url: str, pg_server: Any, batch: Batch, monkeypatch: pytest.MonkeyPatch) -> None:
    """The listening connection is killed and the database refuses new connections: the app
    says it is not live (header and notice) and keeps trying; once the server accepts again
    it listens again, and a write committed while it could not hear is on screen."""
    monkeypatch.setattr(app_module, "POLL_S", 0.5)
    build_story(pg_url)  # type: ignore[arg-type]
    database = urlsplit(pg_url).path.lstrip("/")
    app = app_on(pg_url, watch=True)  # type: ignore[arg-type]
    async with app.run_test(size=(180, 40)) as pilot:
        await idle(pilot)
        assert await until(pilot, lambda: app.listening is True, seconds=GENEROUS_S)
        # The other process is connected already: it goes on writing while the app cannot.
        written, _ = batch.run(fact("acct:8", "plan", "basic", space="org"))
        with pg_server.admin() as admin:
            admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
            try:
                pids = [r[0] for r in admin.execute(LISTENERS, (database,))]
                assert len(pids) == 1, pids
                admin.execute("SELECT pg_terminate_backend(%s)", (pids[0],))
                assert await until(pilot, lambda: app.listening is False, seconds=GENEROUS_S)
                assert "not live: polling every 0.5 s" in app.sub_title
                assert any("Live refresh lost" in n for n in notes(app)), notes(app)
                late, _ = batch.run(fact("acct:9", "plan", "pro", space="org"))
            finally:
                admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        assert await until(pilot, lambda: app.listening is True, seconds=GENEROUS_S)
        table = app.screen.query_one("#facts", DataTable)
        assert await until(pilot, lambda: {written["fact_id"], late["fact_id"]} <= set(keys(table)),
                           seconds=GENEROUS_S), keys(table)
        assert "not live" not in app.sub_title
        assert any("Live refresh is back" in n for n in notes(app)), notes(app)
    assert batch.close() == 0


async def test_a_forged_notification_costs_a_read_and_hides_no_real_write(
        pg_url: str, batch: Batch, no_poll: None) -> None:
    """Any role that may connect can NOTIFY the ledger's channel: the app reads the real head
    on a notification and never takes the payload's seq, so a forged huge seq neither shows
    anything nor makes it skip the real writes after it."""
    import psycopg

    build_story(pg_url)  # type: ignore[arg-type]
    app = app_on(pg_url, watch=True)  # type: ignore[arg-type]
    async with app.run_test(size=(180, 40)) as pilot:
        await idle(pilot)
        assert await until(pilot, lambda: app.listening is True, seconds=GENEROUS_S)
        real = app.head_seq
        heard = app.notifications
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("NOTIFY custody_changes, '999999999'")
        assert await until(pilot, lambda: app.notifications > heard, seconds=GENEROUS_S)
        await idle(pilot)
        assert app.head_seq == real
        table = app.screen.query_one("#facts", DataTable)
        result, committed = batch.run(fact("acct:7", "plan", "enterprise", space="org"))
        await _arrives(pilot, lambda: result["fact_id"] in keys(table), committed,
                       "a real write after a forged notification")
        assert app.head_seq == result["seq"]
    assert batch.close() == 0


def test_a_write_notifies_once_committed_and_never_when_rolled_back(pg_url: str) -> None:
    """The notification rides in the writer's transaction: a listener hears the new head's
    seq when it commits, nothing for a write the ledger refused (rolled back)."""
    from custody_app.domain.errors import LedgerError
    from custody_app.ledger.changes import LedgerChanges

    with Ledger.open(pg_url) as ledger:
        changes = LedgerChanges.open(pg_url)
        assert changes is not None
        try:
            assert changes.wait(0.2) is None
            done = ledger.assert_fact("acct:1", "plan", {"v": 1}, actor="agent:x", cause=CAUSE,
                                      provenance="attested")
            assert changes.wait(GENEROUS_S) == done.seq
            with pytest.raises(LedgerError):
                ledger.assert_fact("acct:1", "plan", {"v": 2}, actor="agent:x",
                                   cause={"kind": "nonsense"}, provenance="attested")
            assert changes.wait(0.5) is None
        finally:
            changes.close()


def test_a_file_ledger_has_no_listener_its_files_show_its_changes(tmp_path: Path) -> None:
    from custody_app.ledger.changes import LedgerChanges

    assert LedgerChanges.open(tmp_path / "ledger.db") is None


def test_a_ledger_made_before_notifications_gets_them_at_its_next_read_write_open(
        pg_url: str) -> None:
    """A schema of version 1 (no notify trigger) is upgraded by the ladder, under the ledger's
    lock, at the next read-write open; its writes notify from then on."""
    import psycopg

    from custody_app.ledger.changes import LedgerChanges

    Ledger.open(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER events_notify ON custody.events")
        conn.execute("DROP FUNCTION custody.custody_notify_head()")
        conn.execute("UPDATE custody.schema_version SET version = 1")
    with Ledger.open(pg_url) as ledger:
        changes = LedgerChanges.open(pg_url)
        assert changes is not None
        try:
            done = ledger.assert_fact("acct:1", "plan", {"v": 1}, actor="agent:x", cause=CAUSE,
                                      provenance="attested")
            assert changes.wait(GENEROUS_S) == done.seq
        finally:
            changes.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM custody.schema_version").fetchone() == (
            SCHEMA_VERSION,)


def test_a_running_mcp_server_follows_another_processs_confirm_and_erasure(
        pg_url: str) -> None:
    """`custody-app serve` (a real process) keeps state between requests: the recall index's
    in-process vector copy and its review queue. Another process's confirm and erasure show
    on its next read: in recall (the vector copy reloads when the table's version token moved),
    in memory_pending, and in memory_read."""
    from tests.mcp_wire import StdioWire
    from tests.test_pg_surfaces import cli

    def result(reply: dict[str, Any]) -> Any:
        assert "result" in reply and not reply["result"]["isError"], reply
        return reply["result"]["structuredContent"]

    assert cli("init", "--ledger", pg_url).returncode == 0
    server = StdioWire(pg_url)  # type: ignore[arg-type]
    try:
        wrote = result(server.call("memory_write", 1, subject="acct:1", predicate="plan",
                                   value="platinum support tier", cause=CAUSE))
        assert wrote["status"] == "quarantined"
        ids = {"k": 5, "strategy": "vector"}
        before = result(server.call("memory_recall", 2, query="platinum support tier", **ids))
        assert wrote["fact_id"] not in json.dumps(before)
        assert wrote["fact_id"] in json.dumps(result(server.call("memory_pending", 3)))
        done = cli("confirm", wrote["fact_id"], "--ledger", pg_url, "--actor", "user:rev")
        assert done.returncode == 0, done.stderr
        after = result(server.call("memory_recall", 4, query="platinum support tier", **ids))
        assert wrote["fact_id"] in json.dumps(after)
        assert wrote["fact_id"] not in json.dumps(result(server.call("memory_pending", 5)))
        done = cli("forget", wrote["fact_id"], "--ledger", pg_url, "--actor", "user:dpo",
                   "--reason", "subject_request")
        assert done.returncode in (0, 1), done.stderr  # 1: the server's files stay pending
        gone = result(server.call("memory_recall", 6, query="platinum support tier", **ids))
        assert wrote["fact_id"] not in json.dumps(gone)
        assert result(server.call("memory_read", 7, subject="acct:1"))["facts"] == []
    finally:
        assert server.close() == 0


def test_a_running_mcp_server_never_puts_back_the_policy_another_host_replaced(
        pg_url: str, tmp_path: Path) -> None:
    """`serve` without --policy follows the policy the ledger records. Another host adopts a
    new one: the running server's next write is refused (`policy_changed`, nothing written)
    instead of recording its older policy over it; restarted, it writes under the new one."""
    from tests.mcp_wire import StdioWire
    from tests.test_pg_surfaces import cli

    def head_policy() -> str:
        with Ledger.open(pg_url, readonly=True) as ledger, ledger.db.read():
            return str(ledger.db.events.last_policy_hash())

    assert cli("init", "--ledger", pg_url).returncode == 0
    newer = tmp_path / "newer.toml"
    newer.write_text(SUITE_DEFAULT_POLICY.read_text().replace(
        'max_receipt_age = "PT1H"', 'max_receipt_age = "PT2H"'))
    server = StdioWire(pg_url)  # type: ignore[arg-type]
    try:
        first = server.call("memory_write", 1, subject="acct:1", predicate="plan",
                            value="basic", cause=CAUSE)
        assert not first["result"]["isError"], first
        adopted = cli("--batch", "-", "--ledger", pg_url, "--policy", str(newer),
                      stdin=ops(fact("acct:2", "plan", "pro")))
        assert adopted.returncode == 0, adopted.stderr
        recorded = head_policy()
        refused = server.call("memory_write", 2, subject="acct:3", predicate="plan",
                              value="gold", cause=CAUSE)
        assert refused["result"]["isError"], refused
        assert refused["result"]["structuredContent"]["error"]["code"] == "policy_changed"
        assert head_policy() == recorded
    finally:
        assert server.close() == 0
    again = StdioWire(pg_url)  # type: ignore[arg-type]
    try:
        wrote = again.call("memory_write", 3, subject="acct:3", predicate="plan",
                           value="gold", cause=CAUSE)
        assert not wrote["result"]["isError"], wrote
    finally:
        assert again.close() == 0
    assert head_policy() == recorded
