"""The store contract on a real file: pragmas, refusals, triggers, tamper detection, policy, rebuild."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from custody_app.domain.errors import LedgerError, PolicyError
from custody_app.domain.policy import load_policy
from custody_app.ledger.facade import Ledger
from store import LedgerTooNew, NotALedger, open_ledger
from store.rows import EVENT_COLUMNS
from store.sqlite.schema import APPLICATION_ID, SCHEMA_VERSION
from tests.conftest import REVIEWER, WRITER, Env, day
from tests.reliability import MARK_REFUSALS, markless_keystore, verify_or_refusal


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A hand-written stdlib sqlite3 session, as any user with the file could open."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        yield conn


def drop_triggers(conn: sqlite3.Connection) -> None:
    conn.execute("DROP TRIGGER events_append_only_update")
    conn.execute("DROP TRIGGER events_append_only_delete")


def populated(env: Env) -> dict[str, str]:
    """policy(1) assert(2) assert(3) confirm(4) retract(5) assert(6)."""
    a = env.put("acct:1", "plan", "basic")
    b = env.put("acct:1", "email", "a@example.org", provenance="claimed")
    env.at(day(2))
    env.ledger.confirm(b, actor=REVIEWER)
    env.ledger.retract(a, actor=WRITER, reason="wrong account")
    c = env.put("acct:2", "plan", {"name": "pro"})
    assert [e.kind for e in env.ledger.events()] == [
        "policy", "assert", "assert", "confirm", "retract", "assert"]
    return {"a": a, "b": b, "c": c}


# ---- open_ledger ------------------------------------------------------------------------

def test_open_ledger_sets_every_pragma(tmp_path: Path) -> None:
    db = open_ledger(tmp_path / "l.db")
    try:
        conn = db.conn
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA secure_delete").fetchone()[0] == 1
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA temp_store").fetchone()[0] == 2  # MEMORY
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
        recorded = db.meta("sqlite_vec_version")
        assert recorded and recorded == db.sqlite_vec_version
    finally:
        db.close()
    # The file itself carries the ledger's identity and mode for any other reader.
    with raw(tmp_path / "l.db") as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_ledger_connection_has_secure_delete_on(env: Env) -> None:
    assert env.ledger.db.conn.execute("PRAGMA secure_delete").fetchone()[0] == 1
    # Secure delete is per connection: a reopened ledger sets it again.
    assert env.reopen().db.conn.execute("PRAGMA secure_delete").fetchone()[0] == 1


def test_reopening_a_current_ledger_changes_nothing(env: Env) -> None:
    populated(env)
    before = env.snapshot()
    assert env.reopen().db.meta("sqlite_vec_version")
    assert env.snapshot() == before


def test_file_from_a_newer_custody_app_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    open_ledger(path).close()
    with raw(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(LedgerTooNew):
        open_ledger(path)
    with pytest.raises(LedgerError) as info:
        Ledger.open(path)
    assert info.value.code == "ledger_too_new"
    with raw(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1


def test_sqlite_file_that_is_not_a_ledger_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with raw(path) as conn:
        conn.execute("CREATE TABLE notes(body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    before = path.read_bytes()
    with pytest.raises(NotALedger):
        open_ledger(path)
    with pytest.raises(LedgerError) as info:
        Ledger.open(path)
    assert info.value.code == "not_a_ledger"
    assert str(path) in info.value.message
    # Refusing a file must not convert it (e.g. to WAL mode) or write to it.
    assert path.read_bytes() == before
    with raw(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_sqlite_file_with_another_application_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with raw(path) as conn:
        conn.execute("PRAGMA application_id = 1234")
    with pytest.raises(LedgerError) as info:
        Ledger.open(path)
    assert info.value.code == "not_a_ledger"


def test_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    before = path.read_bytes()
    with pytest.raises(NotALedger):
        open_ledger(path)
    with pytest.raises(LedgerError) as info:
        Ledger.open(path)
    assert info.value.code == "not_a_ledger"
    assert path.read_bytes() == before


# ---- triggers against a hand-written session --------------------------------------------

def test_raw_session_cannot_delete_an_event(env: Env) -> None:
    populated(env)
    env.ledger.close()
    with raw(env.path) as conn:
        for seq in (1, 2, 4, 6):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute("DELETE FROM events WHERE seq = ?", (seq,))
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM events")
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 6


NEW_VALUES: dict[str, Any] = {
    "seq": 1000, "kind": "retract", "tx_at": "2000-01-01T00:00:00.000000Z", "actor": "user:evil",
    "policy_hash": "0" * 64, "fact_id": "f_other", "subject": "acct:evil", "body": "{}",
    "value": '"evil"',
    "salt": "00" * 16, "prev_hash": "1" * 64, "hash": "2" * 64,
}


def reverify(env: Env) -> Any:
    """verify after an edit: the key store's marks may refuse the ledger first (an edit at or
    below the mark's event, DESIGN 14), naming that event; verify (through a markless copy of
    the key store) still locates the edit."""
    report, refused = verify_or_refusal(env.path)
    if refused is not None:
        assert refused in MARK_REFUSALS
    env.ledger = Ledger.open(env.path, readonly=True, keystore=markless_keystore(env.path))
    return report


@pytest.mark.parametrize("column", EVENT_COLUMNS)
@pytest.mark.parametrize("seq", [1, 2, 4])
def test_raw_session_cannot_update_any_column(env: Env, column: str, seq: int) -> None:
    populated(env)
    env.ledger.close()
    with raw(env.path) as conn:
        before = conn.execute("SELECT * FROM events WHERE seq = ?", (seq,)).fetchone()
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(f"UPDATE events SET {column} = ? WHERE seq = ?",
                         (NEW_VALUES[column], seq))
        if column in ("value", "salt"):
            # Nulling just one of the pair is not an erasure either.
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute(f"UPDATE events SET {column} = NULL WHERE seq = ?", (seq,))
        assert conn.execute("SELECT * FROM events WHERE seq = ?", (seq,)).fetchone() == before


def test_raw_session_cannot_null_a_non_assert(env: Env) -> None:
    populated(env)
    env.ledger.close()
    with raw(env.path) as conn:
        for seq in (1, 4, 5):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute("UPDATE events SET value = NULL, salt = NULL WHERE seq = ?", (seq,))


def test_raw_session_can_null_an_asserts_value_and_salt_together(env: Env) -> None:
    ids = populated(env)
    env.ledger.close()
    with raw(env.path) as conn:
        conn.execute("UPDATE events SET value = NULL, salt = NULL WHERE seq = 6")
        assert conn.execute("SELECT value, salt FROM events WHERE seq = 6").fetchone() == (
            None, None)
    ledger = env.reopen()
    # The triggers allow it (erasure nulls both), but no forget or expire event says why:
    # verify names the assert (DESIGN 13).
    report = ledger.verify()
    assert (report.valid, report.events, report.first_bad_seq) == (False, 6, 6)
    assert "no forget or expire event" in (report.problem or "")
    [fact] = ledger.as_of(subject="acct:2").facts
    assert (fact.fact_id, fact.value, fact.erased) == (ids["c"], None, True)
    assert ledger.why(ids["c"]).events_verified is True


# ---- verify catches tampering -----------------------------------------------------------

def tamper_value(column: str, old: Any) -> Any:
    """The stored value with one byte changed (or a value where there was none)."""
    if column == "seq":
        return old + 1000
    if old is None:
        return "x"
    text = str(old)
    i = len(text) // 2
    return text[:i] + ("0" if text[i] != "0" else "1") + text[i + 1:]


@pytest.mark.parametrize("column", EVENT_COLUMNS)
@pytest.mark.parametrize("seq", [1, 3, 4, 6])
def test_verify_catches_a_changed_byte_in_any_column(env: Env, column: str, seq: int) -> None:
    populated(env)
    assert env.ledger.verify().valid
    env.ledger.close()
    with raw(env.path) as conn:
        drop_triggers(conn)
        old = conn.execute(f"SELECT {column} FROM events WHERE seq = ?", (seq,)).fetchone()[0]
        conn.execute(f"UPDATE events SET {column} = ? WHERE seq = ?",
                     (tamper_value(column, old), seq))
    report = reverify(env)
    assert report.valid is False
    assert report.first_bad_seq == seq, report.problem
    assert report.problem


def test_verify_catches_a_deleted_middle_event(env: Env) -> None:
    populated(env)
    env.ledger.close()
    with raw(env.path) as conn:
        drop_triggers(conn)
        conn.execute("DELETE FROM events WHERE seq = 3")
    report = env.reopen().verify()
    assert (report.valid, report.first_bad_seq, report.events) == (False, 3, 2)


def test_verify_catches_a_deleted_last_event_only_with_a_known_head(env: Env) -> None:
    # Cutting the tail leaves a valid shorter chain: only a remembered head (or a signed
    # checkpoint) shows it. The report's head makes that comparison possible.
    populated(env)
    head = env.ledger.verify().head
    env.ledger.close()
    with raw(env.path) as conn:
        drop_triggers(conn)
        conn.execute("DELETE FROM events WHERE seq = 6")
    # The key store remembers the ledger reached event 6 (its write minted a key): the cut
    # file is refused at open (issue 13) instead of verifying as a shorter chain.
    with pytest.raises(LedgerError) as info:
        env.reopen()
    assert info.value.code == "ledger_rolled_back" and info.value.details["mark_seq"] == 6
    assert head is not None


@pytest.mark.parametrize("pair", [(2, 3), (3, 4), (5, 6)])
def test_verify_catches_a_swapped_pair_of_events(env: Env, pair: tuple[int, int]) -> None:
    populated(env)
    env.ledger.close()
    first, second = pair
    cols = [c for c in EVENT_COLUMNS if c != "seq"]
    with raw(env.path) as conn:
        drop_triggers(conn)
        rows = {s: conn.execute(f"SELECT {', '.join(cols)} FROM events WHERE seq = ?",
                                (s,)).fetchone() for s in pair}
        assignments = ", ".join(f"{c} = ?" for c in cols)
        for target, source in ((first, second), (second, first)):
            conn.execute(f"UPDATE events SET {assignments} WHERE seq = ?",
                         (*rows[source], target))
    report = reverify(env)
    assert (report.valid, report.first_bad_seq) == (False, first), report.problem


def test_why_reports_tampered_events_of_the_fact(env: Env) -> None:
    ids = populated(env)
    env.ledger.close()
    with raw(env.path) as conn:
        drop_triggers(conn)
        conn.execute("UPDATE events SET actor = 'user:evil' WHERE seq = 4")  # b's confirm
    ledger = env.reopen()
    assert ledger.why(ids["b"]).events_verified is False
    assert ledger.why(ids["c"]).events_verified is True


# ---- policy changes ---------------------------------------------------------------------

POLICY_V1 = """\
# first policy
[review]
reviewers = []
"""
POLICY_V2 = """\
# second policy: an extra reviewer
[review]
reviewers = ["agent:boss"]
"""


def policy_events(ledger: Ledger) -> list[tuple[int, str]]:
    return [(e.seq, e.policy_hash) for e in ledger.events() if e.kind == "policy"]


def test_policy_change_is_recorded_on_the_first_write_only(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY_V1)
    env = Env(tmp_path / "ledger.db", policy)
    try:
        old_hash = env.ledger.policy.hash
        old_fact = env.put("acct:1", "plan", "basic")
        env.put("acct:1", "tier", "gold")
        assert policy_events(env.ledger) == [(1, old_hash)]

        policy.write_text(POLICY_V2)
        ledger = env.reopen()
        new_hash = ledger.policy.hash
        assert new_hash != old_hash
        # Opening and reading write nothing.
        ledger.as_of()
        ledger.why(old_fact)
        ledger.history(old_fact)
        ledger.verify()
        ledger.rebuild()
        assert ledger.verify().events == 3
        ro = env.reopen(readonly=True)
        ro.as_of()
        assert ro.verify().events == 3
        with pytest.raises(LedgerError) as info:
            ro.assert_fact("acct:1", "plan", "x", actor=WRITER, cause={"kind": "manual",
                                                                      "ref": "r"})
        assert info.value.code == "read_only"

        ledger = env.reopen()
        env.at(day(2))
        new_fact = env.put("acct:1", "plan", "pro")
        events = ledger.events()
        assert [(e.seq, e.kind, e.tx_at) for e in events[3:]] == [
            (4, "policy", day(2)), (5, "assert", day(2))]
        assert policy_events(ledger) == [(1, old_hash), (4, new_hash)]
        assert [e.policy_hash for e in events] == [old_hash] * 3 + [new_hash] * 2
        assert ledger.verify().valid

        old_why, new_why = ledger.why(old_fact).policy, ledger.why(new_fact).policy
        assert (old_why.hash, old_why.source) == (old_hash, POLICY_V1)
        assert old_why.canonical == load_policy_text(POLICY_V1, tmp_path).canonical
        assert (new_why.hash, new_why.source) == (new_hash, POLICY_V2)
        assert json.loads(new_why.canonical)["review"]["reviewers"] == ["agent:boss"]
        assert json.loads(old_why.canonical)["review"]["reviewers"] == []

        # The new rules are in force: the newly listed reviewer may confirm.
        claimed = env.put("acct:3", "plan", "x", provenance="claimed")
        assert ledger.confirm(claimed, actor="agent:boss").status == "active"
        assert len(policy_events(ledger)) == 2
    finally:
        env.ledger.close()


def load_policy_text(text: str, tmp_path: Path) -> Any:
    path = tmp_path / "copy.toml"
    path.write_text(text)
    return load_policy(path)


def test_policy_comment_change_keeps_the_hash(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY_V1)
    env = Env(tmp_path / "ledger.db", policy)
    try:
        env.put()
        policy.write_text("# reworded comment\n\n[review]\nreviewers   =   []\n")
        env.reopen()
        env.put("acct:2")
        assert len(policy_events(env.ledger)) == 1
    finally:
        env.ledger.close()


def test_switching_back_to_an_earlier_policy_records_it_again(tmp_path: Path) -> None:
    v1, v2 = tmp_path / "v1.toml", tmp_path / "v2.toml"
    v1.write_text(POLICY_V1)
    v2.write_text(POLICY_V2)
    env = Env(tmp_path / "ledger.db", v1)
    try:
        env.put("acct:1")
        env.reopen(v2)
        env.put("acct:2")
        env.reopen(v1)
        env.put("acct:3")
        hashes = [h for _, h in policy_events(env.ledger)]
        assert hashes == [load_policy(v1).hash, load_policy(v2).hash, load_policy(v1).hash]
    finally:
        env.ledger.close()


BAD_POLICIES = [
    ("unknown top-level key", "colour = 'blue'\n", "colour"),
    ("unknown nested key", "[review]\nreviewrs = []\n", "review.reviewrs"),
    ("unknown section", "[retension]\n", "retension"),
    ("wrong type", "[provenance]\nallow_declared = 'yes'\n", "provenance.allow_declared"),
    ("wrong type for a flag", "[provenance]\nallow_declared = 1\n", "provenance.allow_declared"),
    ("wrong type for a text", "default_space = 5\n", "default_space"),
    ("wrong type for a list", "[review]\nreviewers = 'user:a'\n", "review.reviewers"),
    ("kind outside the closed set", "[review]\nreviewer_kinds = ['robot']\n",
     "review.reviewer_kinds.0"),
    ("bad actor", "[review]\nreviewers = ['nobody']\n", "review.reviewers.0"),
    ("wrong version", "version = 2\n", "version"),
    ("bad duration", "[retention.windows]\n'team:*' = '90 days'\n",
     "retention.windows.team:*"),
]


@pytest.mark.parametrize(("what", "text", "key"), BAD_POLICIES, ids=[b[0] for b in BAD_POLICIES])
def test_bad_policy_names_file_and_key(tmp_path: Path, what: str, text: str, key: str) -> None:
    policy = tmp_path / "bad.toml"
    policy.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(policy)
    assert info.value.code == "policy_invalid"
    assert str(policy) in info.value.message
    assert f"'{key}'" in info.value.message
    assert info.value.details == {"file": str(policy), "key": key}
    with pytest.raises(PolicyError):
        Ledger.open(tmp_path / "ledger.db", policy=policy)
    assert not (tmp_path / "ledger.db").exists()


@pytest.mark.parametrize(("text", "where"), [
    ("[provenance]\nallow_declared = tru\n", "line 2"),
    ("[review]\nreviewers = [\"user:a\"\n", "end of document"),
    ("default_space = 'org'\ndefault_space = 'team'\n", "line 2"),
])
def test_policy_toml_syntax_error_names_file_and_place(tmp_path: Path, text: str,
                                                       where: str) -> None:
    policy = tmp_path / "broken.toml"
    policy.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(policy)
    assert info.value.code == "policy_invalid"
    assert str(policy) in info.value.message
    assert where in info.value.message
    assert "not valid TOML" in info.value.message


def test_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "nope.toml")
    assert info.value.code == "policy_invalid"
    assert "nope.toml" in info.value.message


def test_shipped_default_policy_loads() -> None:
    policy = load_policy()
    assert policy.policy.provenance.allow_declared is True
    assert policy.policy.review.reviewer_kinds == ("user", "reviewer")
    assert policy.policy.retention.windows == {}


# ---- rebuild ----------------------------------------------------------------------------

def test_fact_id_collision_is_a_coded_refusal(tmp_path: Path) -> None:
    # Same id seed, same instant: the same fact id comes up again. The store turns the
    # constraint failure into a coded refusal (no apsw exception above store/), writing nothing.
    env = Env(tmp_path / "ledger.db")
    try:
        env.put()
        env.ledger.close()
        env.ledger = Ledger.open(env.path, clock=env.clock, id_seed=env.opens)
        before = env.snapshot()
        with pytest.raises(LedgerError) as info:
            env.put()
        assert info.value.code == "integrity"
        assert env.snapshot() == before
    finally:
        env.ledger.close()


def test_rebuild_on_a_healthy_ledger(env: Env) -> None:
    populated(env)
    result = env.ledger.rebuild()
    assert (result.differences, result.repaired, result.facts) == ([], False, 3)


@pytest.mark.parametrize("tamper", [
    "UPDATE facts SET status = 'retracted' WHERE subject = 'acct:2'",
    "UPDATE facts SET superseded_by = 'f_x' WHERE subject = 'acct:2'",
    "DELETE FROM fact_states WHERE fact_seq = 6",
    "UPDATE fact_states SET live = 0 WHERE fact_seq = 6",
    "INSERT INTO fact_sources VALUES ('f_a', 'f_b')",
])
def test_rebuild_reports_and_repairs_a_tampered_projection(env: Env, tamper: str) -> None:
    ids = populated(env)
    before = env.ledger.as_of(include="claimed")
    env.ledger.close()
    with raw(env.path) as conn:
        conn.execute(tamper)
    ledger = env.reopen()
    report = ledger.rebuild()
    assert report.differences and not report.repaired
    assert ledger.rebuild().differences == report.differences  # reporting alone fixes nothing
    repaired = ledger.rebuild(repair=True)
    assert repaired.repaired and repaired.differences == report.differences
    assert ledger.rebuild().differences == []
    assert ledger.as_of(include="claimed").facts == before.facts
    assert ledger.history(ids["c"]).status == "active"
    assert ledger.verify().events == 6


def test_raw_session_cannot_replace_an_event(env: Env) -> None:
    """INSERT OR REPLACE deletes without firing delete triggers; a BEFORE INSERT trigger stops it."""
    populated(env)
    env.ledger.close()
    with raw(env.path) as conn:
        row = conn.execute("SELECT * FROM events WHERE seq = 2").fetchone()
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(f"INSERT OR REPLACE INTO events VALUES ({', '.join('?' * len(row))})",
                         row)
    assert env.reopen().verify().valid


def test_raw_session_can_null_an_asserts_subject_and_verify_still_passes(env: Env) -> None:
    populated(env)
    env.ledger.close()
    with raw(env.path) as conn:
        conn.execute("UPDATE events SET subject = NULL WHERE seq = 6")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("UPDATE events SET subject = 'acct:other' WHERE seq = 3")
    # The chain still verifies, but the projection still names the subject the event lost:
    # verify says so (DESIGN 13), and a repair brings it in line.
    ledger = env.reopen()
    report = ledger.verify()
    assert not report.valid and "projection" in (report.problem or "")
    ledger.rebuild(repair=True)
    assert ledger.verify().valid
