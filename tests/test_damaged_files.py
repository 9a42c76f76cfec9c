"""Issue 31, hostile files: an event body holding a byte that is not UTF-8, a stale WAL of
another copy beside a ledger, and a policy nested 2,000 deep each end in a named refusal with a
stable code (never a traceback), through real CLI processes."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from custody_app.ledger.facade import Ledger

CAUSE = {"kind": "tool", "ref": "r"}


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    return subprocess.run([sys.executable, "-m", "custody_app", *args], input=stdin,
                          capture_output=True, text=True, timeout=120, env=env)


def copy(src: Path, dst: Path) -> Path:
    for suffix in ("", ".keys", ".keys.master"):
        shutil.copyfile(f"{src}{suffix}", f"{dst}{suffix}")
    return dst


@pytest.fixture(scope="module")
def bad_utf8(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A ledger whose forget event's body holds the byte 0xff (the triggers dropped by hand)."""
    path = tmp_path_factory.mktemp("utf8") / "l.db"
    with Ledger.open(path) as led:
        fact = led.assert_fact("acct:1", "plan", "gold", actor="user:a", cause=CAUSE).fact_id
        seq = led.forget(fact, actor="user:dpo", reason="subject_request").seq
    con = sqlite3.connect(path)
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        con.execute(f"DROP TRIGGER {name}")
    con.execute("UPDATE events SET body = CAST(CAST(substr(body, 1, 10) AS BLOB) || x'ff' || "
                "CAST(substr(body, 12) AS BLOB) AS TEXT) WHERE seq = ?", (seq,))
    con.commit()
    con.close()
    return path, seq


@pytest.mark.parametrize("command", ["verify", "erasures", "doctor"])
def test_a_body_that_is_not_utf8_is_named_not_a_traceback(bad_utf8: tuple[Path, int],
                                                          command: str) -> None:
    path, seq = bad_utf8
    done = cli(command, "--ledger", str(path))
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out
    assert done.returncode != 0
    assert "ledger_damaged" in out and str(path) in out and f"event {seq}" in out, out


@pytest.fixture(scope="module")
def stale_wal(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Copy c of a ledger grew on its own; the WAL another copy d left is put beside c.
    (d's key store is the one whose mark the overlaid head matches.)"""
    root = tmp_path_factory.mktemp("wal")
    base = root / "base.db"
    assert cli("init", "--ledger", str(base)).returncode == 0
    assert cli("--batch", "-", "--ledger", str(base), stdin="".join(json.dumps(
        {"op": "assert", "subject": f"acct:{i}", "predicate": "plan", "value": "v" * 200,
         "actor": "user:a", "cause": CAUSE}) + "\n" for i in range(40))).returncode == 0
    c, d = copy(base, root / "c.db"), copy(base, root / "d.db")
    with Ledger.open(c) as led:
        for i in range(400):
            led.assert_fact(f"acct:c{i}", "note", "c" * 300, actor="user:a", cause=CAUSE)
    led = Ledger.open(d)
    for i in range(3):
        led.assert_fact(f"acct:d{i}", "plan", "v" * 200, actor="user:a", cause=CAUSE)
    shutil.copyfile(f"{d}-wal", f"{c}-wal")
    led.close()
    return c, Path(f"{d}.keys")


@pytest.mark.parametrize("command", ["verify", "doctor"])
def test_a_stale_wal_of_another_copy_is_named_not_a_traceback(stale_wal: tuple[Path, Path],
                                                              command: str) -> None:
    path, keys = stale_wal
    done = cli(command, "--ledger", str(path), "--keystore", str(keys))
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out
    assert done.returncode != 0
    assert "ledger_damaged" in out and str(path) in out and "-wal" in out, out


def _deep_policy(path: Path) -> Path:
    policy = path / "deep.toml"
    policy.write_text("[recall]\ndecay_by_space = {org = " + "[" * 2000 + "]" * 2000 + "}\n")
    return policy


@pytest.mark.parametrize("args", [["verify"], ["recall", "x"], ["--batch", "-"],
                                  ["erasures"]])
def test_a_policy_nested_2000_deep_is_policy_invalid(tmp_path: Path, args: list[str]) -> None:
    ledger = tmp_path / "l.db"
    assert cli("init", "--ledger", str(ledger)).returncode == 0
    policy = _deep_policy(tmp_path)
    before = {p.name: p.read_bytes() for p in sorted(tmp_path.glob("l.db*"))}
    done = cli(*args, "--ledger", str(ledger), "--policy", str(policy), stdin="")
    out = done.stdout + done.stderr
    assert "Traceback" not in out and "RecursionError" not in out, out
    assert done.returncode == 3
    assert "policy_invalid" in out and str(policy) in out, out
    assert {p.name: p.read_bytes() for p in sorted(tmp_path.glob("l.db*"))} == before
