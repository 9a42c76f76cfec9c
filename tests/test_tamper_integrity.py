"""The tamper suite of DESIGN 13 ("What verify proves"): with the triggers dropped by hand, each
edit the first release let through, and `verify` naming it, `doctor` failing on it, and the
Integrity screen saying so; `rebuild --repair` repairing what is derived."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import Static

from custody_app.doctor.checks import diagnose
from custody_app.domain.chain import canonical, event_hash
from custody_app.domain.errors import LedgerError
from custody_app.ledger.facade import Ledger
from screens.integrity import IntegrityScreen
from tests.conftest import Env, day
from tests.tuikit import app_on, idle

Edit = Callable[[sqlite3.Connection, dict[str, str]], None]


def build(path: Path) -> dict[str, str]:
    env = Env(path)
    ids: dict[str, str] = {}
    ids["kept"] = env.put("acct:1", "plan", "gold plan value")
    ids["retracted"] = env.put("acct:2", "plan", "silver plan value")
    env.at(day(2))
    env.ledger.retract(ids["retracted"], actor="agent:support", reason="wrong account")
    ids["erased_subject"] = env.put("acct:ZQX-TAMPER-01", "phone", "a value")
    env.ledger.forget_subject("acct:ZQX-TAMPER-01", actor="user:dpo", reason="subject_request")
    env.ledger.close()
    return ids


def raw(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path)
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        con.execute(f"DROP TRIGGER {name}")
    return con


def unknown_kind(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    seq, prev, tx_at, policy = con.execute(
        "SELECT seq, hash, tx_at, policy_hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    body = canonical({"seq": seq + 1, "kind": "grant_admin", "tx_at": tx_at,
                      "actor": "agent:evil", "policy_hash": policy})
    con.execute("INSERT INTO events(seq, kind, tx_at, actor, policy_hash, body, prev_hash, hash) "
                "VALUES (?, 'grant_admin', ?, 'agent:evil', ?, ?, ?, ?)",
                (seq + 1, tx_at, policy, body, prev, event_hash(prev, body)))


def nulled_value(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("UPDATE events SET value = NULL, salt = NULL WHERE fact_id = ? AND kind = 'assert'",
                (ids["kept"],))


def replaced_policy(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("UPDATE policies SET source = replace(source, 'allow_declared = true', "
                "'allow_declared = false'), canonical = replace(canonical, "
                "'\"allow_declared\":true', '\"allow_declared\":false')")


def revived_fact(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("UPDATE facts SET status = 'active', ended = NULL, ended_seq = NULL "
                "WHERE fact_id = ?", (ids["retracted"],))


def edited_state(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("UPDATE fact_states SET status_trusted = 'active', status_all = 'active' "
                "WHERE fact_seq = (SELECT assert_seq FROM facts WHERE fact_id = ?) AND live = 0",
                (ids["retracted"],))


def deleted_fact(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("DELETE FROM fact_sources WHERE fact_id = ?", (ids["kept"],))
    con.execute("DELETE FROM fact_states WHERE fact_seq = (SELECT assert_seq FROM facts "
                "WHERE fact_id = ?)", (ids["kept"],))
    con.execute("DELETE FROM facts WHERE fact_id = ?", (ids["kept"],))


def added_source(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("INSERT INTO fact_sources(fact_id, source_id) VALUES (?, ?)",
                (ids["kept"], ids["retracted"]))


def dirty_tombstone(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("UPDATE tombstones SET counts = ?",
                (json.dumps({"active": 1, "derived": 0, "phone": "+49 30 1234567"}),))


def orphan_tombstone(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("INSERT INTO tombstones(seq, subject_hash, reason, counts, at) "
                "VALUES (2, ?, 'error', '{}', '2026-09-01T00:00:00.000000Z')", ("a" * 64,))


CASES: dict[str, tuple[Edit, str]] = {
    "unknown event kind": (unknown_kind, "unknown kind 'grant_admin'"),
    "value nulled without a forget": (nulled_value, "no forget or expire event"),
    "policy text replaced, hash kept": (replaced_policy, "does not hash to its key"),
    "retracted fact revived in the projection": (revived_fact, "projection: fact row"),
    "retracted fact's state row edited": (edited_state, "projection: fact state row for the fact"),
    "fact deleted from the projection": (deleted_fact, "projection: fact row for fact"),
    "source link added to the projection": (added_source, "is not in the fold of the events"),
    "tombstone with a raw phone number": (dirty_tombstone, "content beyond"),
    "tombstone without its erasure event": (orphan_tombstone, "no forget_subject event"),
}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("tamper13") / "base.db"
    return path, build(path)


def tampered(base: tuple[Path, dict[str, str]], tmp_path: Path, edit: Edit,
             opener: Callable[[Path], sqlite3.Connection] | None = None) -> Path:
    """A copy of the base ledger and its key files with `edit` applied through `opener`
    (default: a connection with the triggers dropped)."""
    path = tmp_path / "t.db"
    for suffix in ("", ".keys", ".keys.master"):
        Path(f"{path}{suffix}").write_bytes(Path(f"{base[0]}{suffix}").read_bytes())
    con = (opener or raw)(path)
    edit(con, base[1])
    con.commit()
    con.close()
    return path


def test_the_untampered_base_verifies(base: tuple[Path, dict[str, str]]) -> None:
    with Ledger.open(base[0], readonly=True) as led:
        report = led.verify()
    assert report.valid, report.problem
    assert all(c.outcome != "FAIL" for c in diagnose(base[0]).checks)


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_and_doctor_name_each_edit(base: tuple[Path, dict[str, str]], tmp_path: Path,
                                          case: str) -> None:
    edit, words = CASES[case]
    path = tampered(base, tmp_path, edit)
    with Ledger.open(path, readonly=True) as led:
        report = led.verify()
    assert not report.valid
    assert report.problem is not None and words in report.problem, report.problem
    integrity = [c for c in diagnose(path).checks if c.name == "integrity"]
    assert [c.outcome for c in integrity] == ["FAIL"] and words in integrity[0].detail


def test_why_refuses_to_print_a_replaced_policy_text(base: tuple[Path, dict[str, str]],
                                                     tmp_path: Path) -> None:
    path = tampered(base, tmp_path, replaced_policy)
    with Ledger.open(path, readonly=True) as led, pytest.raises(LedgerError) as info:
        led.why(base[1]["kept"])
    assert info.value.code == "policy_tampered"


def test_a_revived_fact_with_index_rows_copied_is_caught_and_repaired(
        base: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    path = tampered(base, tmp_path, revived_fact)
    with Ledger.open(path) as led:
        with led.transaction():
            led.index.rebuild()  # index rows made for the forged projection
        assert led.index.differences() == []
        assert not led.verify().valid
        fixed = led.rebuild(repair=True)
        assert fixed.repaired and fixed.differences
        assert led.verify().valid
        assert led.history(base[1]["retracted"]).status == "retracted"


def test_a_stray_recall_index_row_is_named_and_repaired(
        base: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    for suffix in ("", ".keys", ".keys.master"):
        Path(f"{path}{suffix}").write_bytes(Path(f"{base[0]}{suffix}").read_bytes())
    with Ledger.open(path) as led:
        retracted = led.db.facts.get(base[1]["retracted"])
        assert retracted is not None
        with led.transaction():  # a row for a fact that is not believed, added by hand
            led.db.conn.execute("INSERT INTO recall_fts(rowid, terms, scope) VALUES (?, ?, ?)",
                                (retracted.assert_seq, "stray", "stray"))
        report = led.verify()
        assert not report.valid and f"assert seq {retracted.assert_seq}" in (report.problem or "")
        assert led.rebuild(repair=True).repaired
        assert led.verify().valid and led.index.differences() == []


async def test_the_integrity_screen_says_so(base: tuple[Path, dict[str, str]],
                                            tmp_path: Path) -> None:
    path = tampered(base, tmp_path, unknown_kind)
    app = app_on(path)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("5")
        await idle(pilot)
        assert isinstance(app.screen, IntegrityScreen)
        await pilot.press("v")
        await idle(pilot)
        text = str(app.screen.query_one("#verify", Static).render())
        assert "BROKEN" in text and "grant_admin" in text
