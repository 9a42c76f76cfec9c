"""The schema 5 upgrade on a ledger built by the previous release (tests/fixtures/v4, made by
main at 1734f62 with tests/fixtures/build_v4_ledger.py): plaintext free text is sealed in place
and gone from every file, the chain still verifies (also under the signed checkpoint's key, and
offline from an export), and the rewritten bodies stay tamper-evident after an erasure."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest

from custody_app import Ledger
from custody_app.domain.canonical import canonical
from custody_app.domain.sealed_text import ERASED_TEXT
from custody_app.evidence.offline import verify_export
from store.sqlite.schema import SCHEMA_VERSION
from tests.conftest import fixture_copy
from tests.reliability import verify_or_refusal

FIXTURE = Path(__file__).parent / "fixtures" / "v4"
MANIFEST: dict[str, Any] = json.loads((FIXTURE / "manifest.json").read_text())
TEXTS: dict[str, str] = MANIFEST["texts"]
FACTS: dict[str, str] = MANIFEST["facts"]


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A copy of the schema-4 ledger and its key files."""
    return fixture_copy(FIXTURE, tmp_path)


def user_version(path: Path) -> int:
    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(con.pragma("user_version"))
    finally:
        con.close()


def holding(path: Path, needle: str) -> list[str]:
    return [p.name for p in path.parent.iterdir()
            if p.name.startswith(path.name) and needle.encode() in p.read_bytes()]


def test_the_fixture_is_a_schema_4_ledger_with_plaintext_free_text(old: Path) -> None:
    assert user_version(old) == 4
    for name in ("detail", "ref", "retract", "confirm", "forgotten_detail", "gone_detail"):
        assert holding(old, TEXTS[name]) == ["ledger.db"], name


def test_upgrade_seals_the_text_in_place_and_no_copy_stays_in_any_file(old: Path) -> None:
    with Ledger.open(old) as led:
        assert user_version(old) == SCHEMA_VERSION
        report = led.verify(public_key=(FIXTURE / "ledger.db.pub").read_text())
        assert report.valid and report.checkpoints == 1, report.problem
        assert report.events == MANIFEST["events"] + 1  # the seal_text event
        why = led.why(FACTS["plan"])
        assert (why.cause.ref, why.cause.detail) == (TEXTS["ref"], TEXTS["detail"])
        assert [r.reason for r in why.reviews] == [TEXTS["hold"], TEXTS["release"],
                                                   TEXTS["retract"]]
        assert led.why(FACTS["claim"]).reviews[0].reason == TEXTS["confirm"]
        assert led.why(FACTS["rejected"]).reviews[0].reason == TEXTS["reject"]
        # An erased fact's text is not sealed but dropped, as a forget would have done.
        gone = led.why(FACTS["forgotten"])
        assert (gone.cause.ref, gone.cause.detail) == (ERASED_TEXT, ERASED_TEXT)
        assert gone.reviews[0].reason == ERASED_TEXT
    for name, text in TEXTS.items():
        assert holding(old, text) == [], name
    # A second open changes nothing.
    before = old.read_bytes()
    with Ledger.open(old) as led:
        assert led.verify().events == MANIFEST["events"] + 1
    assert old.read_bytes() == before


def test_after_the_upgrade_forget_erases_the_sealed_text_and_verify_passes(old: Path,
                                                                             tmp_path: Path) -> None:
    with Ledger.open(old) as led:
        result = led.forget(FACTS["plan"], actor="user:dpo", reason="subject_request")
        assert result.certificate.complete
        assert led.why(FACTS["plan"]).cause.detail == ERASED_TEXT
        assert led.verify().valid
        out = tmp_path / "export.jsonl"
        led.export(out)
        pem = led.keys.public_pem() if led.keys else None
    for name in ("detail", "ref", "hold", "release", "retract"):
        assert holding(old, TEXTS[name]) == [], name
    # Offline, an upgraded event is checked against its old hash from the opened text.
    assert verify_export(out, pem).valid


def _edit_body(path: Path, seq: int, edit: Any) -> None:
    con = sqlite3.connect(path)
    try:
        con.execute("DROP TRIGGER IF EXISTS events_append_only_update")
        body = json.loads(con.execute("SELECT body FROM events WHERE seq = ?", (seq,)).fetchone()[0])
        edit(body)
        con.execute("UPDATE events SET body = ? WHERE seq = ?", (canonical(body), seq))
        con.commit()
    finally:
        con.close()


def _assert_seq(led: Ledger, fact_id: str) -> int:
    fact = led.db.facts.get(fact_id)
    assert fact is not None
    return fact.assert_seq


def test_an_edited_upgraded_body_fails_verify_while_its_text_opens(old: Path) -> None:
    with Ledger.open(old) as led:
        seq = _assert_seq(led, FACTS["plan"])
    _edit_body(old, seq, lambda b: b.update(space="team:evil"))
    with Ledger.open(old) as led:
        report = led.verify()
    assert not report.valid and report.first_bad_seq == seq
    assert "does not match its hash" in (report.problem or "")


def test_an_edited_upgraded_body_fails_verify_after_its_text_was_erased(old: Path) -> None:
    with Ledger.open(old) as led:
        seq = _assert_seq(led, FACTS["forgotten"])
        assert led.verify().valid
    # The old hash cannot be rebuilt without the text: the upgrade's digest catches the edit.
    _edit_body(old, seq, lambda b: b.update(predicate="notes"))
    with Ledger.open(old) as led:
        report = led.verify()
    assert not report.valid, report
    assert "an upgraded event was edited" in (report.problem or "")


def test_a_body_marked_upgraded_after_the_fact_fails_verify(old: Path) -> None:
    with Ledger.open(old) as led:
        fact = led.assert_fact("cust:new", "plan", "pro", actor="agent:bot", provenance="attested",
                               cause={"kind": "tool", "ref": "crm#9"}).fact_id
        seq = _assert_seq(led, fact)
    _edit_body(old, seq, lambda b: b["sealed_text"].update(upgraded=True))
    # The newest event is the key store's mark: its edited body is refused at open first
    # (DESIGN 14); verify, through a copy of the key store without marks, locates it.
    report, refused = verify_or_refusal(old)
    assert refused in (None, "ledger_forked")
    assert not report.valid and report.first_bad_seq == seq, report


def test_a_read_only_open_of_a_schema_4_ledger_is_refused_and_changes_nothing(old: Path) -> None:
    before = old.read_bytes()
    with pytest.raises(Exception) as caught:
        Ledger.open(old, readonly=True)
    assert "schema upgrade" in str(caught.value)
    assert old.read_bytes() == before


@pytest.mark.parametrize("point", ["upgrade.before_commit", "upgrade.committed"])
def test_a_kill_during_the_upgrade_leaves_no_half_state_and_no_plaintext(old: Path,
                                                                         point: str) -> None:
    """Killed (SIGKILL) just before the upgrade commits, or after it committed but before its
    checkpoint: the next read-write open finishes it, and no copy of the text stays anywhere."""
    child = subprocess.run(
        [sys.executable, "-c", f"from custody_app import Ledger; Ledger.open({str(old)!r})"],
        env={**os.environ, "CUSTODY_FAULT": point}, capture_output=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    with Ledger.open(old) as led:
        report = led.verify()
        assert report.valid and report.events == MANIFEST["events"] + 1, report.problem
        assert led.why(FACTS["plan"]).cause.detail == TEXTS["detail"]
        assert led.db.meta("free_text_sealed") == "done"
    for name, text in TEXTS.items():
        assert holding(old, text) == [], name
