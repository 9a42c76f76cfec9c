"""Redaction beyond the value (issue 15, DESIGN section 13): every free-text field an event
stores, with value-free reports; IFSC and bank account detectors gated by context, with the
near-misses that must pass untouched."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from custody_app.domain.redaction import find, redact
from tests.conftest import Env

EMAIL = "asha.k@example.in"
CARD = "4111 1111 1111 1111"
ACCOUNT = "50100123456789"


def kinds(text: str) -> list[tuple[str, str]]:
    return [(f.kind, text[f.start:f.end]) for f in find(text)]


@pytest.mark.parametrize(("text", "expected"), [
    ("IFSC: SBIN0001234", [("ifsc", "SBIN0001234")]),
    ("send to HDFC0000123 today", [("ifsc", "HDFC0000123")]),
    ("NEFT to KARB0000001", [("ifsc", "KARB0000001")]),
    ("A/c no. 50100123456789", [("bank_account", "50100123456789")]),
    ("a/c: 123 456 789 012", [("bank_account", "123 456 789 012")]),
    ("Acct # 0012-3456-7890", [("bank_account", "0012-3456-7890")]),
    ("account number 001234567890", [("bank_account", "001234567890")]),
])
def test_indian_bank_identifiers_are_found(text: str, expected: list[tuple[str, str]]) -> None:
    assert kinds(text) == expected


@pytest.mark.parametrize("text", [
    "ABCD0123456",                       # IFSC shape, unknown bank, no cue
    "order ORD0000123X",                 # no zero after four letters
    "HDFC0ABCDEF is a code name",        # known bank code, but a branch with no digit
    "A/c 12345",                         # too short for an account
    "account 2024 renewal",
    "order 123456789012",                # a long number with no account cue
    "amount 1234567890.50 on a/c 123456789.00",  # decimals are amounts
    "account number 123456789012345678901",      # 21 digits: no account is that long
    "invoice A/C-2024",
])
def test_near_misses_pass_untouched(text: str) -> None:
    assert kinds(text) == []


def test_redact_masks_the_new_kinds_in_values() -> None:
    masked, findings = redact({"pay": f"IFSC SBIN0001234 A/c {ACCOUNT}"})
    assert masked == {"pay": "IFSC [ifsc] A/c [bank_account]"}
    assert [f.kind for f in findings] == ["ifsc", "bank_account"]


def raw_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def test_every_free_text_field_is_redacted_before_it_is_stored(make_env) -> None:
    env: Env = make_env()
    ledger = env.ledger
    res = ledger.assert_fact(
        "acct:42", "plan", "basic", actor="agent:support",
        cause={"kind": "message", "ref": f"mail from {EMAIL}",
               "detail": f"card {CARD}, A/c no. {ACCOUNT}, IFSC HDFC0000123"})
    env.put("acct:42", "tier", "gold")
    ledger.retract(res.fact_id, actor="agent:support", reason=f"customer {EMAIL} withdrew it")
    ledger.act("sess-1", "billing.refund", f"RF for {EMAIL}", f"refunded to card {CARD}",
               actor="agent:support")
    # The reason is sealed (it is about a fact): its redacted text is what opens.
    retract = [e for e in ledger.history(res.fact_id).events if e.kind == "retract"][0]
    opened = retract.model_dump()
    ledger.close()
    data = raw_bytes(env.path)
    for secret in (EMAIL, CARD, ACCOUNT, "HDFC0000123", CARD.replace(" ", "")):
        assert secret.encode() not in data, secret
    conn = apsw.Connection(str(env.path), flags=apsw.SQLITE_OPEN_READONLY)
    bodies = {kind: json.loads(body) for kind, body in
              conn.execute("SELECT kind, body FROM events WHERE kind IN ('assert', 'retract', "
                           "'acted') ORDER BY seq")}
    conn.close()
    bodies["retract"]["reason"] = opened["reason"]
    report = bodies["acted"]["redactions"]
    assert {(r["field"], r["kind"]) for r in report} == {("ref", "email"), ("outcome", "card")}
    assert bodies["retract"]["reason"] == "customer [email] withdrew it"
    assert bodies["retract"]["redactions"] == [{"field": "reason", "kind": "email",
                                                 "start": 9, "end": 9 + len(EMAIL)}]
    # the reports carry where and what kind, never the text
    assert EMAIL not in json.dumps(bodies)


def test_a_write_without_identifiers_has_no_report(make_env) -> None:
    env: Env = make_env()
    fact = env.put("acct:42", "plan", "basic")
    env.ledger.retract(fact, actor="agent:support", reason="a plain reason, order 123456789012")
    assert env.ledger.verify().valid
    body = env.ledger.db.conn.execute(
        "SELECT body FROM events WHERE kind = 'retract'").fetchone()[0]
    assert "redactions" not in json.loads(body)
    retract = env.ledger.history(fact).events[-1].model_dump()
    assert retract["reason"] == "a plain reason, order 123456789012"


def test_free_text_is_read_from_any_model_that_can_hold_it() -> None:
    # Names no strict model can hold are skipped without a lookup; a model that allows extra
    # fields, or names one as a property, is still read.
    from pydantic import BaseModel, ConfigDict

    from custody_app.domain.text_fields import redact_fields

    class Loose(BaseModel):
        model_config = ConfigDict(extra="allow")
        actor: str

    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")
        note: str

        @property
        def reason(self) -> str:
            return self.note

    loose = Loose.model_validate({"actor": "a", "reason": "mail ana.silva@example.com"})
    assert redact_fields(loose, ["email"])[1] == [
        {"field": "reason", "kind": "email", "start": 5, "end": 26}]
    strict = Strict(note="mail ana.silva@example.com")
    from custody_app.domain import text_fields
    assert text_fields._anything_found(strict, ["email"])
    assert not text_fields._anything_found(Strict(note="nothing here"), ["email"])
