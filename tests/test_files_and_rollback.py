"""Files and output (DESIGN 13): `--keystore`/`--ledger` refuse another application's SQLite
file without writing to it; read-only commands write nothing (bytes and mtimes); a ledger
restored from before an erasure is refused (`ledger_rolled_back`) and doctor names it. Real
subprocesses of the console script throughout."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

STRIPPED = ("CUSTODY_LEDGER", "CUSTODY_POLICY", "CUSTODY_KEYSTORE", "CUSTODY_MASTER_KEY",
            "CUSTODY_ACCEPT_ROLLBACK")


def cli(*args: str | Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in STRIPPED} | extra
    return subprocess.run([sys.executable, "-m", "custody_app", *map(str, args)],
                          capture_output=True, text=True, timeout=120, env=env)


def state(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file in the folder: its bytes and its modification time (ns)."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def batch(ledger: Path, lines: list[dict[str, object]]) -> list[dict[str, object]]:
    done = subprocess.run([sys.executable, "-m", "custody_app", "--create", "--batch", "-", "--ledger",
                           str(ledger)], input="\n".join(json.dumps(x) for x in lines),
                          capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k not in STRIPPED})
    return [json.loads(x) for x in done.stdout.splitlines()]


def assert_line(subject: str, value: str) -> dict[str, object]:
    return {"op": "assert", "subject": subject, "predicate": "plan", "value": value,
            "actor": "agent:a", "cause": {"kind": "tool", "ref": "t1"}, "provenance": "attested"}


@pytest.fixture
def ledger(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "l.db"
    assert cli("init", "--ledger", path).returncode == 0
    out = batch(path, [assert_line("acct:ZQX-FILES-0001", "a plan value to keep")])
    return path, str(out[0]["result"]["fact_id"])  # type: ignore[index]


def foreign(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE invoices(id INTEGER PRIMARY KEY, total TEXT)")
    con.execute("INSERT INTO invoices(total) VALUES ('12.00')")
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize("command", [["verify"], ["history", "FACT"], ["why", "FACT"]])
def test_a_read_only_command_writes_nothing_to_any_file(
        ledger: tuple[Path, str], command: list[str]) -> None:
    path, fact = ledger
    before = state(path.parent)
    done = cli(*[fact if c == "FACT" else c for c in command], "--ledger", path)
    assert done.returncode == 0, done.stderr
    assert state(path.parent) == before


def test_doctor_writes_nothing_to_any_file(ledger: tuple[Path, str]) -> None:
    path, _ = ledger
    before = state(path.parent)
    assert cli("doctor", "--ledger", path).returncode == 0
    assert state(path.parent) == before


@pytest.mark.parametrize("command", [["verify"], ["history", "f_x"],
                                     ["forget", "f_x", "--actor", "user:a", "--reason", "error"]])
def test_a_foreign_sqlite_file_is_refused_as_key_store(
        ledger: tuple[Path, str], tmp_path: Path, command: list[str]) -> None:
    path, _ = ledger
    other = foreign(tmp_path / "accounts.sqlite")
    before = state(tmp_path)
    done = cli(*command, "--ledger", path, "--keystore", other)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "not a custody-app key store" in done.stderr
    assert state(tmp_path) == before  # no custody tables, no application id, no master key


def test_a_foreign_sqlite_file_is_refused_as_ledger(tmp_path: Path) -> None:
    other = foreign(tmp_path / "accounts.sqlite")
    before = state(tmp_path)
    for command in (["verify"], ["--batch", "-"]):
        done = cli(*command, "--ledger", other)
        assert done.returncode == 3, done.stdout + done.stderr
        assert "not a custody-app ledger" in done.stderr
    assert state(tmp_path) == before


def test_a_ledger_restored_from_before_a_forget_is_refused(ledger: tuple[Path, str],
                                                           tmp_path: Path) -> None:
    path, fact = ledger
    backup = tmp_path / "backup"
    backup.mkdir()
    shutil.copy2(path, backup / path.name)  # the ledger only: the key store stays current
    out = batch(path, [{"op": "forget", "fact_id": fact, "actor": "user:dpo", "reason": "error"}])
    assert out[0]["ok"] is True
    shutil.copy2(backup / path.name, path)  # restore the old copy over the ledger
    done = cli("history", fact, "--ledger", path)
    assert done.returncode == 3 and "ledger_rolled_back" in done.stderr, done.stderr
    assert "a plan value to keep" not in done.stdout
    report = json.loads(cli("doctor", "--ledger", path, "--json").stdout)
    integrity = [c for c in report["checks"] if c["name"] == "integrity"]
    assert integrity[0]["outcome"] == "FAIL" and "ledger_rolled_back" in integrity[0]["detail"]
    mark = done.stderr.split("CUSTODY_ACCEPT_ROLLBACK=")[1].split()[0].rstrip(".")
    # Accepting the loss knowingly lets a read-write open through, once.
    accepted = cli("rebuild", "--ledger", path, CUSTODY_ACCEPT_ROLLBACK=mark)
    assert accepted.returncode == 0, accepted.stderr
    # The old copy still holds the value the forget re-keyed away: verify names it (the key
    # is gone, no erasure on record), never reads it as erased, until it is forgotten again.
    named = cli("verify", "--ledger", path)
    assert named.returncode != 0 and fact in named.stdout and "keystore_tampered" in named.stdout
    again = batch(path, [{"op": "forget", "fact_id": fact, "actor": "user:dpo",
                          "reason": "error"}])
    assert again[0]["ok"] is True, again
    assert cli("verify", "--ledger", path).returncode == 0
