"""Issue 31, output paths: no command writes over or creates a file that is the ledger, its
-wal/-shm/-journal, the key store or ITS -wal/-shm/-journal, or a key file, even with --force,
directly or through a symbolic link (SQLite deletes or replays such a file at the next open, so
a write there destroys or forges what the ledger holds). Real CLI processes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from custody_app import Ledger

CAUSE = {"kind": "tool", "ref": "r"}
SIDECARS = ("-wal", "-shm", "-journal", ".keys-wal", ".keys-shm", ".keys-journal")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    return subprocess.run([sys.executable, "-m", "custody_app", *args], capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.fixture()
def ledger(tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "l.db"
    assert cli("init", "--ledger", str(db)).returncode == 0
    with Ledger.open(db) as led:
        fact = led.assert_fact("acct:1", "plan", "gold", actor="user:a", cause=CAUSE,
                               provenance="attested").fact_id
        led.act("s1", "billing.refund", "tx-1", "ok", actor="user:a")
    return db, fact


def state(db: Path) -> dict[str, str]:
    """Digest of every file of the ledger folder (the ones that exist)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(db.parent.iterdir()) if p.is_file() and not p.is_symlink()}


def commands(db: Path, fact: str, out: Path) -> dict[str, list[str]]:
    ledger = ["--ledger", str(db)]
    return {"export": ["export", *ledger, "--out", str(out), "--force"],
            "pack": ["pack", fact, *ledger, "--out", str(out), "--force"],
            "explain": ["explain", "tx-1", *ledger, "--out", str(out), "--force"],
            "eval": ["eval", "--out", str(out), "--force"],
            "writer-key": ["writer-key", str(out), "--agent", "agent:x"],
            "receipt-key": ["receipt-key", str(out), "--issuer", "crm"]}


# The ledger's commands had -wal/-shm/-journal of the ledger and -wal/-shm of the key store
# protected already; the key store's journal, and every sidecar for the commands that know no
# ledger, were not.
CASES = [(c, s) for c in ("export", "pack", "explain") for s in ("-wal", ".keys-journal")] + [
    (c, s) for c in ("eval", "writer-key", "receipt-key") for s in SIDECARS]


@pytest.mark.parametrize("command, suffix", CASES)
def test_no_output_lands_on_a_sidecar_of_the_ledger_or_key_store(
        ledger: tuple[Path, str], suffix: str, command: str) -> None:
    db, fact = ledger
    target = Path(f"{db}{suffix}")
    before = state(db)
    done = cli(*commands(db, fact, target)[command])
    assert done.returncode != 0, (done.stdout, done.stderr)
    assert "output_protected" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert state(db) == before, "a file of the ledger folder changed or appeared"
    with Ledger.open(db, readonly=True) as led:
        assert led.verify().valid


@pytest.mark.parametrize("command", ["export", "pack", "explain", "writer-key"])
def test_a_symlink_to_a_sidecar_is_refused(ledger: tuple[Path, str], command: str) -> None:
    db, fact = ledger
    journal = Path(f"{db}.keys-journal")
    journal.touch()  # a key store in DELETE/TRUNCATE journal mode leaves this (or nothing)
    link = db.parent / "out.json"
    link.symlink_to(journal)
    dangling = db.parent / "wal.json"
    dangling.symlink_to(f"{db.name}-wal")
    before = state(db)
    for target in (link, dangling):
        done = cli(*commands(db, fact, target)[command])
        assert done.returncode != 0 and "output_protected" in done.stderr, done.stderr
    assert state(db) == before and journal.read_bytes() == b""


def test_an_ordinary_new_output_beside_the_ledger_still_works(ledger: tuple[Path, str]) -> None:
    db, fact = ledger
    assert cli("pack", fact, "--ledger", str(db), "--out", str(db.parent / "p-wal.json")).returncode == 0
    assert cli("writer-key", str(db.parent / "w.key"), "--agent", "agent:x").returncode == 0
    # "-wal" names only a sidecar when the file it would belong to exists.
    assert cli("export", "--ledger", str(db), "--out", str(db.parent / "orphan-wal")).returncode == 0
