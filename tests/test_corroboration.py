"""Corroboration: a claimed value asserted in N distinct sessions is confirmed by system:custody
at the Nth and not before; rejected or forgotten values never count; why shows it."""

from __future__ import annotations

from typing import Any

from custody_app.core.ledger_core import SYSTEM_ACTOR
from tests.conftest import REVIEWER, Env

POLICY = "[quarantine]\ncorroborate = 3\n"


def claim(env: Env, session: str | None, value: Any = "pro", actor: str = "agent:a") -> str:
    return env.put("acct:7", "plan", value, actor=actor, provenance="claimed", session=session)


def test_confirmed_at_the_nth_distinct_session_and_not_before(make_env: Any) -> None:
    env = make_env(POLICY)
    first = claim(env, "s1")
    again = claim(env, "s1")  # the same session twice is not independent
    other = claim(env, "s2", value="basic")  # another value does not count
    assert {env.status(f) for f in (first, again, other)} == {"quarantined"}
    second = claim(env, "s2", actor="agent:b")
    assert env.status(first) == "quarantined" and env.status(second) == "quarantined"
    third = claim(env, "s3", actor="agent:c")
    for fact in (first, again, second, third):
        assert env.status(fact) == "active", fact
    assert env.status(other) == "quarantined"
    confirm = [e for e in env.ledger.history(first).events if e.kind == "confirm"]
    assert len(confirm) == 1 and confirm[0].actor == SYSTEM_ACTOR
    why = env.ledger.why(first)
    [review] = [r for r in why.reviews if r.kind == "confirm"]
    assert review.actor == SYSTEM_ACTOR and "3 distinct sessions" in (review.reason or "")
    assert second in (review.reason or "") and third in (review.reason or "")
    assert env.ledger.verify().valid and env.ledger.rebuild().differences == []


def test_a_rejected_or_forgotten_value_never_counts(make_env: Any) -> None:
    # digest "none": a re-written forgotten value is not marked previously_forgotten (which
    # would keep it out anyway), so this shows the forgotten fact itself is not counted.
    env = make_env(POLICY + '[erasure]\ndigest = "none"\n')
    rejected = claim(env, "s1")
    env.ledger.reject(rejected, actor=REVIEWER, reason="wrong")
    forgotten = claim(env, "s2")
    env.ledger.forget(forgotten, actor="user:dpo", reason="subject_request")
    a = claim(env, "s3")
    b = claim(env, "s4")
    assert env.status(a) == "quarantined" and env.status(b) == "quarantined"
    c = claim(env, "s5")
    assert {env.status(f) for f in (a, b, c)} == {"active"}
    assert env.status(rejected) == "retracted" and env.status(forgotten) == "forgotten"


def test_off_by_default(env: Env) -> None:
    facts = [claim(env, f"s{i}") for i in range(5)]
    assert {env.status(f) for f in facts} == {"quarantined"}


def test_a_previously_forgotten_value_is_neither_counted_nor_lifted(make_env: Any) -> None:
    env = make_env(POLICY)
    env.ledger.forget(claim(env, "s0"), actor="user:dpo", reason="subject_request")
    again = [claim(env, f"s{i}") for i in range(1, 5)]
    assert {env.status(f) for f in again} == {"quarantined"}
