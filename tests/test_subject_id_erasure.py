"""forget_subject leaves no plaintext of the subject id anywhere in the ledger file (DESIGN 13),
including facts forgotten or expired earlier, and its certificate scans for the id."""

from __future__ import annotations

import pytest

from tests.conftest import Env, day, ledger_bytes

SUBJECT = "acct:ZQX-SUBJECT-ID-9911"


@pytest.mark.parametrize("earlier", ["forget", "sweep", "all_forgotten"])
def test_no_plaintext_subject_id_survives_forget_subject(env: Env, earlier: str) -> None:
    first = env.put(SUBJECT, "plan", "basic plan value", space="team:a")
    if earlier != "all_forgotten":
        env.put(SUBJECT, "region", "eu-west region", space="org")
    env.put("acct:OTHER-0000-1", "plan", "other plan value")
    env.at(day(2))
    if earlier == "sweep":
        env.ledger.sweep(before=day(2), space="team:a", actor="user:dpo", reason="retention")
    else:
        env.ledger.forget(first, actor="user:dpo", reason="subject_request")
    assert SUBJECT.encode() in ledger_bytes(env.path)  # still named before forget_subject
    env.at(day(3))
    result = env.ledger.forget_subject(SUBJECT, actor="user:dpo", reason="subject_request")
    assert SUBJECT.encode() not in ledger_bytes(env.path)
    cert = result.certificate
    assert cert.complete
    subject_check = [p for p in cert.places if p.place == "plaintext subject id"]
    assert [p.outcome for p in subject_check] == ["clean"]
    scans = [p for p in cert.places if p.place.startswith("byte scan of")]
    assert scans and all(p.outcome == "clean" for p in scans)
    assert env.ledger.rebuild().differences == []
    assert env.ledger.verify().valid
    assert env.ledger.db.facts.get(first).subject.startswith("erased:")  # type: ignore[union-attr]


def test_the_certificate_finds_the_subject_id_where_it_is_left(env: Env) -> None:
    """The scan really searches for the id: a copy left in a derived table is reported."""
    env.put(SUBJECT, "plan", "basic plan value")
    env.ledger.db.conn.execute(
        "CREATE TABLE stray(x TEXT); INSERT INTO stray VALUES (?)", (SUBJECT,))
    result = env.ledger.forget_subject(SUBJECT, actor="user:dpo", reason="subject_request")
    # Located and listed (how a hit is classified, leak or shared, is the proof's business).
    assert any(p.outcome in ("found", "shared") for p in result.certificate.places
               if p.place.startswith("byte scan of"))


def test_a_short_subject_id_is_marked_unverifiable(env: Env) -> None:
    env.put("u:7", "plan", "basic plan value")
    cert = env.ledger.forget_subject("u:7", actor="user:dpo", reason="subject_request").certificate
    assert [p.outcome for p in cert.places if p.place == "plaintext subject id"] == ["unverifiable"]
