"""`custody-app doctor` (DESIGN section 11): a ledger fresh from `init` passes every check; each
broken part (key file modes, a dropped or altered trigger, a wrong user_version, a missing key
store, a pending scrub, the FTS secure-delete option) is found and named; a file that is not a
ledger exits 3; and no run changes a byte of the ledger, its WAL or its key store."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest

from custody_app.doctor.checks import _secure_delete, diagnose, sqlite_vec_ok
from custody_app.ledger.facade import Ledger
from store.sqlite import health
from store.sqlite.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION
from tests.conftest import CAUSE

NAMES = ["sqlite-vec", "ledger", "schema", "triggers", "secure-delete", "wal", "pending-scrubs",
         "erasure-leaks", "recall-maintenance", "unsafe-identifiers",
         "key-store", "master-key", "forget-key", "signing-key", "keys-match", "ledger-marks",
         "index-key", "epoch-key",
         # policy: which one is in force (issue 32)
         "integrity", "policy", "vectors", "erasure-half-state", "epoch-pending"]
STRIPPED = ("CUSTODY_LEDGER", "CUSTODY_POLICY", "CUSTODY_KEYSTORE", "CUSTODY_MASTER_KEY")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in STRIPPED}
    return {**env, **extra}


def cli(*args: str | Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "custody_app", *map(str, args)],
                          capture_output=True, text=True, timeout=120, env=_env(**extra))


def doctor(ledger: Path, *flags: str, **extra: str) -> tuple[int, dict[str, Any]]:
    """Run `custody-app doctor --json` in a subprocess: (exit code, report)."""
    done = cli("doctor", "--ledger", ledger, "--json", *flags, **extra)
    assert done.stderr.startswith("custody-app: doctor:"), done.stderr
    return done.returncode, json.loads(done.stdout)


def outcomes(report: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["outcome"] for c in report["checks"]}


def detail(report: dict[str, Any], name: str) -> str:
    [found] = [c["detail"] for c in report["checks"] if c["name"] == name]
    return str(found)


def files(folder: Path) -> dict[str, bytes]:
    """Every file in the folder and its bytes (the -shm index excepted: it is shared memory)."""
    return {p.name: b"" if p.name.endswith("-shm") else p.read_bytes()
            for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger made by `custody-app init` (with one fact), copied for each test."""
    folder = tmp_path_factory.mktemp("doctor_template")
    ledger = folder / "l.db"
    done = cli("init", "--ledger", ledger)
    assert done.returncode == 0, done.stderr
    with Ledger.open(ledger) as led:
        led.assert_fact("acct:1", "plan", "gold", actor="agent:a", cause=CAUSE,
                        provenance="attested")
    return ledger


@pytest.fixture
def ledger(template: Path, tmp_path: Path) -> Path:
    for source in template.parent.iterdir():
        shutil.copy2(source, tmp_path / source.name)  # copy2 keeps the 0600 modes
    return tmp_path / template.name


# ---- a healthy ledger ---------------------------------------------------------------------------
def test_a_fresh_ledger_after_init_passes_every_check_and_is_left_as_it_was(ledger: Path) -> None:
    before = files(ledger.parent)
    done = cli("doctor", "--ledger", ledger)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[1] for line in lines] == NAMES
    assert all(line.startswith("ok ") for line in lines), done.stdout
    # Each line names the file it looked at.
    for line, name in zip(lines, NAMES, strict=True):
        if name != "sqlite-vec":
            assert "l.db" in line, line
    code, report = doctor(ledger)
    assert code == 0 and report["ok"] is True and report["opened"] is True
    assert set(outcomes(report).values()) == {"ok"}
    # Read-only: not a byte changed, and no -wal or -shm appeared beside the ledger.
    assert files(ledger.parent) == before


def test_the_python_api_gives_the_same_report(ledger: Path) -> None:
    report = diagnose(ledger)
    assert report.ok and [c.name for c in report.checks] == NAMES
    assert report.render().splitlines()[0].startswith("ok   sqlite-vec")


def test_a_key_store_moved_away_is_found_with_keystore(ledger: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "vault"
    elsewhere.mkdir()
    for suffix in (".keys", ".keys.master"):
        shutil.move(f"{ledger}{suffix}", elsewhere / f"k{suffix}")
    code, report = doctor(ledger)
    assert code == 1 and outcomes(report)["key-store"] == "FAIL"
    code, report = doctor(ledger, "--keystore", str(elsewhere / "k.keys"))
    assert code == 0, report
    code, report = doctor(ledger, CUSTODY_KEYSTORE=str(elsewhere / "k.keys"))
    assert code == 0 and str(elsewhere / "k.keys") in detail(report, "key-store")


def test_a_master_key_from_the_environment(ledger: Path) -> None:
    master = Path(f"{ledger}.keys.master")
    key = master.read_text().strip()
    master.unlink()
    code, report = doctor(ledger)
    assert code == 1 and "does not exist" in detail(report, "master-key")
    code, report = doctor(ledger, CUSTODY_MASTER_KEY=key)
    assert code == 0 and "$CUSTODY_MASTER_KEY" in detail(report, "master-key")
    code, report = doctor(ledger, CUSTODY_MASTER_KEY="ab" * 32)
    assert code == 1 and outcomes(report)["master-key"] == "FAIL"
    assert "does not open the key store" in detail(report, "master-key")


# ---- each failure found and named ---------------------------------------------------------------
@pytest.mark.parametrize(("suffix", "name"), [(".keys", "key-store"),
                                              (".keys.master", "master-key")])
def test_a_key_file_readable_by_others_fails(ledger: Path, suffix: str, name: str) -> None:
    key_file = Path(f"{ledger}{suffix}")
    key_file.chmod(0o644)
    code, report = doctor(ledger)
    assert code == 1 and report["ok"] is False
    assert {n for n, o in outcomes(report).items() if o != "ok"} == {name}
    assert str(key_file) in detail(report, name) and "0644" in detail(report, name)
    key_file.chmod(0o400)  # stricter than 0600 is fine
    assert doctor(ledger)[0] == 0


def test_a_ledger_file_readable_by_others_is_a_warning(ledger: Path) -> None:
    ledger.chmod(0o644)
    code, report = doctor(ledger)
    assert code == 0 and report["ok"] is True
    assert {n for n, o in outcomes(report).items() if o != "ok"} == {"ledger"}
    assert outcomes(report)["ledger"] == "warn" and "0644" in detail(report, "ledger")
    assert doctor(ledger, "--strict")[0] == 1


def _sql(ledger: Path, *statements: str) -> None:
    con = sqlite3.connect(ledger)
    try:
        for statement in statements:
            con.execute(statement)
        con.commit()
    finally:
        con.close()


def test_a_dropped_trigger_fails_and_is_named(ledger: Path) -> None:
    _sql(ledger, "DROP TRIGGER events_append_only_delete")
    code, report = doctor(ledger)
    assert code == 1 and outcomes(report)["triggers"] == "FAIL"
    assert "events_append_only_delete" in detail(report, "triggers")
    assert {n for n, o in outcomes(report).items() if o != "ok"} == {"triggers"}


def test_a_trigger_replaced_by_a_harmless_one_of_the_same_name_fails(ledger: Path) -> None:
    _sql(ledger, "DROP TRIGGER tombstones_no_delete",
         "CREATE TRIGGER tombstones_no_delete BEFORE DELETE ON tombstones BEGIN SELECT 1; END")
    code, report = doctor(ledger)
    assert code == 1 and "altered tombstones_no_delete" in detail(report, "triggers")


def test_an_extra_trigger_is_a_warning(ledger: Path) -> None:
    _sql(ledger, "CREATE TRIGGER sneaky AFTER INSERT ON events BEGIN SELECT 1; END")
    code, report = doctor(ledger)
    assert code == 0 and outcomes(report)["triggers"] == "warn"
    assert "sneaky" in detail(report, "triggers")


@pytest.mark.parametrize(("version", "words"), [(99, f"newer than the {SCHEMA_VERSION}"),
                                                (0, "user_version 0"), (1, "served_facts")])
def test_a_wrong_user_version_fails_without_making_the_ledger_unopenable(
        ledger: Path, version: int, words: str) -> None:
    _sql(ledger, f"PRAGMA user_version = {version}")
    before = files(ledger.parent)
    code, report = doctor(ledger)
    assert code == 1 and report["opened"] is True and outcomes(report)["schema"] == "FAIL"
    assert words in detail(report, "schema") and str(ledger) in detail(report, "schema")
    assert files(ledger.parent) == before


def test_an_older_schema_is_a_warning(tmp_path: Path) -> None:
    """A version-1 ledger (no session tables yet) is upgraded by the next read-write open."""
    ledger = tmp_path / "old.db"
    con = apsw.Connection(str(ledger))
    con.execute(MIGRATIONS[0])
    con.pragma("application_id", APPLICATION_ID)
    con.pragma("user_version", 1)
    con.close()
    code, report = doctor(ledger)
    assert outcomes(report)["schema"] == "warn" and "next read-write open" in detail(
        report, "schema")
    assert outcomes(report)["triggers"] == "ok"


def test_a_missing_key_store_fails_and_is_not_created(ledger: Path) -> None:
    keys = Path(f"{ledger}.keys")
    keys.unlink()
    code, report = doctor(ledger)
    assert code == 1 and outcomes(report)["key-store"] == "FAIL"
    assert str(keys) in detail(report, "key-store") and "does not exist" in detail(
        report, "key-store")
    assert outcomes(report)["forget-key"] == outcomes(report)["signing-key"] == "FAIL"
    assert not keys.exists()


def test_a_public_key_that_is_not_the_signing_keys_fails(ledger: Path, tmp_path: Path) -> None:
    pub = Path(f"{ledger}.pub")
    other = tmp_path / "other.db"
    assert cli("init", "--ledger", other).returncode == 0
    shutil.copyfile(f"{other}.pub", pub)
    code, report = doctor(ledger)
    assert code == 1 and outcomes(report)["signing-key"] == "FAIL"
    assert str(pub) in detail(report, "signing-key")
    pub.unlink()
    code, report = doctor(ledger)
    assert code == 0 and outcomes(report)["signing-key"] == "warn"


def test_the_key_store_of_another_ledger_fails_keys_match(ledger: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with Ledger.open(other) as led:
        led.assert_fact("acct:1", "plan", "gold", actor="agent:a", cause=CAUSE)
    code, report = doctor(ledger, "--keystore", f"{other}.keys")
    assert code == 1
    # The values do not decrypt under the wrong key store either, so verify fails too.
    assert {n for n, o in outcomes(report).items() if o == "FAIL"} == {"keys-match", "integrity"}
    assert "belongs to another ledger" in detail(report, "keys-match")
    assert outcomes(doctor(other)[1])["keys-match"] == "ok"


def test_the_fts_secure_delete_option_switched_off_fails(ledger: Path) -> None:
    _sql(ledger, "UPDATE recall_fts_config SET v = 0 WHERE k = 'secure-delete'")
    code, report = doctor(ledger)
    assert code == 1 and outcomes(report)["secure-delete"] == "FAIL"
    assert "FTS5" in detail(report, "secure-delete")


def test_secure_delete_off_on_a_connection_fails(ledger: Path) -> None:
    db = health.inspect_ledger(ledger)
    try:
        assert _secure_delete(db).outcome == "ok"
        db.conn.execute("PRAGMA secure_delete = FAST")
        failed = _secure_delete(db)
        assert failed.outcome == "FAIL" and "secure_delete is 2" in failed.detail
    finally:
        db.close()


def test_a_pending_scrub_is_found_and_left_pending(ledger: Path) -> None:
    with Ledger.open(ledger) as led:
        fact = led.assert_fact("acct:9", "plan", "ZQX-DOCTOR-PENDING", actor="agent:a",
                               cause=CAUSE, provenance="attested").fact_id
        # A reader that has fetched one row holds the WAL (as in tests/test_erasure.py).
        reader = apsw.Connection(str(ledger))
        cursor = reader.execute("SELECT seq, body FROM events ORDER BY seq")
        assert next(cursor) is not None
        cert = led.forget(fact, actor="user:dpo", reason="subject_request").certificate
        assert cert.complete is False
    try:
        before = files(ledger.parent)
        assert before[f"{ledger.name}-wal"] != b""
        code, report = doctor(ledger)
        assert code == 0 and outcomes(report)["pending-scrubs"] == "warn"
        assert fact in detail(report, "pending-scrubs")
        assert f"{ledger}-wal" in detail(report, "wal") and "bytes" in detail(report, "wal")
        assert doctor(ledger, "--strict")[0] == 1
        # Doctor finished nothing and wrote nothing: the db and its WAL are byte-for-byte the same.
        assert files(ledger.parent) == before
    finally:
        reader.close()
    with Ledger.open(ledger) as led:  # a read-write open finishes it
        assert led.db.erasure.pending() == []
    assert outcomes(doctor(ledger)[1])["pending-scrubs"] == "ok"


def test_a_file_that_is_not_a_ledger_exits_3_and_is_untouched(tmp_path: Path) -> None:
    text = tmp_path / "notes.db"
    text.write_text("not a database at all\n" * 20)
    other = tmp_path / "other.db"
    _sql(other, "CREATE TABLE t(x)", "INSERT INTO t VALUES (1)")
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    for path, words in ((text, "not a SQLite database"), (other, "not a custody-app ledger"),
                        (empty, "not a custody-app ledger")):
        before = files(tmp_path)
        code, report = doctor(path)
        assert code == 3 and report["opened"] is False and report["ok"] is False
        assert outcomes(report) == {"sqlite-vec": "ok", "ledger": "FAIL"}
        assert words in detail(report, "ledger") and str(path) in detail(report, "ledger")
        assert files(tmp_path) == before
    done = cli("doctor", "--ledger", text)
    assert done.returncode == 3 and done.stdout.splitlines()[1].startswith("FAIL ledger")


def test_a_missing_ledger_exits_3_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    code, report = doctor(missing)
    assert code == 3 and "does not exist" in detail(report, "ledger")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("version", "ok"), [("v0.1.9", True), ("v0.1.10", True), ("0.2.0", True),
                                             ("v0.1.8", False), ("v0.1.9-alpha.3", False),
                                             ("v0.0.99", False), ("garbage", False)])
def test_sqlite_vec_version_floor(version: str, ok: bool) -> None:
    assert sqlite_vec_ok(version) is ok


def test_damaged_files_are_reported_not_a_traceback(ledger: Path, tmp_path: Path) -> None:
    keys = Path(f"{ledger}.keys")
    with open(keys, "r+b") as handle:
        handle.truncate(4096)
    code, report = doctor(ledger)
    assert code == 1 and outcomes(report)["key-store"] == "FAIL"
    assert "malformed" in detail(report, "key-store")
    with open(ledger, "r+b") as handle:
        handle.truncate(ledger.stat().st_size // 3)
    done = cli("doctor", "--ledger", ledger)
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert "FAIL ledger" in done.stdout and "malformed" in done.stdout
