"""Issue 34: forgetting one fact of a subject that lives on leaves no key that opens the
fact's old ciphertext. A copy taken before the forget (the SQLite files; a `pg_dump` of the
server's database) holds the erased value and free text sealed under the subject's key; after
the forget the subject is re-keyed, and no key the current key store holds (every row
unwrapped with the master key) opens either. On both backends."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from custody_app.domain.errors import LedgerError
from custody_app.erasure import rekey
from custody_app.keys import crypto
from custody_app.keys.keyring import public_key_path_for, write_public_key
from custody_app.keys.values import text_bind
from tests.conftest import BACKENDS, WRITER, Env, opens, sealed

SUBJECT = "acct:REKEY-SUBJECT-01"
SECRET = "ZQX-REKEY-SECRET-VALUE-0001"
FREE_TEXT = "ZQX-REKEY-FREE-TEXT-DETAIL-0001"
ROOT = Path(__file__).resolve().parent.parent

on_both = pytest.mark.parametrize("backend", BACKENDS, indirect=True)


def put(env: Env, predicate: str, value: Any, *, subject: str = SUBJECT,
        detail: str | None = None) -> str:
    cause: dict[str, Any] = {"kind": "message", "ref": "msg-1"}
    if detail is not None:
        cause["detail"] = detail
    return env.ledger.assert_fact(subject, predicate, value, actor=WRITER, cause=cause,
                                  provenance="attested").fact_id


def texts_of(env: Env, fact_id: str) -> list[bytes]:
    return [bytes(b) for _, b in env.ledger.db.texts.of_fact(fact_id) if b is not None]


def copy_before(env: Env, backend: str, into: Path) -> bytes:
    """A copy of the whole ledger taken now: the raw bytes a backup holds (SQLite: the ledger
    and key store files, WAL included; the server: `pg_dump` through the server's binaries)."""
    if backend == "sqlite":
        out = b""
        for suffix in ("", "-wal", ".keys", ".keys.master"):
            name = Path(f"{env.path}{suffix}")
            if name.exists():
                shutil.copy2(name, into / f"copy{suffix}")
                out += (into / f"copy{suffix}").read_bytes()
        return out
    from tests import pgserver

    return pgserver.plain_dump(str(env.path), into)


def in_copy(copy: bytes, blob: bytes, backend: str) -> bool:
    """The copy holds the blob (pg_dump writes bytea as hex)."""
    return blob in copy if backend == "sqlite" else blob.hex().encode() in copy


def every_current_key(env: Env) -> list[bytes]:
    """Every key the key store holds now: each subject key row and each named entry,
    unwrapped with the master key (whatever wraps under it)."""
    keys = env.ledger.keys
    assert keys is not None
    master = bytes.fromhex(keys.master_file.read_text().strip())
    found: list[bytes] = []
    for batch in keys.store.copy_rows("subject_keys", ["subject_ref", "generation", "wrapped"]):
        for ref, generation, wrapped in batch:
            if wrapped is not None:
                found.append(crypto.unwrap(master, bytes(wrapped), f"data:{ref}:{generation}"))
    for batch in keys.store.copy_rows("keystore_meta", ["name", "value"]):
        for name, value in batch:
            try:
                found.append(crypto.unwrap(master, bytes(value), str(name)))
            except crypto.DecryptError:
                pass  # not a wrapped key (a mark count, the ledger's genesis hash)
    return found


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "custody_app", *args], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ}, check=False)


@on_both
def test_a_copy_taken_before_a_forget_opens_with_no_remaining_key(
        ledger_at: Callable[[str], Any], backend: str, tmp_path: Path) -> None:
    env = Env(ledger_at("ledger.db"))
    try:
        gone = put(env, "plan", SECRET, detail=FREE_TEXT)
        kept = {put(env, f"p{n}", f"kept value {n}", detail=f"kept detail {n}"): f"kept value {n}"
                for n in range(3)}
        other = put(env, "plan", "another subject's value", subject="acct:REKEY-OTHER-02")
        value_blob, text_blobs = sealed(env.ledger, gone), texts_of(env, gone)
        assert text_blobs
        keys_before = every_current_key(env)
        # The attack works on the copy before the forget: the subject's live key opens it.
        assert opens(keys_before, value_blob, gone)
        assert all(opens(keys_before, b, text_bind(gone)) for b in text_blobs)

        copy = copy_before(env, backend, tmp_path)
        assert in_copy(copy, value_blob, backend)
        assert all(in_copy(copy, b, backend) for b in text_blobs)

        result = env.ledger.forget(gone, actor="user:dpo", reason="subject_request")
        # Done: the old generation destroyed, the intent gone with the pending rows.
        assert not rekey.unfinished(env.ledger)
        assert env.ledger.db.meta(rekey.PENDING) is None
        env.reopen()  # the key store as a later reader finds it

        current = every_current_key(env)
        assert not opens(current, value_blob, gone)
        assert not [b for b in text_blobs if opens(current, b, text_bind(gone))]

        # The subject's other facts (values and free text) still read back, under generation 2.
        believed = {f.fact_id: f.value for f in env.ledger.as_of(subject=SUBJECT).facts}
        assert believed == kept
        for fact_id in kept:
            assert crypto.sealed_generation(sealed(env.ledger, fact_id)) == 2
            assert all(crypto.sealed_generation(b) == 2 for b in texts_of(env, fact_id))
            assert env.ledger.history(fact_id).status == "active"
        assert crypto.sealed_generation(sealed(env.ledger, other)) == 1
        [place] = [p for p in result.certificate.places if p.place.startswith("key store")]
        assert place.outcome == "clean"
        assert ("key generation 1 destroyed (1 generation(s) in all), 3 value(s) and 3 free "
                "text(s) re-sealed under generation 2") in place.detail
        assert "kept" not in place.detail
        assert env.ledger.verify().valid
        second = next(iter(kept))
        env.ledger.forget(second, actor="user:dpo", reason="error")
        # Each erasure's proof finished (a server's own places too: its epoch's place is
        # settled by rotate-epoch, not by the pending rows), so no re-key intent is left.
        assert env.ledger.db.meta(rekey.PENDING) is None

        env.ledger.checkpoint()  # a signed checkpoint, for `verify --key` to check
        pub = public_key_path_for(env.path)
        if not pub.exists():
            assert env.ledger.keys is not None
            write_public_key(env.path, env.ledger.keys.public_pem())
        address = str(env.path)
    finally:
        env.ledger.close()
    done = cli("verify", "--ledger", address, "--key", str(pub))
    assert done.returncode == 0, done.stdout + done.stderr


@on_both
def test_work_begun_before_a_forget_still_writes_for_the_subject(
        ledger_at: Callable[[str], Any]) -> None:
    """A retired generation is no erasure of the subject: it fences no work (forget_subject's
    destruction still does, tests/test_key_fence.py)."""
    env = Env(ledger_at("ledger.db"))
    try:
        first = put(env, "plan", "first value")
        put(env, "tier", "second value")
        env.ledger.forget(first, actor="user:dpo", reason="error")
        later = put(env, "region", "written by work begun before the forget")
        assert env.ledger.history(later).status == "active"
        assert crypto.sealed_generation(sealed(env.ledger, later)) == 2
    finally:
        env.ledger.close()


@on_both
def test_a_forgotten_value_written_again_is_still_recognised_after_re_keys(
        ledger_at: Callable[[str], Any]) -> None:
    """The digest key that recognises a forgotten value is kept across re-keys."""
    env = Env(ledger_at("ledger.db"))
    try:
        first = put(env, "plan", SECRET)
        second = put(env, "tier", "gold")
        put(env, "region", "eu")
        env.ledger.forget(first, actor="user:dpo", reason="error")
        env.ledger.forget(second, actor="user:dpo", reason="error")  # a second re-key
        again = put(env, "plan", SECRET)
        assert env.ledger.history(again).status == "quarantined"
        assert env.ledger.verify().valid
    finally:
        env.ledger.close()


@on_both
def test_a_sweep_re_keys_each_subject_once(ledger_at: Callable[[str], Any]) -> None:
    env = Env(ledger_at("ledger.db"))
    try:
        old = [put(env, f"old{n}", f"old value {n}") for n in range(3)]
        env.at("2026-09-10T00:00:00.000000Z")
        stays = put(env, "new", "a value the sweep leaves")
        result = env.ledger.sweep(before="2026-09-05T00:00:00.000000Z", actor="user:dpo",
                                  reason="retention")
        assert sorted(result.expired) == sorted(old)
        assert result.certificate is not None
        [place] = [p for p in result.certificate.places if p.place.startswith("key store")]
        assert "1 value(s) and 1 free text(s) re-sealed under generation 2" in place.detail
        assert crypto.sealed_generation(sealed(env.ledger, stays)) == 2
        assert env.ledger.verify().valid
    finally:
        env.ledger.close()


def _forge(env: Env, backend: str, sql: str, params: tuple[Any, ...]) -> None:
    db = env.ledger.db
    with db.write():
        if backend == "sqlite":
            db.conn.execute(sql, params)
        else:
            db.conn.execute(sql.replace("?", "%s"), params)


@on_both
def test_the_update_rules_allow_exactly_a_re_seal(ledger_at: Callable[[str], Any],
                                                  backend: str) -> None:
    """Only a non-null sealed blob replaced by one of a higher generation, the rest of the
    row untouched; anything else is refused by the database itself."""
    env = Env(ledger_at("ledger.db"))
    try:
        fact = put(env, "plan", "a value", detail="a detail")
        put(env, "tier", "another")
        erased = put(env, "note", "erased first")
        env.ledger.forget(erased, actor="user:dpo", reason="error")
        erased_seq = env.ledger.db.facts.get(erased).assert_seq  # type: ignore[union-attr]
        seq = env.ledger.db.facts.get(fact).assert_seq  # type: ignore[union-attr]
        blob = sealed(env.ledger, fact)
        [(text_seq, text_blob)] = [(s, b) for s, b in env.ledger.db.texts.of_fact(fact)]
        assert text_blob is not None
        key = crypto.new_key()
        # The forget above re-keyed the subject: the fact is under generation 2 now.
        same_gen = crypto.seal(key, 2, b'"a value"', fact)
        higher = crypto.seal(key, 3, b'"a value"', fact)
        lower_than_3 = crypto.seal(key, 2, b'"x"', fact)
        event = env.ledger.db.events.get(seq)
        assert event is not None
        refused = [
            ("UPDATE events SET value = ? WHERE seq = ?", (same_gen, seq)),
            ("UPDATE events SET value = ? WHERE seq = ?", (b"CV2" + higher[3:], seq)),
            ("UPDATE events SET value = ? WHERE seq = ?", (higher[:20], seq)),
            ("UPDATE events SET value = ?, body = ? WHERE seq = ?",
             (higher, event.body.replace('"plan"', '"PLAN"'), seq)),
            ("UPDATE events SET value = ?, salt = ? WHERE seq = ?", (higher, "00" * 16, seq)),
            ("UPDATE event_texts SET sealed = ? WHERE seq = ?",
             (crypto.seal(key, 2, b"{}", text_bind(fact)), text_seq)),
            ("UPDATE event_texts SET sealed = ?, fact_id = ? WHERE seq = ?",
             (crypto.seal(key, 3, b"{}", text_bind(fact)), "another-fact", text_seq)),
            ("UPDATE event_texts SET sealed = ?, salt = ? WHERE seq = ?",
             (crypto.seal(key, 3, b"{}", text_bind(fact)), "00" * 16, text_seq)),
        ]
        for sql, params in refused:
            with pytest.raises(Exception, match="custody:|refused"):
                _forge(env, backend, sql, params)
        assert sealed(env.ledger, fact) == blob
        # The re-seal itself passes the rules (a higher generation, nothing else changed)...
        _forge(env, backend, "UPDATE events SET value = ? WHERE seq = ?", (higher, seq))
        # ...and one to a lower generation than the row now holds does not.
        with pytest.raises(Exception, match="custody:|refused"):
            _forge(env, backend, "UPDATE events SET value = ? WHERE seq = ?",
                   (lower_than_3, seq))
        # An erased value cannot come back through a re-seal.
        with pytest.raises(Exception, match="custody:|refused"):
            _forge(env, backend, "UPDATE events SET value = ? WHERE seq = ?",
                   (crypto.seal(key, 9, b'"erased first"', erased), erased_seq))
    finally:
        env.ledger.close()


@on_both
def test_verify_catches_a_swapped_or_edited_ciphertext_the_rules_let_through(
        ledger_at: Callable[[str], Any], backend: str) -> None:
    """A blob of a higher generation passes the update rules, but verify still opens it and
    checks it against the commitment the chain holds."""
    env = Env(ledger_at("ledger.db"))
    try:
        fact = put(env, "plan", "the real value")
        neighbour = put(env, "tier", "the neighbour's value")
        put(env, "region", "eu")
        env.ledger.forget(put(env, "note", "forgotten"), actor="user:dpo", reason="error")
        keys = env.ledger.keys
        assert keys is not None
        ref = keys.subject_ref(SUBJECT)
        seq = env.ledger.db.facts.get(fact).assert_seq  # type: ignore[union-attr]
        assert crypto.sealed_generation(sealed(env.ledger, fact)) == 2
        # One who holds the master key mints generation 3 and seals another value under it
        # for this fact: the rules let a higher generation in; the commitment does not.
        generation = keys.rekey_begin(ref, "2026-09-02T00:00:00.000000Z")
        assert generation == 3
        real_key = keys.key_for_read(ref, 3)
        assert real_key is not None
        _forge(env, backend, "UPDATE events SET value = ? WHERE seq = ?",
               (crypto.seal(real_key, 3, b'"a forged value"', fact), seq))
        report = env.ledger.verify()
        assert not report.valid and report.first_bad_seq == seq, report.problem
        # A generation the key store never held: refused to read, and caught.
        _forge(env, backend, "UPDATE events SET value = ? WHERE seq = ?",
               (crypto.seal(crypto.new_key(), 9, b'"the real value"', fact), seq))
        report = env.ledger.verify()
        assert not report.valid and report.first_bad_seq == seq, report.problem
        # The neighbour's ciphertext moved onto this row (its header raised): caught.
        moved = sealed(env.ledger, neighbour)
        _forge(env, backend, "UPDATE events SET value = ? WHERE seq = ?",
               (moved[:3] + (10).to_bytes(4, "big") + moved[7:], seq))
        report = env.ledger.verify()
        assert not report.valid and report.first_bad_seq == seq, report.problem
    finally:
        env.ledger.close()


def test_the_old_generation_cannot_be_read_from_the_key_store_file(tmp_path: Path) -> None:
    """SQLite: the retired generation's wrapped key leaves the key store file's bytes too."""
    env = Env(tmp_path / "ledger.db")
    try:
        gone = put(env, "plan", SECRET)
        put(env, "tier", "stays")
        keys = env.ledger.keys
        assert keys is not None
        ref = keys.subject_ref(SUBJECT)
        row = keys.store.generation(ref, 1)
        assert row is not None and row[1] is not None
        wrapped = bytes(row[1])
        env.ledger.forget(gone, actor="user:dpo", reason="error")
    finally:
        env.ledger.close()
    data = b"".join(Path(f"{tmp_path / 'ledger.db'}.keys{s}").read_bytes()
                    for s in ("", "-journal") if Path(f"{tmp_path / 'ledger.db'}.keys{s}").exists())
    assert wrapped not in data
    con = sqlite3.connect(f"{tmp_path / 'ledger.db'}.keys")
    try:
        rows = con.execute("SELECT generation, wrapped IS NULL FROM subject_keys "
                           "WHERE subject_ref = ? ORDER BY generation", (ref,)).fetchall()
    finally:
        con.close()
    assert rows == [(1, 1), (2, 0)]


def test_a_refused_forget_mints_nothing(tmp_path: Path) -> None:
    env = Env(tmp_path / "ledger.db")
    try:
        fact = put(env, "plan", "held value")
        put(env, "tier", "other")
        env.ledger.hold(fact, actor="user:legal", reason="litigation")
        with pytest.raises(LedgerError):
            env.ledger.forget(fact, actor="user:dpo", reason="error")
        keys = env.ledger.keys
        assert keys is not None
        latest = keys.store.latest(keys.subject_ref(SUBJECT))
        assert latest is not None and latest[0] == 1
    finally:
        env.ledger.close()


# A child that forgets one fact of a server ledger and is killed at $CUSTODY_FAULT's point.
CHILD = """
import sys
from custody_app.ledger.facade import Ledger
with Ledger.open(sys.argv[1]) as led:
    led.forget(sys.argv[2], actor="user:dpo", reason="error")
"""
COMMITTED = {"erasure.ledger_committed": True, "rekey.keys_retired": True,
             "erasure.before_commit": False, "tx.keys_committed": False}


@pytest.mark.parametrize("point", sorted(COMMITTED))
def test_a_kill_in_a_server_forget_is_completed_at_the_next_open(pg_url: str,
                                                                 point: str) -> None:
    """The crash trials of tests/erasure_crash.py run on SQLite files; here the server: a
    kill at each commit boundary of a forget leaves the whole re-key or none of it once the
    next read-write open has run, every value readable, and no old generation alive."""
    env = Env(pg_url)
    try:
        gone = put(env, "plan", SECRET, detail=FREE_TEXT)
        kept = {put(env, f"p{n}", f"kept value {n}"): f"kept value {n}" for n in range(2)}
        blob = sealed(env.ledger, gone)
    finally:
        env.ledger.close()
    child = subprocess.run([sys.executable, "-c", CHILD, pg_url, gone], cwd=ROOT,
                           env={**os.environ, "CUSTODY_FAULT": point}, capture_output=True,
                           text=True, check=False)
    assert child.returncode == -9, child.stderr[-2000:]
    env = Env(pg_url)  # the next read-write open rolls forward
    try:
        assert not rekey.unfinished(env.ledger)
        committed = COMMITTED[point]
        assert env.ledger.history(gone).status == ("forgotten" if committed else "active")
        believed = {f.fact_id: f.value for f in env.ledger.as_of(subject=SUBJECT).facts}
        assert believed == {**kept, **({} if committed else {gone: SECRET})}
        assert opens(every_current_key(env), blob, gone) is not committed
        keys = env.ledger.keys
        assert keys is not None
        ref = keys.subject_ref(SUBJECT)
        latest = keys.store.latest(ref)
        assert latest is not None
        live = [g for g in range(1, latest[0] + 1)
                if (row := keys.store.generation(ref, g)) is not None and row[1] is not None]
        assert live == ([2] if committed else [1, 2] if point == "tx.keys_committed" else [1])
        assert env.ledger.verify().valid
    finally:
        env.ledger.close()


def test_doctor_names_a_re_key_cut_short_and_the_next_open_completes_it(tmp_path: Path) -> None:
    env = Env(tmp_path / "ledger.db")
    try:
        gone = put(env, "plan", SECRET)
        put(env, "tier", "stays")
    finally:
        env.ledger.close()
    child = subprocess.run([sys.executable, "-c", CHILD, str(env.path), gone], cwd=ROOT,
                           env={**os.environ, "CUSTODY_FAULT": "erasure.ledger_committed"},
                           capture_output=True, text=True, check=False)
    assert child.returncode == -9, child.stderr[-2000:]
    done = cli("doctor", "--ledger", str(env.path))
    assert "re-keyed subject(s)" in done.stdout + done.stderr, done.stdout + done.stderr
    env = Env(tmp_path / "ledger.db")  # the read-write open completes it
    try:
        assert not rekey.unfinished(env.ledger)
    finally:
        env.ledger.close()
    done = cli("doctor", "--ledger", str(env.path))
    assert "re-keyed subject(s)" not in done.stdout + done.stderr


def test_a_schema_9_ledger_upgrades_and_re_keys(tmp_path: Path) -> None:
    """SQLite schema step 10 replaces the update rules of an existing file (here the schema-5
    fixture, tests/fixtures/v5, upgraded on open): its forgets re-key."""
    from tests.conftest import fixture_copy

    path = fixture_copy(ROOT / "tests" / "fixtures" / "v5", tmp_path)
    env = Env(path)
    try:
        led = env.ledger
        facts = [f for f in led.as_of(include="claimed").facts if f.value is not None]
        by_subject: dict[str, list[str]] = {}
        for fact in facts:
            by_subject.setdefault(fact.subject, []).append(fact.fact_id)
        subject, ids = next((s, i) for s, i in sorted(by_subject.items()) if len(i) >= 2)
        before = {f: sealed(led, f) for f in ids}
        led.forget(ids[0], actor="user:dpo", reason="error")
        keys = led.keys
        assert keys is not None
        old = crypto.sealed_generation(before[ids[1]])
        assert keys.key_for_read(keys.subject_ref(subject), old) is None
        assert crypto.sealed_generation(sealed(led, ids[1])) > old
        assert led.verify().valid
    finally:
        env.ledger.close()


# The server's update rule of events before the re-seal step (what a ledger made by the code before
# issue 34 holds), and its free-text rule.
OLD_EVENTS_RULE = """CREATE OR REPLACE FUNCTION events_erase_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (OLD.kind = 'assert' AND (NEW.value IS NULL OR NEW.value IS NOT DISTINCT FROM OLD.value)
        AND NEW.body IS NOT DISTINCT FROM OLD.body) THEN
        RAISE EXCEPTION 'custody: events are append-only; only erasure may null parts of an assert'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$"""
OLD_TEXTS_RULE = """CREATE TRIGGER event_texts_erase_only BEFORE UPDATE ON event_texts FOR EACH ROW
WHEN (NOT (NEW.sealed IS NULL AND NEW.salt IS NULL AND NEW.seq IS NOT DISTINCT FROM OLD.seq))
EXECUTE FUNCTION custody_refuse('sealed free text can only be erased')"""


def test_a_server_ledger_before_the_re_seal_step_upgrades_and_re_keys(pg_url: str) -> None:
    from store.postgres.schema import MIGRATIONS, run_migration_reseal

    env = Env(pg_url)
    try:
        gone = put(env, "plan", SECRET, detail=FREE_TEXT)
        stays = put(env, "tier", "stays", detail="a detail that stays")
        db = env.ledger.db
        with db.write():
            db.conn.execute(OLD_EVENTS_RULE)
            db.conn.execute("DROP TRIGGER event_texts_erase_only ON event_texts")
            db.conn.execute(OLD_TEXTS_RULE)
            # The schema just before the re-seal step (the steps after it run again: each
            # meets a schema that has it already).
            db.conn.execute("UPDATE schema_version SET version = %s",
                            (MIGRATIONS.index(run_migration_reseal),))
    finally:
        env.ledger.close()
    env = Env(pg_url)  # opening runs the re-seal step
    try:
        env.ledger.forget(gone, actor="user:dpo", reason="error")
        assert crypto.sealed_generation(sealed(env.ledger, stays)) == 2
        assert all(crypto.sealed_generation(b) == 2 for b in texts_of(env, stays))
        assert env.ledger.verify().valid
    finally:
        env.ledger.close()
