"""Issue 31, "checks that miss what readers rely on": every derived table a reader relies on
(sessions, served reads, session events, actions, salience presentations, pending retractions)
is compared by `verify` with the fold of the events, named by table and row when it differs,
failed by `doctor`, and repaired by `rebuild --repair`; `rebuild` reports an unknown kind;
`verify --deep` compares the recall indexes' content with the believed facts indexed afresh."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from custody_app.doctor.checks import diagnose
from custody_app.ledger.facade import Ledger
from tests.conftest import Env, day
from tests.test_tamper_integrity import tampered as tampered_copy
from tests.test_tamper_integrity import unknown_kind

Edit = Callable[[sqlite3.Connection, dict[str, str]], None]


def build(path: Path) -> dict[str, str]:
    env = Env(path)
    ids: dict[str, str] = {}
    ids["plan"] = env.put("acct:1", "plan", "gold plan value")
    ids["other"] = env.put("acct:2", "plan", "silver plan value", actor="agent:other")
    env.at(day(2))
    env.ledger.recall("gold plan", session="sess-read")
    env.ledger.affirm(ids["plan"], actor="agent:support")
    env.put("acct:1", "note", "wrote after reading", session="sess-read")
    env.ledger.act("sess-read", "refund", "tx-77", "ok", actor="agent:support")
    # A claimed retraction of another writer's fact waits for review (DESIGN 13).
    env.ledger.retract(ids["other"], actor="agent:support", reason="looks wrong",
                       provenance="claimed")
    env.ledger.close()
    return ids


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path)


def no_served_rows(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("DELETE FROM served_facts")


def forged_served_row(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    """Frames an innocent session: blast would list it as having read the fact."""
    con.execute("INSERT INTO served_facts(fact_id, session, seq) VALUES (?, 'sess-innocent', 3)",
                (ids["plan"],))


def no_session_events(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("DELETE FROM session_events")


def no_session_row(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("DELETE FROM sessions")


def no_action_rows(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("DELETE FROM actions")


def forged_action_row(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("UPDATE actions SET tool = 'weather'")


def _empty_index(con: sqlite3.Connection, name: str, table_sql: str) -> None:
    """Point index `name` at the b-tree of a fresh empty index: the schema is unchanged, but
    every read through that index finds nothing (what a hand-edited file can do)."""
    con.execute(table_sql)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'blank'").fetchone()
    con.execute("PRAGMA writable_schema = ON")
    con.execute("UPDATE sqlite_master SET rootpage = ? WHERE name = ?", (root, name))
    con.execute("DELETE FROM sqlite_master WHERE name = 'blank'")
    con.commit()
    con.execute("PRAGMA writable_schema = OFF")


def hidden_retractions(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    _empty_index(con, "events_retractions",
                 "CREATE INDEX blank ON events(seq) WHERE kind = 'retract' AND seq < 0")


def hidden_presentations(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    _empty_index(con, "events_by_fact",
                 "CREATE INDEX blank ON events(fact_id, seq) WHERE fact_id IS NOT NULL AND seq < 0")


CASES: dict[str, tuple[Edit, str]] = {
    "served reads deleted": (no_served_rows, "served_facts"),
    "served read forged": (forged_served_row, "served_facts"),
    "session events deleted": (no_session_events, "session_events"),
    "session summary deleted": (no_session_row, "sessions"),
    "action index rows deleted": (no_action_rows, "actions"),
    "action index row edited": (forged_action_row, "actions"),
    "pending retractions hidden": (hidden_retractions, "pending retraction"),
    "salience presentations hidden": (hidden_presentations, "salience"),
}
REPAIRABLE = ("served reads deleted", "served read forged", "session events deleted",
              "session summary deleted", "action index rows deleted", "action index row edited",
              "pending retractions hidden", "salience presentations hidden")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("derived31") / "base.db"
    return path, build(path)


def tampered(base: tuple[Path, dict[str, str]], tmp_path: Path, edit: Edit) -> Path:
    """The edit through a plain connection: the triggers stay, as a reader's file would."""
    return tampered_copy(base, tmp_path, edit, raw)


def test_the_untampered_base_verifies_and_readers_see_it(
        base: tuple[Path, dict[str, str]]) -> None:
    with Ledger.open(base[0], readonly=True) as led:
        assert led.verify().valid, led.verify().problem
        assert led.verify(deep=True).valid
        assert [s.session for s in led.blast(base[1]["plan"]).sessions] == ["sess-read"]
        assert [a.ref for a in led.actions().actions] == ["tx-77"]


def test_deleted_session_rows_hide_the_blast_radius_from_readers(
        base: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """What the attack buys: blast reports nothing and actions lists nothing."""
    path = tampered(base, tmp_path, lambda c, i: (no_served_rows(c, i), no_action_rows(c, i)))
    with Ledger.open(path, readonly=True) as led:
        assert led.blast(base[1]["plan"]).sessions == []
        assert led.actions().actions == []
        report = led.verify()
    assert not report.valid


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_and_doctor_name_the_derived_table(base: tuple[Path, dict[str, str]],
                                                  tmp_path: Path, case: str) -> None:
    edit, table = CASES[case]
    path = tampered(base, tmp_path, edit)
    with Ledger.open(path, readonly=True) as led:
        report = led.verify()
    assert not report.valid
    assert report.problem is not None and table in report.problem, report.problem
    integrity = [c for c in diagnose(path).checks if c.name == "integrity"]
    assert [c.outcome for c in integrity] == ["FAIL"] and table in integrity[0].detail


@pytest.mark.parametrize("case", REPAIRABLE)
def test_rebuild_repair_restores_what_verify_reports(base: tuple[Path, dict[str, str]],
                                                     tmp_path: Path, case: str) -> None:
    path = tampered(base, tmp_path, CASES[case][0])
    with Ledger.open(path) as led:
        assert not led.verify().valid
        fixed = led.rebuild(repair=True)
        assert fixed.repaired and fixed.differences
        assert led.verify().valid, led.verify().problem
        assert [s.session for s in led.blast(base[1]["plan"]).sessions] == ["sess-read"]
        assert [a.ref for a in led.actions().actions] == ["tx-77"]


def test_rebuild_reports_an_event_of_unknown_kind(base: tuple[Path, dict[str, str]],
                                                  tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    for suffix in ("", ".keys", ".keys.master"):
        Path(f"{path}{suffix}").write_bytes(Path(f"{base[0]}{suffix}").read_bytes())
    con = sqlite3.connect(path)
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        con.execute(f"DROP TRIGGER {name}")
    unknown_kind(con, base[1])
    con.commit()
    con.close()
    with Ledger.open(path, readonly=True) as led:
        result = led.rebuild()
    assert any("unknown kind 'grant_admin'" in d for d in result.differences), result.differences


def test_verify_deep_compares_the_word_index_content(base: tuple[Path, dict[str, str]],
                                                     tmp_path: Path) -> None:
    """An FTS5 row kept for the right fact but holding other words passes the cheap check
    (every believed fact has a row) and is caught only by --deep; --repair fixes it."""
    path = tmp_path / "t.db"
    for suffix in ("", ".keys", ".keys.master"):
        Path(f"{path}{suffix}").write_bytes(Path(f"{base[0]}{suffix}").read_bytes())
    with Ledger.open(path) as led:
        fact = led.db.facts.get(base[1]["plan"])
        assert fact is not None
        with led.transaction():
            scope = led.db.conn.execute("SELECT scope FROM recall_fts WHERE rowid = ?",
                                        (fact.assert_seq,)).fetchone()[0]
            led.db.conn.execute("DELETE FROM recall_fts WHERE rowid = ?", (fact.assert_seq,))
            led.db.conn.execute("INSERT INTO recall_fts(rowid, terms, scope) VALUES (?, ?, ?)",
                                (fact.assert_seq, "decoy words", scope))
        assert led.verify().valid
        deep = led.verify(deep=True)
        assert not deep.valid and "recall_fts" in (deep.problem or "")
        assert f"assert seq {fact.assert_seq}" in (deep.problem or "")
        assert led.rebuild(repair=True, deep=True).repaired
        assert led.verify(deep=True).valid


def test_verify_deep_compares_the_vectors(base: tuple[Path, dict[str, str]],
                                          tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    for suffix in ("", ".keys", ".keys.master"):
        Path(f"{path}{suffix}").write_bytes(Path(f"{base[0]}{suffix}").read_bytes())
    with Ledger.open(path) as led:
        fact = led.db.facts.get(base[1]["plan"])
        assert fact is not None
        table = "recall_vec"
        with led.transaction():
            (vec,) = led.db.conn.execute(f"SELECT embedding FROM {table} WHERE fact_seq = ?",
                                         (fact.assert_seq,)).fetchone()
            flipped = bytes(len(vec))
            led.db.conn.execute(f"UPDATE {table} SET embedding = ? WHERE fact_seq = ?",
                                (flipped, fact.assert_seq))
        assert led.verify().valid
        deep = led.verify(deep=True)
        assert not deep.valid and "vector" in (deep.problem or ""), deep.problem
        assert led.rebuild(repair=True, deep=True).repaired
        assert led.verify(deep=True).valid


def test_the_cli_verify_deep_and_rebuild_name_what_they_find(base: tuple[Path, dict[str, str]],
                                                             tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "custody_app", *args], capture_output=True,
                              text=True, timeout=120, env=env)

    done = cli("verify", "--json", "--deep", "--ledger", str(base[0]))
    assert done.returncode == 0 and json.loads(done.stdout)["valid"], done.stderr
    path = tampered(base, tmp_path, no_action_rows)
    done = cli("verify", "--json", "--ledger", str(path))
    assert done.returncode == 1 and "actions (the actions index)" in json.loads(done.stdout)["problem"]
    done = cli("rebuild", "--json", "--repair", "--deep", "--ledger", str(path))
    assert done.returncode == 0 and json.loads(done.stdout)["repaired"], done.stderr
    assert cli("verify", "--deep", "--ledger", str(path)).returncode == 0
