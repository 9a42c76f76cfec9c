"""Marks that cannot be forked (DESIGN 14): the key store's high-water mark is (seq, head hash)
under a MAC. An old copy of the ledger with correctly chained events appended by hand is refused
(`ledger_forked`) by every command, `verify --key` and `doctor` included; a mark row inserted by
hand (no master key) is never trusted and doctor names it; a refused op leaves the key store
byte for byte; a write naming another ledger's key store is refused (`keystore_mismatch`) and
leaves that key store untouched. Real files and real subprocesses of the console script."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from custody_app.domain.errors import LedgerError
from custody_app.ledger.facade import Ledger
from store import open_keystore
from tests.test_files_and_rollback import assert_line, batch, cli

VALUE = "a plan value to keep"


@pytest.fixture
def forgotten(tmp_path: Path) -> tuple[Path, str, Path]:
    """A ledger whose one fact was forgotten after `backup/l.db` was copied (ledger only)."""
    path = tmp_path / "l.db"
    assert cli("init", "--ledger", path).returncode == 0
    out = batch(path, [assert_line("acct:ZQX-MARKS-0001", VALUE)])
    fact = str(out[0]["result"]["fact_id"])  # type: ignore[index]
    backup = tmp_path / "backup"
    backup.mkdir()
    for name in ("l.db", "l.db-wal"):
        if (tmp_path / name).exists():
            shutil.copy2(tmp_path / name, backup / name)
    done = batch(path, [{"op": "forget", "fact_id": fact, "actor": "user:dpo",
                         "reason": "subject_request"}])
    assert done[0]["ok"] is True, done
    return path, fact, backup


def restore(path: Path, backup: Path) -> None:
    for name in ("l.db", "l.db-wal", "l.db-shm"):
        (path.parent / name).unlink(missing_ok=True)
        if (backup / name).exists():
            shutil.copy2(backup / name, path.parent / name)


def mark_seq(keystore: Path) -> int:
    con = sqlite3.connect(keystore)
    try:
        return int(con.execute("SELECT max(seq) FROM ledger_marks").fetchone()[0])
    finally:
        con.close()


def append_by_hand(path: Path, fact: str, upto: int, tmp_path: Path) -> None:
    """Correctly chained events appended to the ledger until its head reaches `upto`, by a
    process that does not have (or need) its key store."""
    con = sqlite3.connect(path)  # the ledger's record of its key store's mark, put back after
    recorded = con.execute("SELECT value FROM ledger_meta WHERE key = 'keystore_mark'").fetchall()
    with con:
        con.execute("DELETE FROM ledger_meta WHERE key = 'keystore_mark'")
    # An empty key store made by hand: no open makes a new one for a ledger holding events.
    open_keystore(tmp_path / "elsewhere.keys").close()
    with Ledger.open(path, keystore=tmp_path / "elsewhere.keys") as led:
        while (led.db.events.head() or (0,))[0] < upto:
            led.affirm(fact, actor="agent:support")
    with con:
        con.execute("DELETE FROM ledger_meta WHERE key = 'keystore_mark'")
        con.executemany("INSERT INTO ledger_meta(key, value) VALUES ('keystore_mark', ?)",
                        recorded)
    con.close()


def test_an_old_copy_with_events_appended_by_hand_is_refused_as_forked(
        forgotten: tuple[Path, str, Path], tmp_path: Path) -> None:
    path, fact, backup = forgotten
    keystore = Path(f"{path}.keys")
    upto = mark_seq(keystore)
    restore(path, backup)
    append_by_hand(path, fact, upto, tmp_path)
    done = cli("history", fact, "--ledger", path)
    assert done.returncode == 3 and "ledger_forked" in done.stderr, done.stdout + done.stderr
    assert VALUE not in done.stdout
    verified = cli("verify", "--ledger", path, "--key", f"{path}.pub")
    assert verified.returncode != 0 and "ledger_forked" in verified.stderr, verified.stdout
    report = json.loads(cli("doctor", "--ledger", path, "--json").stdout)
    integrity = [c for c in report["checks"] if c["name"] == "integrity"]
    assert integrity[0]["outcome"] == "FAIL" and "ledger_forked" in integrity[0]["detail"]
    # The attacker's open with another key store left it unbound: this ledger's own key
    # store still names the mark, and accepting a rollback does not let a fork through.
    accepted = cli("rebuild", "--ledger", path, CUSTODY_ACCEPT_ROLLBACK=str(upto))
    assert accepted.returncode == 3 and "ledger_forked" in accepted.stderr


def test_a_lower_mark_row_inserted_by_hand_is_never_trusted(
        forgotten: tuple[Path, str, Path]) -> None:
    path, fact, backup = forgotten
    keystore = Path(f"{path}.keys")
    con = sqlite3.connect(keystore)
    con.execute("INSERT INTO ledger_marks(seq, head, at, accepted) VALUES (1, ?, ?, 0)",
                ("0" * 64, "2026-01-01T00:00:00.000000Z"))
    con.commit()
    n = con.execute("SELECT max(n) FROM ledger_marks").fetchone()[0]
    con.close()
    restore(path, backup)
    done = cli("history", fact, "--ledger", path)
    assert done.returncode == 3 and "ledger_rolled_back" in done.stderr, done.stdout + done.stderr
    assert VALUE not in done.stdout
    report = json.loads(cli("doctor", "--ledger", path, "--json").stdout)
    marks = [c for c in report["checks"] if c["name"] == "ledger-marks"]
    assert marks and marks[0]["outcome"] == "FAIL", report["checks"]
    assert f"mark row {n} " in marks[0]["detail"]


def test_a_forged_mac_on_an_inserted_row_is_never_trusted(
        forgotten: tuple[Path, str, Path]) -> None:
    """Copying a valid MAC onto a lower row does not make it trusted (the MAC covers the
    row's number and fields)."""
    path, fact, backup = forgotten
    con = sqlite3.connect(Path(f"{path}.keys"))
    mac = con.execute("SELECT mac FROM ledger_marks ORDER BY n DESC LIMIT 1").fetchone()[0]
    assert mac is not None
    con.execute("INSERT INTO ledger_marks(seq, head, at, accepted, mac) VALUES (1, ?, ?, 1, ?)",
                ("0" * 64, "2026-01-01T00:00:00.000000Z", mac))
    con.commit()
    con.close()
    restore(path, backup)
    done = cli("history", fact, "--ledger", path)
    assert done.returncode == 3 and "ledger_rolled_back" in done.stderr, done.stdout + done.stderr


def test_a_refused_op_leaves_the_key_store_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    assert cli("init", "--ledger", path).returncode == 0
    out = batch(path, [assert_line("acct:ZQX-MARKS-0002", VALUE)])
    fact = str(out[0]["result"]["fact_id"])  # type: ignore[index]
    # The head moves past the last mark (no key changes), then a held fact.
    assert batch(path, [{"op": "hold", "fact_id": fact, "actor": "user:dpo",
                         "reason": "legal hold"}])[0]["ok"] is True
    keystore = Path(f"{path}.keys")
    refused = [
        # refused in the append, after the new subject's key was made inside the op
        {"op": "assert", "subject": "acct:ZQX-MARKS-0003", "predicate": "plan", "value": "v",
         "actor": "llm:gpt", "cause": {"kind": "tool", "ref": "t"}},
        {"op": "forget", "fact_id": fact, "actor": "user:dpo", "reason": "subject_request"},
        {"op": "forget_subject", "subject": "acct:ZQX-MARKS-0002", "actor": "user:dpo",
         "reason": "subject_request"},
        {"op": "assert", "subject": "acct:ZQX-MARKS-0004", "predicate": "plan", "value": "v",
         "actor": "agent:a", "cause": {"kind": "tool", "ref": "t"}, "sources": ["f_none"]},
    ]
    for op in refused:
        before = keystore.read_bytes()
        result = batch(path, [op])
        assert result[0]["ok"] is False, result
        assert keystore.read_bytes() == before, op


def test_a_write_naming_another_ledgers_key_store_is_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    for path in (a, b):
        assert cli("init", "--ledger", path).returncode == 0
    batch(b, [assert_line("acct:ZQX-B-0001", "b's value")])
    batch(a, [assert_line(f"acct:ZQX-A-{n:04d}", f"a's value {n}") for n in range(6)])
    b_keys = Path(f"{b}.keys")
    before = b_keys.read_bytes()
    done = cli("--batch", "-", "--ledger", a, "--keystore", b_keys)  # no input: opens only
    with Ledger.open(b) as led:  # b still opens: its key store was not written by a's open
        assert led.db.events.head() is not None
    assert b_keys.read_bytes() == before
    with pytest.raises(LedgerError) as refused:
        with Ledger.open(a, keystore=b_keys) as led:
            led.assert_fact("acct:ZQX-A-0099", "plan", "sealed where?", actor="agent:a",
                            cause={"kind": "tool", "ref": "t"})
    assert refused.value.code == "keystore_mismatch", refused.value
    assert b_keys.read_bytes() == before
    del done


def test_an_old_key_store_keeps_its_marks_and_refuses_rows_added_after(tmp_path: Path) -> None:
    """A key store from before authenticated marks (tests/fixtures/v5): its rows stay trusted
    up to the upgrade; a lower MAC-less row added afterwards is not, and the ledger cut back
    below the old mark is still refused."""
    from tests.conftest import fixture_copy

    path = fixture_copy(Path(__file__).parent / "fixtures" / "v5", tmp_path)
    with Ledger.open(path) as led:  # upgrades both files; the old marks stay the bar
        assert led.keys is not None
        assert led.keys.store.legacy_marks_upto() == 9
        mark, bad = led.keys.trusted_mark()
        assert mark is not None and mark[1] >= 48 and bad == []
        seq = mark[1]
    con = sqlite3.connect(Path(f"{path}.keys"))
    con.execute("INSERT INTO ledger_marks(seq, head, at, accepted) VALUES (1, ?, ?, 1)",
                ("0" * 64, "2026-03-02T00:00:00.000000Z"))
    con.commit()
    con.close()
    with Ledger.open(path, readonly=True) as led:
        assert led.keys is not None
        mark, bad = led.keys.trusted_mark()
        assert mark is not None and mark[1] == seq and [r[1] for r in bad] == [1]
    con = sqlite3.connect(path)  # the ledger cut back: its tail rows removed by hand
    con.execute("DROP TRIGGER events_append_only_delete")
    con.execute("DELETE FROM events WHERE seq > 40")
    con.commit()
    con.close()
    with pytest.raises(LedgerError) as refused:
        Ledger.open(path, readonly=True).close()
    assert refused.value.code == "ledger_rolled_back"


def test_many_inserted_rows_do_not_hide_the_trusted_mark(tmp_path: Path) -> None:
    """More forged rows than one page of the marks read: the trusted mark is still found."""
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        led.assert_fact("acct:ZQX-PAGE-0001", "plan", VALUE, actor="agent:a",
                        cause={"kind": "tool", "ref": "t"})
        assert led.keys is not None
        good, _ = led.keys.trusted_mark()
    assert good is not None
    con = sqlite3.connect(Path(f"{path}.keys"))
    con.executemany("INSERT INTO ledger_marks(seq, head, at, accepted, mac) VALUES (1, ?, ?, 1, ?)",
                    [("0" * 64, "2026-01-01T00:00:00.000000Z", "f" * 64)] * 150)
    con.commit()
    con.close()
    with Ledger.open(path, readonly=True) as led:
        assert led.keys is not None
        mark, bad = led.keys.trusted_mark()
    assert mark == good and len(bad) == 150


# -- the ledger records its key store's newest mark: rolling back the key store alone is seen --

def _file_state(path: Path) -> dict[str, bytes]:
    """The ledger's and key store's bytes (a WAL that is empty or absent holds nothing; the
    -shm index is SQLite's scratch, rebuilt by every open)."""
    return {p.name: p.read_bytes() for p in sorted(path.parent.iterdir())
            if p.is_file() and p.name.startswith(path.name) and not p.name.endswith("-shm")
            and not (p.name.endswith("-wal") and p.stat().st_size == 0)}


def _marks(keystore: Path) -> list[int]:
    con = sqlite3.connect(keystore)
    try:
        return [int(n) for (n,) in con.execute("SELECT n FROM ledger_marks ORDER BY n")]
    finally:
        con.close()


def _delete_newest_marks(keystore: Path, keep: int) -> None:
    """What anyone who can write the key store can do, no master key needed: drop the trigger,
    delete the mark rows after row `keep`, and put the trigger back so nothing shows."""
    from store.sqlite.keystore import expected_triggers

    con = sqlite3.connect(keystore)
    with con:
        con.execute("DROP TRIGGER ledger_marks_no_delete")
        con.execute("DELETE FROM ledger_marks WHERE n > ?", (keep,))
        con.execute(expected_triggers()["ledger_marks_no_delete"])
    con.close()


def test_deleting_the_key_stores_newest_marks_is_refused(
        forgotten: tuple[Path, str, Path]) -> None:
    """Someone who can write the key store deleted its newest marks (the forget's among them),
    lowering the bar an older copy of the ledger must pass: nothing noticed. The ledger now
    records the newest mark row it saw committed; every command refuses the key store
    (`keystore_rolled_back`, naming both rows), leaving both files byte for byte."""
    path, fact, _backup = forgotten
    keystore = Path(f"{path}.keys")
    # Any later write records the newest mark (the forget's) in the ledger.
    assert batch(path, [assert_line("acct:ZQX-MARKS-0005", "later")])[0]["ok"] is True
    newest = _marks(keystore)[-1]
    assert newest > 1
    _delete_newest_marks(keystore, keep=1)
    before = _file_state(path)
    for args in (["history", fact], ["verify"], ["doctor"]):
        done = cli(*args, "--ledger", path)
        assert done.returncode != 0, (args, done.stdout)
        said = done.stderr + done.stdout
        assert "keystore_rolled_back" in said, (args, said)
        assert f"mark row {newest}" in said and "mark is row 1" in said, said
    assert batch(path, [assert_line("acct:x", "v")]) == []
    with pytest.raises(LedgerError) as refused:
        Ledger.open(path).close()
    assert refused.value.code == "keystore_rolled_back"
    assert refused.value.details == {"ledger_mark": newest, "keystore_mark": 1}
    assert _file_state(path) == before


def test_a_key_store_put_back_from_an_older_copy_is_refused(tmp_path: Path) -> None:
    """The key store alone restored from a copy taken before a forget: refused."""
    path = tmp_path / "l.db"
    assert cli("init", "--ledger", path).returncode == 0
    out = batch(path, [assert_line("acct:ZQX-MARKS-0002", VALUE)])
    fact = str(out[0]["result"]["fact_id"])  # type: ignore[index]
    old = tmp_path / "old.keys"
    shutil.copy2(f"{path}.keys", old)
    done = batch(path, [{"op": "forget", "fact_id": fact, "actor": "user:dpo",
                         "reason": "subject_request"}, assert_line("acct:ZQX-MARKS-0006", "x")])
    assert [d["ok"] for d in done] == [True, True], done
    shutil.copy2(old, f"{path}.keys")
    before = _file_state(path)
    with pytest.raises(LedgerError) as refused:
        Ledger.open(path, readonly=True).close()
    assert refused.value.code == "keystore_rolled_back", refused.value.message
    assert _file_state(path) == before


def test_the_newest_mark_is_recorded_by_the_next_write_and_a_refused_op_records_nothing(
        tmp_path: Path) -> None:
    """A mark is written after its write commits; the ledger records it inside its next write
    transaction (a ledger from before marks were recorded in it, too), and a refused op
    records nothing."""
    path = tmp_path / "l.db"
    assert cli("init", "--ledger", path).returncode == 0
    batch(path, [assert_line("acct:ZQX-MARKS-0003", VALUE)])
    con = sqlite3.connect(path)
    with con:
        con.execute("DELETE FROM ledger_meta WHERE key = 'keystore_mark'")
    con.close()
    newest = _marks(Path(f"{path}.keys"))[-1]
    with Ledger.open(path) as led:
        assert led.db.meta("keystore_mark") is None
        before = _file_state(path)
        with pytest.raises(LedgerError):
            led.forget("f_nope", actor="user:dpo", reason="subject_request")
        assert led.db.meta("keystore_mark") is None and _file_state(path) == before
        led.assert_fact("acct:ZQX-MARKS-0003", "note", "x", actor="user:ana",
                        cause={"kind": "manual", "ref": "t"})
        assert str(led.db.meta("keystore_mark")).startswith(f"{newest}:")
        assert led.verify().valid


def test_dropped_key_store_triggers_refuse_writes_and_verify_names_them(tmp_path: Path) -> None:
    """Without its write-once triggers a key store's marks and keys can be deleted or
    overwritten with no master key: a read-write open refuses it (`keystore_tampered`, naming
    the triggers) leaving both files byte for byte, and verify names it."""
    path = tmp_path / "l.db"
    assert cli("init", "--ledger", path).returncode == 0
    batch(path, [assert_line("acct:ZQX-MARKS-0004", VALUE)])
    con = sqlite3.connect(Path(f"{path}.keys"))
    with con:
        con.execute("DROP TRIGGER ledger_marks_no_delete")
        con.execute("DROP TRIGGER subject_keys_no_delete")
    con.close()
    before = _file_state(path)
    with pytest.raises(LedgerError) as refused:
        Ledger.open(path).close()
    assert refused.value.code == "keystore_tampered"
    assert "ledger_marks_no_delete" in refused.value.message
    assert "subject_keys_no_delete" in refused.value.message
    done = batch(path, [assert_line("acct:y", "v")])
    assert done == [], done
    assert _file_state(path) == before
    with Ledger.open(path, readonly=True) as led:
        report = led.verify()
    assert not report.valid and "(keystore_tampered)" in (report.problem or "")
    assert "ledger_marks_no_delete" in (report.problem or "")
