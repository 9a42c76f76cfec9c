"""A restored database (issue 34): a server ledger's key store lives in the same database, so
restoring an older dump restores its older rollback marks with it. Each host keeps its own
MAC'd copy of the newest head it has seen outside the database (core.host_mark): a real
`pg_dump` and `pg_restore` (schemas dropped and recreated from the dump) of a ledger this host
saw move on is refused at open (`ledger_rolled_back`, naming both heads); written to since by
a host that never saw the newer head, it is refused as forked; a subject erased after the dump
does not become writable again on this host; a host file edited by hand is never the bar."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from custody_app.core.host_mark import host_mark_file
from custody_app.domain.errors import LedgerError
from custody_app.ledger.facade import Ledger
from tests.pgserver import BIN_ENV, wheel_bin
from tests.test_pg_surfaces import cli, fact, ops

CAUSE = {"kind": "tool", "ref": "crm#1"}
SCHEMAS = ("custody", "custody_keys")


def _bin(name: str) -> str:
    folder = Path(os.environ[BIN_ENV]) if os.environ.get(BIN_ENV) else wheel_bin()
    return str(folder / name)


def dump(url: str, into: Path) -> Path:
    """`pg_dump` of the ledger's two schemas (the ledger and its key store), custom format."""
    out = into / "ledger.dump"
    done = subprocess.run([_bin("pg_dump"), "--format=custom", "--file", str(out),
                           *(f"--schema={s}" for s in SCHEMAS), "--dbname", url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


def restore(url: str, dumped: Path) -> None:
    """Drop both schemas and recreate them from the dump, as an operator restoring a backup."""
    with psycopg.connect(url, autocommit=True) as conn:
        for schema in SCHEMAS:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    done = subprocess.run([_bin("pg_restore"), "--exit-on-error", "--dbname", url, str(dumped)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def head_of(url: str) -> tuple[int, str]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT seq, hash FROM custody.events ORDER BY seq DESC LIMIT 1"
                           ).fetchone()
    assert row is not None
    return int(row[0]), str(row[1])


def write(url: str, subject: str, value: Any) -> None:
    with Ledger.open(url) as ledger:
        ledger.assert_fact(subject, "plan", value, actor="agent:x", cause=CAUSE,
                           provenance="attested")


def test_a_database_restored_from_an_older_dump_is_refused_naming_both_heads(
        pg_url: str, tmp_path: Path) -> None:
    write(pg_url, "acct:1", "basic")
    dumped_head = head_of(pg_url)
    dumped = dump(pg_url, tmp_path)
    write(pg_url, "acct:2", "pro")  # a new subject: its key, and a mark in the key store
    seen = head_of(pg_url)
    restore(pg_url, dumped)
    assert head_of(pg_url) == dumped_head  # the restore took the key store's marks back too
    # In process, read-only and read-write: refused, naming both heads.
    for readonly in (True, False):
        with pytest.raises(LedgerError) as refused:
            Ledger.open(pg_url, readonly=readonly)
        assert refused.value.code == "ledger_rolled_back"
        message = refused.value.message
        assert f"ends at event {dumped_head[0]} ({dumped_head[1][:12]}" in message, message
        assert f"reach event {seen[0]} ({seen[1][:12]}" in message, message
        assert refused.value.details["host_seq"] == seen[0]
    # Another process (the CLI): refused with the stable code, and nothing written.
    done = cli("--batch", "-", "--ledger", pg_url, stdin=ops(fact("acct:3", "plan", "x")))
    assert done.returncode != 0 and "ledger_rolled_back" in done.stdout + done.stderr
    assert head_of(pg_url) == dumped_head
    # doctor names it: the integrity line, and the head this host saw.
    doctor = cli("doctor", "--ledger", pg_url, "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert doctor.returncode != 0 and checks["integrity"]["outcome"] == "FAIL"
    assert "ledger_rolled_back" in checks["integrity"]["detail"], checks["integrity"]
    assert checks["host-mark"]["outcome"] == "ok"
    assert f"reach event {seen[0]} ({seen[1][:12]}" in checks["host-mark"]["detail"]


def test_a_subject_erased_after_the_dump_stays_unwritable_on_the_host_that_saw_the_erasure(
        pg_url: str, tmp_path: Path) -> None:
    """The restore brings the subject's wrapped key back to life in the key store (the dump
    holds it); the host that saw the erasure refuses the database, so no write re-keys the
    subject, and its values do not become readable through this host."""
    write(pg_url, "acct:ann", "gold")
    dumped_head = head_of(pg_url)
    dumped = dump(pg_url, tmp_path)
    with Ledger.open(pg_url) as ledger:
        ledger.forget_subject("acct:ann", actor="user:dpo", reason="subject_request")
    restore(pg_url, dumped)
    for op in (fact("acct:ann", "plan", "gold again"),
               {"op": "as_of", "subject": "acct:ann"}):
        done = cli("--batch", "-", "--ledger", pg_url, stdin=ops(op))
        assert done.returncode != 0, done.stdout
        assert "ledger_rolled_back" in done.stdout + done.stderr, done.stdout + done.stderr
    with pytest.raises(LedgerError, match="ledger_rolled_back|restored"):
        with Ledger.open(pg_url) as ledger:
            ledger.assert_fact("acct:ann", "plan", "gold again", actor="agent:x", cause=CAUSE,
                               provenance="attested")
    assert head_of(pg_url) == dumped_head


def test_a_restored_database_written_to_by_a_host_that_never_saw_the_newer_head_is_forked(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(pg_url, "acct:1", "basic")
    dumped = dump(pg_url, tmp_path)
    write(pg_url, "acct:2", "pro")
    write(pg_url, "acct:3", "pro")
    seen = head_of(pg_url)
    master = (host_mark_file(pg_url).parent / "ledger.master")  # type: ignore[union-attr]
    restore(pg_url, dumped)
    # Another host: its own data folder, the team's master key by the environment.
    other = tmp_path / "other-host"
    done = cli("--batch", "-", "--ledger", pg_url, XDG_DATA_HOME=str(other),
               CUSTODY_MASTER_KEY=master.read_text().strip(),
               stdin=ops(fact("acct:4", "plan", "a"), fact("acct:5", "plan", "b"),
                         fact("acct:6", "plan", "c")))
    assert done.returncode == 0, done.stderr
    assert head_of(pg_url)[0] >= seen[0]  # it went past the head this host saw
    with pytest.raises(LedgerError) as refused:
        Ledger.open(pg_url, readonly=True)
    assert refused.value.code == "ledger_forked"
    assert f"{seen[1][:12]}" in refused.value.message


def test_a_host_mark_edited_by_hand_is_never_the_bar_and_a_loss_can_be_accepted(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(pg_url, "acct:1", "basic")
    path = host_mark_file(pg_url)
    assert path is not None and path.is_file()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    kept = path.read_text()
    # A lower mark written by hand (to let an older copy pass) fails its MAC: ignored, and
    # replaced by the head this open sees.
    data = json.loads(kept)
    data["seq"] = 1
    path.write_text(json.dumps(data))
    doctor = cli("doctor", "--ledger", pg_url, "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["host-mark"]["outcome"] == "warn", checks["host-mark"]
    assert "fails its MAC" in checks["host-mark"]["detail"]
    assert checks["integrity"]["outcome"] == "ok", checks["integrity"]
    Ledger.open(pg_url).close()
    assert json.loads(path.read_text())["seq"] == json.loads(kept)["seq"]
    # A loss accepted on purpose: once, read-write, naming the mark's seq.
    dumped = dump(pg_url, tmp_path)
    write(pg_url, "acct:2", "pro")
    seen = head_of(pg_url)
    restore(pg_url, dumped)
    monkeypatch.setenv("CUSTODY_ACCEPT_ROLLBACK", str(seen[0] - 1))
    with pytest.raises(LedgerError, match="ledger_rolled_back|restored"):
        Ledger.open(pg_url)  # another seq than the refusal names: still refused
    monkeypatch.setenv("CUSTODY_ACCEPT_ROLLBACK", str(seen[0]))
    with pytest.raises(LedgerError):
        Ledger.open(pg_url, readonly=True)  # a read never accepts
    Ledger.open(pg_url).close()
    monkeypatch.delenv("CUSTODY_ACCEPT_ROLLBACK")
    Ledger.open(pg_url, readonly=True).close()
    assert json.loads(path.read_text())["seq"] == head_of(pg_url)[0] < seen[0]


def test_a_file_ledger_keeps_no_host_mark(tmp_path: Path) -> None:
    """A file ledger's key store is a file of its own (core.rollback covers it)."""
    Ledger.open(tmp_path / "ledger.db").close()
    assert host_mark_file(str(tmp_path / "ledger.db")) is None
    assert not (tmp_path / "xdg-data").exists()


def test_a_new_ledger_made_at_the_same_address_is_not_refused(pg_url: str) -> None:
    """The host's mark is bound to the ledger's first event: a ledger dropped and made anew
    at the same address (another genesis) is another ledger, not a rolled-back one."""
    write(pg_url, "acct:1", "basic")
    write(pg_url, "acct:2", "pro")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for schema in SCHEMAS:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    write(pg_url, "acct:9", "new")  # a new ledger (its own master key file is kept)
    Ledger.open(pg_url, readonly=True).close()
    path = host_mark_file(pg_url)
    assert path is not None and json.loads(path.read_text())["seq"] == head_of(pg_url)[0]


def test_a_read_only_open_checks_the_host_mark_but_writes_no_file(pg_url: str) -> None:
    """DESIGN 13: a read-only command never writes to any file, this host's mark included."""
    write(pg_url, "acct:1", "basic")
    path = host_mark_file(pg_url)
    assert path is not None and path.is_file()
    before = path.read_bytes()
    seen = head_of(pg_url)
    path.unlink()  # as on a host that never opened this ledger
    with Ledger.open(pg_url, readonly=True) as ledger:
        assert ledger.as_of(subject="acct:1").facts
    assert not path.exists(), "a read-only open wrote this host's mark"
    with Ledger.open(pg_url) as ledger:  # a read-write open records the head it read
        assert ledger.as_of(subject="acct:1").facts
    assert path.is_file() and json.loads(path.read_text())["seq"] == seen[0]
    assert json.loads(before)["seq"] == seen[0]
