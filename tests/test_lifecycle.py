"""The fact lifecycle (DESIGN sections 4 and 10): every refusal writes nothing, every legal move."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from custody_app.domain.errors import LedgerError
from tests.conftest import CAUSE, REVIEWER, WRITER, Env, day


@contextmanager
def refused(env: Env, code: str) -> Iterator[None]:
    """The block raises LedgerError `code` and leaves chain and projection exactly as they were."""
    before = env.snapshot()
    with pytest.raises(LedgerError) as info:
        yield
    assert info.value.code == code, info.value.message
    assert info.value.message
    assert env.snapshot() == before


def ids(env: Env, include: str = "attested", **filters: Any) -> list[str]:
    return [f.fact_id for f in env.ledger.as_of(include=include, **filters).facts]


REVIEW_OPS = ("confirm", "reject")


def review(env: Env, op: str, fact_id: str, actor: str = REVIEWER) -> Any:
    call: Callable[..., Any] = getattr(env.ledger, op)
    return call(fact_id, actor=actor, reason="looked at it")


# ---- supersede refusals -----------------------------------------------------------------

def test_supersede_unknown_fact(env: Env) -> None:
    env.put()
    with refused(env, "unknown_fact"):
        env.put(value="pro", supersedes="f_nope")


def test_supersede_unknown_fact_on_empty_ledger_writes_no_policy_event(env: Env) -> None:
    with refused(env, "unknown_fact"):
        env.put(value="pro", supersedes="f_nope")
    assert env.ledger.verify().events == 0


def test_supersede_already_superseded(env: Env) -> None:
    old = env.put()
    env.put(value="pro", supersedes=old)
    with refused(env, "already_superseded"):
        env.put(value="enterprise", supersedes=old)


def test_supersede_refused_while_first_replacement_is_pending_quarantine(env: Env) -> None:
    old = env.put()
    pending = env.put(value="pro", supersedes=old, provenance="claimed")
    assert env.status(pending) == "quarantined"
    # Default reads still believe the old fact, but it may not be superseded a second time.
    assert ids(env) == [old]
    # A second unreviewed claim is refused; a trusted correction is not (DESIGN 13, and
    # tests/test_retractions.py for the closing of the pending claim).
    with refused(env, "already_superseded"):
        env.put(value="enterprise", supersedes=old, provenance="claimed")


def test_supersede_retracted_fact(env: Env) -> None:
    old = env.put()
    env.ledger.retract(old, actor=WRITER, reason="wrong account")
    with refused(env, "fact_retracted"):
        env.put(value="pro", supersedes=old)


def test_supersede_rejected_fact(env: Env) -> None:
    old = env.put(provenance="claimed")
    env.ledger.reject(old, actor=REVIEWER, reason="no evidence")
    with refused(env, "fact_retracted"):
        env.put(value="pro", supersedes=old)


@pytest.mark.parametrize(("subject", "predicate"), [("acct:43", "plan"), ("acct:42", "tier"),
                                                    ("acct:43", "tier")])
def test_supersede_mismatch(env: Env, subject: str, predicate: str) -> None:
    old = env.put("acct:42", "plan")
    with refused(env, "supersede_mismatch"):
        env.put(subject, predicate, "pro", supersedes=old)


def test_replacement_starting_before_replaced(env: Env) -> None:
    old = env.put(valid_from=day(3))
    with refused(env, "starts_before_replaced"):
        env.put(value="pro", supersedes=old, valid_from=day(2))
    # Starting exactly when the replaced fact starts is allowed.
    env.put(value="pro", supersedes=old, valid_from=day(3))


def test_replacement_defaulting_to_now_before_a_future_fact(env: Env) -> None:
    old = env.put(valid_from=day(10))
    with refused(env, "starts_before_replaced"):
        env.put(value="pro", supersedes=old)


# ---- retract refusals -------------------------------------------------------------------

def test_retract_unknown(env: Env) -> None:
    env.put()
    with refused(env, "unknown_fact"):
        env.ledger.retract("f_nope", actor=WRITER, reason="oops")


def test_retract_already_retracted(env: Env) -> None:
    fact = env.put()
    env.ledger.retract(fact, actor=WRITER, reason="oops")
    with refused(env, "already_retracted"):
        env.ledger.retract(fact, actor=WRITER, reason="oops again")


def test_retract_rejected_fact(env: Env) -> None:
    fact = env.put(provenance="claimed")
    env.ledger.reject(fact, actor=REVIEWER, reason="no evidence")
    with refused(env, "already_retracted"):
        env.ledger.retract(fact, actor=WRITER, reason="oops")


# ---- confirm / reject refusals ----------------------------------------------------------

@pytest.mark.parametrize("op", REVIEW_OPS)
def test_review_unknown(env: Env, op: str) -> None:
    env.put(provenance="claimed")
    with refused(env, "unknown_fact"):
        review(env, op, "f_nope")


@pytest.mark.parametrize("op", REVIEW_OPS)
def test_review_retracted(env: Env, op: str) -> None:
    fact = env.put(provenance="claimed")
    env.ledger.retract(fact, actor=WRITER, reason="oops")
    with refused(env, "fact_retracted"):
        review(env, op, fact)


@pytest.mark.parametrize("op", REVIEW_OPS)
def test_review_rejected(env: Env, op: str) -> None:
    fact = env.put(provenance="claimed")
    env.ledger.reject(fact, actor=REVIEWER, reason="no")
    with refused(env, "fact_retracted"):
        review(env, op, fact)


@pytest.mark.parametrize("op", REVIEW_OPS)
@pytest.mark.parametrize("provenance", ["attested", "verified"])
def test_review_not_quarantined(env: Env, op: str, provenance: str) -> None:
    fact = env.put(provenance=provenance)
    with refused(env, "not_quarantined"):
        review(env, op, fact)


@pytest.mark.parametrize("op", REVIEW_OPS)
def test_review_already_confirmed(env: Env, op: str) -> None:
    fact = env.put(provenance="claimed")
    env.ledger.confirm(fact, actor=REVIEWER)
    with refused(env, "not_quarantined"):
        review(env, op, fact)


@pytest.mark.parametrize("op", REVIEW_OPS)
def test_review_own_write(env: Env, op: str) -> None:
    fact = env.put(provenance="claimed", actor="user:alice")
    with refused(env, "own_write"):
        review(env, op, fact, actor="user:alice")
    # Own writer compares the full kind:id: another user, or a reviewer named alice, may review.
    review(env, op, fact, actor="reviewer:alice")


@pytest.mark.parametrize("op", REVIEW_OPS)
@pytest.mark.parametrize("actor", ["agent:helper", "llm:gpt", "system:cron", "rule:r1"])
def test_review_not_reviewer(env: Env, op: str, actor: str) -> None:
    fact = env.put(provenance="claimed")
    with refused(env, "not_reviewer"):
        review(env, op, fact, actor=actor)


def test_policy_named_reviewer(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[review]\nreviewer_kinds = ["reviewer"]\nreviewers = ["agent:boss"]\n')
    env = Env(tmp_path / "ledger.db", policy)
    try:
        fact = env.put(provenance="claimed")
        with refused(env, "not_reviewer"):
            env.ledger.confirm(fact, actor="user:rev")
        assert env.ledger.confirm(fact, actor="agent:boss").status == "active"
    finally:
        env.ledger.close()


# ---- validation at the door -------------------------------------------------------------

@pytest.mark.parametrize("provenance", ["attested", "verified"])
def test_declared_provenance_not_allowed(tmp_path: Path, provenance: str) -> None:
    policy = tmp_path / "strict.toml"
    policy.write_text("[provenance]\nallow_declared = false\n")
    env = Env(tmp_path / "ledger.db", policy)
    try:
        env.put(provenance="claimed")
        with refused(env, "provenance_not_allowed"):
            env.put(value="pro", provenance=provenance)
    finally:
        env.ledger.close()


def test_llm_actor_without_llm_block(env: Env) -> None:
    env.put()
    with refused(env, "llm_block"):
        env.put(value="pro", actor="llm:gpt-5")


def test_llm_actor_without_llm_block_on_empty_ledger(env: Env) -> None:
    # The policy event the write would have recorded first is rolled back with it.
    with refused(env, "llm_block"):
        env.put(value="pro", actor="llm:gpt-5")
    assert env.ledger.verify().events == 0


def test_llm_block_on_non_llm_actor(env: Env) -> None:
    env.put()
    with refused(env, "llm_block"):
        env.put(value="pro", actor="agent:a", llm={"model": "gpt-5"})


def test_llm_actor_with_llm_block(env: Env) -> None:
    fact = env.put(actor="llm:gpt-5", llm={"model": "gpt-5", "tokens": 12, "output_hash": "ab"})
    why = env.ledger.why(fact)
    assert why.llm is not None and why.llm.model == "gpt-5"


def test_derived_assert_naming_nonexistent_source(env: Env) -> None:
    src = env.put("acct:42", "email", "a@example.org")
    with refused(env, "unknown_fact"):
        env.put("acct:42", "domain", "example.org", sources=[src, "f_nope"])


def test_derived_assert_with_empty_sources(env: Env) -> None:
    env.put()
    with refused(env, "bad_request"):
        env.put("acct:42", "domain", "example.org", sources=[])


@pytest.mark.parametrize("ref", ["", "   "])
def test_cause_with_empty_ref(env: Env, ref: str) -> None:
    env.put()
    with refused(env, "bad_request"):
        env.ledger.assert_fact("acct:42", "plan", "pro", actor=WRITER,
                               cause={"kind": "message", "ref": ref})


def test_cause_kind_outside_closed_set(env: Env) -> None:
    env.put()
    with refused(env, "bad_request"):
        env.ledger.assert_fact("acct:42", "plan", "pro", actor=WRITER,
                               cause={"kind": "rumour", "ref": "x"})


def test_actor_kind_outside_closed_set(env: Env) -> None:
    env.put()
    with refused(env, "invalid_actor"):
        env.put(value="pro", actor="robot:r2")


def test_null_value_refused(env: Env) -> None:
    env.put()
    with refused(env, "bad_request"):
        env.put(value=None)


@pytest.mark.parametrize(("valid_from", "valid_to"), [(day(3), day(3)), (day(3), day(2)),
                                                      (None, day(1))])
def test_empty_or_inverted_valid_interval(env: Env, valid_from: str | None,
                                          valid_to: str) -> None:
    env.put()
    extra = {"valid_from": valid_from} if valid_from else {}
    with refused(env, "invalid_interval"):
        env.put(value="pro", valid_to=valid_to, **extra)


@pytest.mark.parametrize("op", ["retract", "reject", "confirm"])
def test_reason_over_500_chars(env: Env, op: str) -> None:
    fact = env.put(provenance="claimed")
    call = {"retract": env.ledger.retract, "reject": env.ledger.reject,
            "confirm": env.ledger.confirm}[op]
    actor = WRITER if op == "retract" else REVIEWER
    with refused(env, "bad_request"):
        call(fact, actor=actor, reason="x" * 501)
    # Exactly 500 characters is allowed.
    call(fact, actor=actor, reason="x" * 500)


# ---- legal moves ------------------------------------------------------------------------

def test_claimed_write_is_quarantined_and_hidden_by_default(env: Env) -> None:
    fact = env.put(provenance="claimed")
    assert env.status(fact) == "quarantined"
    assert ids(env) == []
    assert ids(env, include="verified") == []
    [shown] = env.ledger.as_of(include="claimed").facts
    assert (shown.fact_id, shown.status, shown.provenance) == (fact, "quarantined", "claimed")


def test_write_defaults_to_claimed(env: Env) -> None:
    result = env.ledger.assert_fact("acct:42", "plan", "pro", actor=WRITER, cause=CAUSE)
    assert (result.status, result.provenance) == ("quarantined", "claimed")


@pytest.mark.parametrize("provenance", ["attested", "verified"])
def test_declared_provenance_is_active_at_once(env: Env, provenance: str) -> None:
    fact = env.put(provenance=provenance)
    [shown] = env.ledger.as_of().facts
    assert (shown.fact_id, shown.status, shown.provenance) == (fact, "active", provenance)


def test_confirm_makes_it_active(env: Env) -> None:
    fact = env.put(provenance="claimed")
    env.at(day(2))
    result = env.ledger.confirm(fact, actor=REVIEWER, reason="checked the invoice")
    assert result.status == "active"
    [shown] = env.ledger.as_of().facts
    assert (shown.fact_id, shown.status, shown.provenance) == (fact, "active", "attested")
    assert ids(env, include="verified") == []


def test_reject_counts_as_a_retraction(env: Env) -> None:
    fact = env.put(provenance="claimed")
    result = env.ledger.reject(fact, actor=REVIEWER, reason="no evidence")
    assert result.status == "retracted"
    assert env.status(fact) == "retracted"
    for include in ("claimed", "attested", "verified"):
        assert ids(env, include=include) == []
    with pytest.raises(LedgerError) as info:
        env.ledger.retract(fact, actor=WRITER, reason="again")
    assert info.value.code == "already_retracted"


def test_retract_active_and_quarantined(env: Env) -> None:
    active = env.put("acct:1")
    quarantined = env.put("acct:2", provenance="claimed")
    assert env.ledger.retract(active, actor=WRITER, reason="wrong").status == "retracted"
    assert env.ledger.retract(quarantined, actor=WRITER, reason="wrong").status == "retracted"
    assert ids(env, include="claimed") == []


def test_supersede_active_fact(env: Env) -> None:
    old = env.put()
    env.at(day(2))
    new = env.put(value="pro", supersedes=old)
    assert env.status(old) == "superseded"
    assert env.status(new) == "active"
    assert ids(env) == [new]


def test_supersede_quarantined_fact(env: Env) -> None:
    old = env.put(provenance="claimed")
    new = env.put(value="pro", supersedes=old)
    assert env.status(old) == "superseded"
    assert ids(env, include="claimed") == [new]


def test_retract_superseded_fact(env: Env) -> None:
    old = env.put()
    env.at(day(2))
    new = env.put(value="pro", supersedes=old)
    assert env.ledger.retract(old, actor=WRITER, reason="never true").status == "retracted"
    # Retracting the replacement afterwards does not bring a retracted fact back.
    env.ledger.retract(new, actor=WRITER, reason="also wrong")
    assert env.status(old) == "retracted"
    assert ids(env, include="claimed") == []


def test_retracting_a_replacement_restores_the_replaced_fact(env: Env) -> None:
    old = env.put()
    env.at(day(2))
    new = env.put(value="pro", supersedes=old)
    env.at(day(3))
    assert env.ledger.retract(new, actor=WRITER, reason="misheard").status == "retracted"
    assert env.status(old) == "active"
    [shown] = env.ledger.as_of().facts
    assert (shown.fact_id, shown.status, shown.valid_to) == (old, "active", None)
    # ...and it can be superseded again.
    env.at(day(4))
    again = env.put(value="enterprise", supersedes=old)
    assert env.status(old) == "superseded"
    assert ids(env) == [again]


def test_rejecting_a_pending_replacement_restores_the_replaced_fact(env: Env) -> None:
    old = env.put()
    env.at(day(2))
    pending = env.put(value="pro", supersedes=old, provenance="claimed")
    assert ids(env, include="claimed") == [pending]
    env.ledger.reject(pending, actor=REVIEWER, reason="no evidence")
    assert env.status(old) == "active"
    assert ids(env, include="claimed") == [old]
    again = env.put(value="enterprise", supersedes=old)
    assert ids(env, include="claimed") == [again]


def test_supersession_chain_with_the_middle_one_retracted(env: Env) -> None:
    a = env.put(value="basic", valid_from=day(1))
    env.at(day(2))
    b = env.put(value="pro", supersedes=a, valid_from=day(2))
    env.at(day(3))
    c = env.put(value="enterprise", supersedes=b, valid_from=day(3))
    assert [env.status(f) for f in (a, b, c)] == ["superseded", "superseded", "active"]
    assert ids(env, valid_at=day(1.5)) == [a]
    assert ids(env, valid_at=day(2.5)) == [b]
    env.at(day(4))
    env.ledger.retract(b, actor=WRITER, reason="pro was never bought")
    # `b` should never have been believed, so `a` passes to `b`'s own replacement `c`: one
    # value at every valid time, `a` until `c` starts, never `a` and `c` together.
    assert [env.status(f) for f in (a, b, c)] == ["superseded", "retracted", "active"]
    assert ids(env, valid_at=day(2.5)) == [a]
    assert ids(env, valid_at=day(3.5)) == [c]
    [shown] = env.ledger.as_of(valid_at=day(2.5)).facts
    assert shown.valid_to == day(3)
    # As of before the retraction, the old picture still holds.
    assert ids(env, valid_at=day(2.5), tx_at=day(3.5)) == [b]
    assert ids(env, valid_at=day(3.5), tx_at=day(3.5)) == [c]
    # `b` is dead and `a` is still superseded (by `c`): neither can be superseded again.
    for target, code in ((b, "fact_retracted"), (a, "already_superseded")):
        with pytest.raises(LedgerError) as info:
            env.put(value="x", supersedes=target, valid_from=day(3))
        assert info.value.code == code
    # Retracting `c` as well restores `a`, which can then be superseded again.
    env.at(day(5))
    env.ledger.retract(c, actor=WRITER, reason="enterprise was never bought either")
    assert [env.status(f) for f in (a, b, c)] == ["active", "retracted", "retracted"]
    assert ids(env, valid_at=day(3.5)) == [a]
    d = env.put(value="enterprise", supersedes=a, valid_from=day(3))
    assert ids(env, valid_at=day(3.5)) == [d]
    assert ids(env, valid_at=day(2.5)) == [a]
    assert env.ledger.rebuild().differences == []


def test_confirm_of_a_claimed_fact_superseded_meanwhile(env: Env) -> None:
    claimed = env.put(provenance="claimed", valid_from=day(1))
    env.at(day(2))
    replacement = env.put(value="pro", supersedes=claimed, valid_from=day(3))
    env.at(day(4))
    result = env.ledger.confirm(claimed, actor=REVIEWER)
    assert result.status == "superseded"
    [shown] = env.ledger.as_of(valid_at=day(2)).facts
    assert (shown.fact_id, shown.status, shown.provenance, shown.valid_to) == (
        claimed, "superseded", "attested", day(3))
    assert ids(env, valid_at=day(3)) == [replacement]
    # Before the confirm it was visible only to claimed reads.
    assert ids(env, valid_at=day(2), tx_at=day(3)) == []
    assert ids(env, valid_at=day(2), tx_at=day(3), include="claimed") == [claimed]


def test_confirming_a_pending_replacement_supersedes_for_default_reads(env: Env) -> None:
    old = env.put()
    env.at(day(2))
    pending = env.put(value="pro", supersedes=old, provenance="claimed")
    assert env.status(old) == "active"
    env.at(day(3))
    env.ledger.confirm(pending, actor=REVIEWER)
    assert env.status(old) == "superseded"
    assert ids(env) == [pending]


def test_affirm_is_recorded_and_changes_nothing_else(env: Env) -> None:
    fact = env.put()
    before = env.ledger.as_of()
    result = env.ledger.affirm(fact, actor=WRITER)
    assert result.status == "active"
    assert env.ledger.as_of().facts == before.facts
    assert [e.kind for e in env.ledger.history(fact).events] == ["assert", "affirm"]


def test_every_write_result_matches_the_chain(env: Env) -> None:
    first = env.ledger.assert_fact("acct:1", "plan", "basic", actor=WRITER, cause=CAUSE)
    assert (first.seq, first.tx_at) == (2, day(1))  # seq 1 is the policy event
    second = env.ledger.retract(first.fact_id, actor=WRITER, reason="oops")
    events = env.ledger.events()
    assert [e.kind for e in events] == ["policy", "assert", "retract"]
    assert (events[1].hash, events[2].hash) == (first.event_id, second.event_id)
    assert env.ledger.verify().head == second.event_id
