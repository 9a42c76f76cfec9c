"""Attacks named by docs/threat-model.md that no other test made: each one a cell of the matrix.

A receipt is evidence for a value, never a pardon for one that was erased: a forgotten value
written again with a valid receipt whose output is that very value stays out of every read."""

from __future__ import annotations

from typing import Any

from custody_app.domain.timeutil import format_time
from custody_app.receipts import public_hex, sign
from tests.conftest import Env, day

KEY = bytes(range(32))  # test material: a fixed issuer key
ISSUER = "gateway:crm"
SESSION = "sess-1"
VALUE = {"tier": "pro", "seats": 12}
POLICY = f'[provenance]\nreceipt_issuers = {{"{ISSUER}" = "{public_hex(KEY)}"}}\n'


def _write_with_receipt(env: Env, receipt_id: str) -> Any:
    receipt = sign(KEY, issuer=ISSUER, receipt_id=receipt_id, tool="crm.lookup", session=SESSION,
                   arguments={"account": "acct:42"}, output=VALUE, subject="acct:42",
                   predicate="plan", issued_at=format_time(env.clock.now()),
                   audience=env.ledger.ledger_id)
    # A receipt that covers the fact (issue 31): its subject and predicate, issued just now.
    return env.ledger.assert_fact(
        "acct:42", "plan", VALUE, actor="agent:bot", session=SESSION,
        cause={"kind": "tool", "ref": f"call-{receipt_id}", "receipt": receipt})


def test_a_receipt_does_not_lift_a_previously_forgotten_value(make_env: Any) -> None:
    env: Env = make_env(POLICY)
    first = _write_with_receipt(env, "rc-1")
    assert first.status == "active" and first.provenance != "claimed"
    env.at(day(2))
    env.ledger.forget(first.fact_id, actor="user:dpo", reason="subject_request")
    env.at(day(3))
    again = _write_with_receipt(env, "rc-2")
    assert (again.status, again.provenance) == ("quarantined", "claimed")
    [created] = env.ledger.history(again.fact_id).events
    assert created.model_dump()["marks"] == ["previously_forgotten"]
    assert env.ledger.as_of(subject="acct:42").facts == []
    assert env.ledger.recall("pro seats", k=10).results == []
