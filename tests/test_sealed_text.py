"""Sealed free text (DESIGN 13 "Free text is personal data too"): an assert's cause ref and
detail and the reasons of events about a fact are encrypted under the subject's key and
committed in the chain; reads open them; forget, forget_subject and sweep erase them; verify
catches every hand edit of them. All on real ledger files, their raw bytes searched."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import apsw
import pytest

from custody_app.domain.sealed_text import ERASED_TEXT
from custody_app.evidence.offline import verify_export
from custody_app.evidence.packcheck import verify_pack
from custody_app.evidence.packs import pack_text
from custody_app.keys.keyring import KeyRing
from custody_app.keys.values import TextCodec
from tests.conftest import Env

# Redaction off: nothing but the sealing keeps these out of the file.
NO_REDACTION = "[redaction]\ndetectors = []\n"
EMAIL = "jane.quintessa@example.org"
NAME = "Jane Quintessa Doe"
CARD = "4111 1111 1111 1111"
PII = (EMAIL, NAME, CARD)


def files_of(path: Path) -> list[Path]:
    """Every file of the ledger (database, WAL, shared memory, key store)."""
    return [p for p in path.parent.iterdir() if p.name.startswith(path.name)]


def hits(path: Path, needle: str) -> list[str]:
    return [p.name for p in files_of(path) if needle.encode() in p.read_bytes()]


TRIGGERS = ("event_texts_erase_only", "event_texts_no_delete", "events_append_only_update")


def raw_edit(path: Path, sql: str, args: tuple[Any, ...] = (), triggers: tuple[str, ...] = TRIGGERS) -> None:
    """A hand edit through sqlite3 with the protecting triggers dropped."""
    con = sqlite3.connect(path)
    try:
        for name in triggers:
            con.execute(f"DROP TRIGGER IF EXISTS {name}")
        con.execute(sql, args)
        con.commit()
    finally:
        con.close()


def _story(env: Env) -> dict[str, str]:
    """A subject whose e-mail, name and card are in values, cause details, refs and reasons."""
    led = env.ledger
    cause = {"kind": "message", "ref": f"mail from {EMAIL}", "detail": f"{NAME} paid by {CARD}"}
    email = led.assert_fact("cust:jane", "email", EMAIL, actor="agent:bot", cause=cause,
                            provenance="attested").fact_id
    name = led.assert_fact("cust:jane", "name", NAME, actor="agent:bot",
                           cause={"kind": "tool", "ref": "crm#7", "detail": f"said {NAME}"},
                           provenance="attested").fact_id
    card = led.assert_fact("cust:jane", "card", CARD, actor="agent:bot",
                           cause={"kind": "tool", "ref": "pay#1"}, provenance="attested").fact_id
    led.hold(card, actor="user:counsel", reason=f"dispute opened by {NAME} ({EMAIL})")
    led.release(card, actor="user:counsel", reason=f"dispute about {CARD} closed")
    led.retract(name, actor="agent:bot", reason=f"{NAME} spells it differently, see {EMAIL}")
    other = led.assert_fact("cust:other", "plan", "pro", actor="agent:bot",
                            cause={"kind": "manual", "ref": "desk-note-other",
                                   "detail": "an unrelated customer upgraded"},
                            provenance="attested").fact_id
    return {"email": email, "name": name, "card": card, "other": other}


def test_free_text_is_never_stored_in_plaintext_and_reads_open_it(make_env: Any) -> None:
    env = make_env(NO_REDACTION)
    ids = _story(env)
    led = env.ledger
    led.db.wal_checkpoint()
    for text in (NAME, f"mail from {EMAIL}", f"dispute about {CARD} closed"):
        assert hits(env.path, text) == [], text
    why = led.why(ids["email"])
    assert why.cause.ref == f"mail from {EMAIL}" and why.cause.detail == f"{NAME} paid by {CARD}"
    assert [r.reason for r in led.why(ids["card"]).reviews] == [
        f"dispute opened by {NAME} ({EMAIL})", f"dispute about {CARD} closed"]
    events = led.history(ids["name"]).events
    assert events[-1].model_dump()["reason"] == f"{NAME} spells it differently, see {EMAIL}"
    body = json.loads(led.db.events.get(events[-1].seq).body)
    assert "reason" not in body and body["sealed_text"]["fields"] == ["reason"]
    assert led.verify().valid


def test_forget_of_one_fact_erases_its_cause_and_the_reasons_about_it(make_env: Any) -> None:
    env = make_env(NO_REDACTION)
    ids = _story(env)
    led = env.ledger
    result = led.forget(ids["card"], actor="user:dpo", reason="subject_request")
    assert result.certificate.complete
    # The fact's own sealed text was scanned for, by name.
    scanned = " ".join(p.detail for p in result.certificate.places)
    assert "erased byte string" in scanned
    for text in (f"dispute opened by {NAME} ({EMAIL})", f"dispute about {CARD} closed", CARD):
        assert hits(env.path, text) == [], text
    assert led.db.texts.of_fact(ids["card"]) and all(
        blob is None for _, blob in led.db.texts.of_fact(ids["card"]))
    why = led.why(ids["card"])
    assert why.cause.ref == ERASED_TEXT and why.cause.detail is None
    assert [r.reason for r in why.reviews][:2] == [ERASED_TEXT, ERASED_TEXT]
    # The other facts of the subject keep theirs.
    assert led.why(ids["email"]).cause.detail == f"{NAME} paid by {CARD}"
    assert led.verify().valid


def test_forget_subject_leaves_no_email_name_or_card_in_any_file(make_env: Any) -> None:
    env = make_env(NO_REDACTION)
    ids = _story(env)
    led = env.ledger
    # Values and free text are sealed, so nothing is in plain bytes even before the erasure;
    # the copy test below shows what the erasure adds: the key goes and the blobs are nulled.
    assert led.db.texts.count() == 7
    result = led.forget_subject("cust:jane", actor="user:dpo", reason="subject_request")
    assert result.certificate.complete, result.certificate
    for needle in (*PII, "cust:jane", f"mail from {EMAIL}", "spells it differently"):
        assert hits(env.path, needle) == [], needle
    # FTS and vector tables live in the database file searched above; their rows are gone too.
    erased = {ids["email"], ids["name"], ids["card"]}
    assert not {h.fact.fact_id for q in (NAME, "Quintessa") for h in led.recall(q).results} & erased
    assert led.verify().valid
    assert led.why(ids["other"]).cause.detail == "an unrelated customer upgraded"


def test_sweep_erases_free_text_of_the_expired_facts(make_env: Any) -> None:
    env = make_env(NO_REDACTION)
    ids = _story(env)
    env.at("2026-12-01T00:00:00Z")
    result = env.ledger.sweep(actor="user:dpo", before="2026-09-02T00:00:00Z")
    assert result.certificate is not None and result.certificate.complete
    for text in (NAME, f"mail from {EMAIL}", f"dispute about {CARD} closed"):
        assert hits(env.path, text) == [], text
    assert env.ledger.why(ids["email"]).cause.detail == ERASED_TEXT
    assert env.ledger.verify().valid


# ---- attacks ---------------------------------------------------------------------------------

def _sealed_seq(env: Env, fact_id: str) -> int:
    return env.ledger.db.texts.of_fact(fact_id)[0][0]


def test_a_hand_edited_sealed_detail_is_named_by_seq(env: Env) -> None:
    a = env.ledger.assert_fact("acct:1", "plan", "pro", actor="agent:a", provenance="attested",
                               cause={"kind": "tool", "ref": "crm#1", "detail": "as said"}).fact_id
    seq = _sealed_seq(env, a)
    blob = bytearray(env.ledger.db.texts.get(seq)[2] or b"")
    blob[-3] ^= 0x01
    env.ledger.close()
    raw_edit(env.path, "UPDATE event_texts SET sealed = ? WHERE seq = ?", (bytes(blob), seq))
    report = env.reopen().verify()
    assert not report.valid and report.first_bad_seq == seq
    assert f"event {seq} has sealed free text that does not decrypt" in (report.problem or "")


def test_swapped_blobs_of_two_facts_fail_verify(env: Env) -> None:
    led = env.ledger
    f1 = led.assert_fact("acct:1", "plan", "pro", actor="agent:a", provenance="attested",
                         cause={"kind": "tool", "ref": "crm#1", "detail": "one"}).fact_id
    f2 = led.assert_fact("acct:1", "tier", "gold", actor="agent:a", provenance="attested",
                         cause={"kind": "tool", "ref": "crm#2", "detail": "two"}).fact_id
    s1, s2 = _sealed_seq(env, f1), _sealed_seq(env, f2)
    r1, r2 = led.db.texts.get(s1), led.db.texts.get(s2)
    assert r1 and r2
    env.ledger.close()
    raw_edit(env.path, "UPDATE event_texts SET sealed = ?, salt = ? WHERE seq = ?", (r2[2], r2[3], s1))
    raw_edit(env.path, "UPDATE event_texts SET sealed = ?, salt = ? WHERE seq = ?", (r1[2], r1[3], s2))
    report = env.reopen().verify()
    assert not report.valid and report.first_bad_seq == s1, report.problem


@pytest.mark.parametrize("edit", ["null", "delete"])
def test_a_blob_removed_without_a_forget_fails_verify(env: Env, edit: str) -> None:
    fact = env.ledger.assert_fact("acct:1", "plan", "pro", actor="agent:a", provenance="attested",
                                  cause={"kind": "tool", "ref": "crm#1"}).fact_id
    env.ledger.retract(fact, actor="agent:a", reason="wrong plan")
    seq = env.ledger.db.texts.of_fact(fact)[-1][0]
    env.ledger.close()
    sql = ("UPDATE event_texts SET sealed = NULL, salt = NULL WHERE seq = ?" if edit == "null"
           else "DELETE FROM event_texts WHERE seq = ?")
    raw_edit(env.path, sql, (seq,))
    report = env.reopen().verify()
    assert not report.valid and report.first_bad_seq == seq
    assert "no forget or expire event erased it" in (report.problem or "")
    # The reads still answer, saying the text is gone.
    assert env.ledger.why(fact).reviews[-1].reason == ERASED_TEXT


def test_a_text_row_moved_to_an_event_without_text_fails_verify(env: Env) -> None:
    fact = env.ledger.assert_fact("acct:1", "plan", "pro", actor="agent:a", provenance="attested",
                                  cause={"kind": "tool", "ref": "crm#1"}).fact_id
    env.ledger.affirm(fact, actor="agent:a")
    seq = _sealed_seq(env, fact)
    env.ledger.close()
    raw_edit(env.path, "UPDATE event_texts SET seq = seq + 1 WHERE seq = ?", (seq,))
    report = env.reopen().verify()
    assert not report.valid and report.first_bad_seq in (seq, seq + 1), report.problem


def test_a_pre_erasure_copy_and_the_current_key_store_cannot_open_the_text(
        make_env: Any, tmp_path: Path) -> None:
    env = make_env(NO_REDACTION)
    ids = _story(env)
    env.ledger.db.wal_checkpoint()
    copy = tmp_path / "copy.db"
    shutil.copyfile(env.path, copy)
    env.ledger.forget_subject("cust:jane", actor="user:dpo", reason="subject_request")
    env.ledger.close()
    con = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READONLY)
    rows = list(con.execute("SELECT fact_id, subject_ref, sealed FROM event_texts "
                            "WHERE fact_id IN (?, ?, ?)", (ids["email"], ids["name"], ids["card"])))
    con.close()
    assert len(rows) >= 5 and all(blob is not None for _, _, blob in rows)
    keys = KeyRing.open(env.path)
    try:
        codec = TextCodec(keys)
        assert [codec.open(f, ref, bytes(blob)) for f, ref, blob in rows] == [None] * len(rows)
        # The copy's other subject still opens: the key store was not simply unusable.
        con = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READONLY)
        f, ref, blob = next(iter(con.execute(
            "SELECT fact_id, subject_ref, sealed FROM event_texts WHERE fact_id = ?", (ids["other"],))))
        con.close()
        assert codec.open(f, ref, bytes(blob)) == {"cause.detail": "an unrelated customer upgraded",
                                                   "cause.ref": "desk-note-other"}
    finally:
        keys.close()


# ---- packs and exports -----------------------------------------------------------------------

def test_packs_carry_the_opened_text_with_its_salt_and_null_once_erased(env: Env,
                                                                        tmp_path: Path) -> None:
    led = env.ledger
    fact = led.assert_fact("acct:1", "plan", "pro", actor="agent:a", provenance="attested",
                           cause={"kind": "tool", "ref": "crm#1", "detail": "Asha said so"}).fact_id
    led.retract(fact, actor="agent:a", reason="Asha changed her mind")
    pem = led.keys.public_pem() if led.keys else ""
    text = pack_text(led.pack(fact))
    document = json.loads(text)
    sealed = [e for e in document["events"] if "sealed_text" in e["event"]]
    assert {json.dumps(e["text"], sort_keys=True) for e in sealed} == {
        json.dumps({"cause.detail": "Asha said so", "cause.ref": "crm#1"}, sort_keys=True),
        json.dumps({"reason": "Asha changed her mind"}, sort_keys=True)}
    assert all(e["text_salt"] for e in sealed)
    assert verify_pack(text, pem).valid
    sealed[0]["text"]["cause.detail"] = "Asha never said so"
    report = verify_pack(document, pem)
    assert not report.valid and any("free text does not match its commitment" in p
                                    for p in report.problems)
    led.forget(fact, actor="user:dpo", reason="subject_request")
    after = json.loads(pack_text(led.pack(fact)))
    assert all(e["text"] is None and e["text_salt"] is None
               for e in after["events"] if "sealed_text" in e["event"])
    assert verify_pack(pack_text(led.pack(fact)), pem).valid
    out = tmp_path / "export.jsonl"
    led.export(out)
    assert "Asha" not in out.read_text()
    assert verify_export(out, pem).valid
