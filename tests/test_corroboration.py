"""Corroboration by distinct identities (DESIGN 14, issue 31): a claimed value is confirmed by
system:custody once N distinct identities assert it (writer keys, or receipts of distinct
issuers covering the value), never sessions of one writer or unkeyed writers by name; it never
displaces a trusted fact or a reviewer's decision; the other pending copies close as duplicates.
(Until the writer-key `signer` field lands, identities here are receipt issuers; identity_of
is tested on event bodies.)"""

from __future__ import annotations

from typing import Any

import pytest

from custody_app.core.ledger_core import SYSTEM_ACTOR
from custody_app.domain.identity import identity_of
from custody_app.interfaces.mcp.tools import MemoryTools
from custody_app.ledger.corroborate import CORROBORATED_DUPLICATE
from custody_app.receipts import public_hex, sign
from tests.conftest import REVIEWER, Env

KEY_A, KEY_B = bytes(range(32)), bytes(range(1, 33))  # test material: two issuer keys
ISSUERS = (f'[provenance]\nreceipt_issuers = {{"gw:a" = "{public_hex(KEY_A)}", '
           f'"gw:b" = "{public_hex(KEY_B)}"}}\n')
POLICY = ISSUERS + "[quarantine]\ncorroborate = 2\n"
T0 = "2026-09-01T00:00:00Z"


def claim(env: Env, session: str | None, value: Any = "pro", actor: str = "agent:a",
          **extra: Any) -> str:
    return env.put("acct:7", "plan", value, actor=actor, provenance="claimed", session=session,
                   **extra)


def vouched(env: Env, issuer: str, key: bytes, session: str, value: Any = "pro") -> str:
    """A fact written citing a receipt of `issuer` that covers it: verified, one identity."""
    rc = sign(key, issuer=issuer, receipt_id=f"rc-{issuer}-{session}", tool="crm.lookup",
              session=session, arguments={"account": "acct:7"}, output=value, issued_at=T0,
              subject="acct:7", predicate="plan", audience=env.ledger.ledger_id)
    result = env.ledger.assert_fact("acct:7", "plan", value, actor="agent:gw", session=session,
                                    cause={"kind": "tool", "ref": "call", "receipt": rc})
    assert result.provenance == "verified"
    return result.fact_id


def system_events(env: Env, fact_id: str) -> list[tuple[str, str | None]]:
    return [(e.kind, e.reason) for e in env.ledger.why(fact_id).reviews if e.actor == SYSTEM_ACTOR]


def test_one_mcp_agent_reconnecting_never_corroborates_itself(make_env: Any) -> None:
    """Unkeyed agent, asset 'what is believed': with corroborate = 2 one MCP agent's claim,
    written again after a reconnect (a new session), was confirmed by system:custody and
    superseded a user's verified fact. Two agent names in two sessions are no better."""
    env = make_env(POLICY)
    users = env.put("acct:7", "plan", "basic", actor="user:dana", provenance="verified")
    tools = MemoryTools(env.ledger, "agent:bot")
    write = {"subject": "acct:7", "predicate": "plan", "value": "pro", "supersedes": users,
             "cause": {"kind": "message", "ref": "m-1"}}
    first = tools.call("memory_write", write, "mcp-session-1").model_dump()["fact_id"]
    # While the first replacement waits, the copies restate the value without `supersedes`.
    copy = {k: v for k, v in write.items() if k != "supersedes"}
    again = tools.call("memory_write", copy, "mcp-session-2").model_dump()["fact_id"]
    other = MemoryTools(env.ledger, "agent:bot2").call("memory_write", copy, "s-3")
    claims = [first, again, other.model_dump()["fact_id"]]
    assert {env.status(f) for f in claims} == {"quarantined"}
    assert [f.value for f in env.ledger.as_of(subject="acct:7").facts] == ["basic"]
    assert all(system_events(env, f) == [] for f in claims)


def test_a_value_a_reviewer_rejected_is_never_corroborated_again(make_env: Any) -> None:
    env = make_env(POLICY)
    rejected = claim(env, "s1")
    env.ledger.reject(rejected, actor=REVIEWER, reason="wrong")
    later = [claim(env, "s2"), claim(env, "s3", actor="agent:b")]
    assert {env.status(f) for f in later} == {"quarantined"}  # sessions: it came back here
    vouched(env, "gw:a", KEY_A, "s4")
    vouched(env, "gw:b", KEY_B, "s5")
    assert {env.status(f) for f in later} == {"quarantined"}
    assert all(system_events(env, f) == [] for f in later)


def test_receipts_of_distinct_issuers_corroborate_one_claim_and_close_the_copies(
        make_env: Any) -> None:
    env = make_env(POLICY)
    first, second = claim(env, "s1"), claim(env, "s2", actor="agent:b")
    vouched(env, "gw:a", KEY_A, "s3")
    vouched(env, "gw:a", KEY_A, "s4")  # the same issuer again is the same identity
    assert {env.status(f) for f in (first, second)} == {"quarantined"}
    vouched(env, "gw:b", KEY_B, "s5")
    assert (env.status(first), env.status(second)) == ("active", "retracted")
    [(kind, reason)] = system_events(env, first)
    assert kind == "confirm" and "2 distinct identities" in (reason or "")
    assert "receipt-issuer:gw:a" in (reason or "") and "receipt-issuer:gw:b" in (reason or "")
    assert system_events(env, second) == [("reject", CORROBORATED_DUPLICATE)]
    assert [e.kind for e in env.ledger.history(second).events][-1] == "reject"
    assert env.ledger.verify().valid and env.ledger.rebuild().differences == []


def test_a_corroborated_claim_never_displaces_a_trusted_fact(make_env: Any) -> None:
    env = make_env(POLICY)
    users = env.put("acct:7", "plan", "basic", actor="user:dana", provenance="verified")
    replacing = claim(env, "s1", supersedes=users)
    vouched(env, "gw:a", KEY_A, "s2")
    vouched(env, "gw:b", KEY_B, "s3")
    assert env.status(replacing) == "quarantined" and env.status(users) == "active"
    assert system_events(env, replacing) == []


def test_a_rejected_or_forgotten_value_never_counts(make_env: Any) -> None:
    env = make_env(POLICY + '[erasure]\ndigest = "none"\n')
    forgotten = vouched(env, "gw:a", KEY_A, "s1")
    env.ledger.forget(forgotten, actor="user:dpo", reason="subject_request")
    pending = claim(env, "s2")
    vouched(env, "gw:b", KEY_B, "s3")
    assert env.status(pending) == "quarantined"  # gw:a's fact was erased: one identity left


def test_off_by_default(make_env: Any) -> None:
    env = make_env(ISSUERS)
    facts = [claim(env, f"s{i}") for i in range(3)]
    vouched(env, "gw:a", KEY_A, "s8")
    vouched(env, "gw:b", KEY_B, "s9")
    assert {env.status(f) for f in facts} == {"quarantined"}


def test_a_previously_forgotten_value_is_neither_counted_nor_lifted(make_env: Any) -> None:
    env = make_env(POLICY)
    env.ledger.forget(claim(env, "s0"), actor="user:dpo", reason="subject_request")
    again = [claim(env, "s1")]
    for issuer, key, session in (("gw:a", KEY_A, "s2"), ("gw:b", KEY_B, "s3")):
        rc = sign(key, issuer=issuer, receipt_id=f"rc-{session}", tool="crm.lookup",
                  session=session, arguments={}, output="pro", issued_at=T0, subject="acct:7",
                  predicate="plan", audience=env.ledger.ledger_id)
        again.append(env.ledger.assert_fact("acct:7", "plan", "pro", actor="agent:gw",
                                            session=session, cause={"kind": "tool", "ref": "c",
                                                                    "receipt": rc}).fact_id)
    assert {env.status(f) for f in again} == {"quarantined"}


KEYHEX = "ab" * 32


@pytest.mark.parametrize(("body", "expected"), [
    ({"signer": f"ed25519:{KEYHEX}"}, f"ed25519:{KEYHEX}"),
    ({}, None),  # an unkeyed writer proves no identity, whatever its name or session
    ({"signer": None, "actor": "agent:bot", "session": "s1"}, None),
    ({"signer": f"ed25519:{KEYHEX[:-2]}"}, None),  # not a whole key
    ({"signer": f"ED25519:{KEYHEX}"}, None),
    ({"signer": f"ed25519:{KEYHEX}\n"}, None),
    ({"signer": ["ed25519", KEYHEX]}, None),
])
def test_identity_of_an_event_body(body: dict[str, Any], expected: str | None) -> None:
    assert identity_of(body) == expected
