"""Who may change what (DESIGN 13): reviewed retractions, the [review] policy keys, and a
trusted correction that closes a pending claimed replacement. Real ledger files throughout."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client

from custody_app.core.ledger_core import SYSTEM_ACTOR
from custody_app.domain.errors import LedgerError
from custody_app.domain.fold import fold_as_of
from custody_app.interfaces.mcp.server import build_server
from custody_app.interfaces.mcp.tools import MemoryTools
from tests.conftest import REVIEWER, Env, day
from tests.writer_keys import KEY, registration

AGENT = "agent:bot"
HUMAN = "user:dana"


def believed(env: Env, subject: str = "acct:42") -> list[tuple[str, Any]]:
    """(fact id, value) of what a default read believes now."""
    return [(f.fact_id, f.value) for f in env.ledger.as_of(subject=subject).facts]


def consistent(env: Env) -> None:
    """The stored projection is the fold of the events, and the chain verifies."""
    assert env.ledger.rebuild().differences == []
    assert env.ledger.verify().valid
    now = env.ledger.now()
    folded = [f.fact_id for f in fold_as_of(env.ledger.events(plaintext=True), valid_at=now,
                                             tx_at=now)]
    assert folded == [f.fact_id for f in env.ledger.as_of().facts]


async def mcp_retract(tools: MemoryTools, fact_id: str) -> dict[str, Any]:
    async with Client(build_server(tools), mode="legacy") as client:
        result = await client.call_tool("memory_retract",
                                        {"fact_id": fact_id, "reason": "not true"})
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def test_an_unkeyed_mcp_agent_cannot_retract_a_humans_verified_fact(env: Env) -> None:
    """The first release's hole: the retraction took effect at once and the agent's own older
    value came back. Now it waits for review and nothing changes for any reader."""
    mine = env.put(value="basic", actor=AGENT)
    theirs = env.put(value="pro", actor=HUMAN, provenance="verified", supersedes=mine)
    env.at(day(2))
    before = believed(env)
    assert before == [(theirs, "pro")]
    done = await mcp_retract(MemoryTools(env.ledger, AGENT), theirs)
    assert (done["pending"], done["status"]) == (True, "active")
    assert believed(env) == before
    assert env.ledger.as_of(include="claimed", subject="acct:42").facts[0].fact_id == theirs
    retraction = env.ledger.history(theirs).events[-1]
    assert (retraction.kind, retraction.actor) == ("retract", AGENT)
    body = json.loads(env.ledger.db.events.get(retraction.seq).body)  # type: ignore[union-attr]
    assert (body["pending"], body["provenance"]) == (True, "claimed")
    queue = env.ledger.review_queue()
    assert [(r.fact.fact_id, r.retractor, r.seq) for r in queue.retractions] == [
        (theirs, AGENT, retraction.seq)]
    consistent(env)


async def test_a_reviewer_confirms_a_pending_retraction_and_it_takes_effect(env: Env) -> None:
    mine = env.put(value="basic", actor=AGENT)
    theirs = env.put(value="pro", actor=HUMAN, provenance="verified", supersedes=mine)
    await mcp_retract(MemoryTools(env.ledger, AGENT), theirs)
    env.at(day(3))
    done = env.ledger.confirm(theirs, actor=REVIEWER, retraction=True)
    assert done.status == "retracted"
    assert believed(env) == [(mine, "basic")]
    assert env.ledger.review_queue().retractions == []
    with pytest.raises(LedgerError) as info:
        env.ledger.confirm(theirs, actor=REVIEWER, retraction=True)
    assert info.value.code == "no_pending_retraction"
    consistent(env)


async def test_a_reviewer_rejects_a_pending_retraction_and_the_fact_stays(env: Env) -> None:
    theirs = env.put(value="pro", actor=HUMAN, provenance="verified")
    await mcp_retract(MemoryTools(env.ledger, AGENT), theirs)
    env.ledger.reject(theirs, actor=REVIEWER, reason="the agent was wrong", retraction=True)
    assert believed(env) == [(theirs, "pro")]
    assert env.status(theirs) == "active"
    assert env.ledger.review_queue().retractions == []
    # Discarded, so the agent may ask again (and it waits again).
    again = await mcp_retract(MemoryTools(env.ledger, AGENT), theirs)
    assert again["pending"] is True
    consistent(env)


async def test_an_agent_retracts_its_own_claims_at_once(env: Env) -> None:
    tools = MemoryTools(env.ledger, AGENT)
    own = env.put(value="basic", actor=AGENT, provenance="claimed")
    done = await mcp_retract(tools, own)
    assert (done["pending"], done["status"]) == (False, "retracted")


async def test_a_keyed_agent_retracts_directly(make_env: Any) -> None:
    env = make_env("[provenance]\n" + registration((AGENT, KEY)))
    theirs = env.put(value="pro", actor=HUMAN)
    done = await mcp_retract(MemoryTools(env.ledger, AGENT, writer_key=KEY), theirs)
    assert (done["pending"], done["status"]) == (False, "retracted")


def test_without_declared_provenance_an_unkeyed_writers_retraction_waits(make_env: Any) -> None:
    env = make_env("[provenance]\nallow_declared = false\n")
    theirs = env.put(value="pro", actor=HUMAN, provenance="claimed")
    env.ledger.confirm(theirs, actor=REVIEWER)
    done = env.ledger.retract(theirs, actor="user:eve", reason="no")
    assert (done.pending, done.status) == (True, "active")
    with pytest.raises(LedgerError) as info:
        env.ledger.retract(theirs, actor="user:eve", reason="no", provenance="attested")
    assert info.value.code == "provenance_not_allowed"


def test_review_refusals_write_nothing(env: Env) -> None:
    theirs = env.put(value="pro", actor=HUMAN)
    env.ledger.retract(theirs, actor=AGENT, reason="no", provenance="claimed")
    head = env.ledger.db.events.head()
    cases = [
        (lambda: env.ledger.confirm(theirs, actor=REVIEWER), "not_quarantined"),
        (lambda: env.ledger.confirm(theirs, actor="agent:x", retraction=True), "not_reviewer"),
        (lambda: env.ledger.retract(theirs, actor="agent:y", reason="me too",
                                    provenance="claimed"), "retraction_pending"),
        (lambda: env.ledger.reject(theirs, actor="agent:nobody", reason="r", retraction=True),
         "not_reviewer"),
    ]
    for run, code in cases:
        with pytest.raises(LedgerError) as info:
            run()
        assert info.value.code == code
        assert env.ledger.db.events.head() == head


def test_the_retractor_cannot_confirm_its_own_pending_retraction(make_env: Any) -> None:
    env = make_env('[review]\nretract_directly = "owner"\n')
    theirs = env.put(value="pro", actor=HUMAN)
    assert env.ledger.retract(theirs, actor=REVIEWER, reason="no").pending
    with pytest.raises(LedgerError) as info:
        env.ledger.confirm(theirs, actor=REVIEWER, retraction=True)
    assert info.value.code == "own_write"
    env.ledger.confirm(theirs, actor="user:other", retraction=True)
    assert env.status(theirs) == "retracted"


@pytest.mark.parametrize(("policy", "actor", "pending"), [
    ('[review]\nretract_directly = "owner"\n', HUMAN + "2", True),
    ('[review]\nretract_directly = "owner"\n', HUMAN, False),  # the writer itself
    ('[review]\nretract_directly = "anyone"\n', AGENT, False),
    (f'[review]\ndirect_retractors = ["{AGENT}"]\n', AGENT, False),
    ("", AGENT, True),
    ("", HUMAN + "2", False),
])
def test_the_review_policy_widens_or_narrows_who_retracts_directly(
        make_env: Any, policy: str, actor: str, pending: bool) -> None:
    env = make_env(policy)
    theirs = env.put(value="pro", actor=HUMAN)
    claimed = "claimed" if actor == AGENT else None
    assert env.ledger.retract(theirs, actor=actor, reason="r", provenance=claimed).pending is pending


def test_batch_retract_and_review_of_a_pending_retraction(env: Env, tmp_path: Any) -> None:
    from custody_app.interfaces.batch import Aliases, run_op
    theirs = env.put(value="pro", actor=HUMAN)
    ops = [
        {"op": "retract", "fact_id": theirs, "actor": AGENT, "reason": "r", "provenance": "claimed"},
        {"op": "reject", "fact_id": theirs, "actor": REVIEWER, "reason": "no", "retraction": True},
        {"op": "retract", "fact_id": theirs, "actor": AGENT, "reason": "r", "provenance": "claimed"},
        {"op": "confirm", "fact_id": theirs, "actor": REVIEWER, "retraction": True},
    ]
    out = [run_op(env.ledger, Aliases(), n, json.dumps(op)) for n, op in enumerate(ops, 1)]
    assert [o["ok"] for o in out] == [True] * 4, out
    assert [o["result"]["status"] for o in out] == ["active", "active", "active", "retracted"]
    assert out[0]["result"]["pending"] is True
    consistent(env)


def test_a_trusted_correction_closes_a_pending_claimed_replacement(env: Env) -> None:
    old = env.put(value="basic", actor=HUMAN)
    claim = env.put(value="pro", actor=AGENT, provenance="claimed", supersedes=old)
    env.at(day(2))
    fixed = env.put(value="enterprise", actor=HUMAN, provenance="verified", supersedes=old)
    assert env.status(claim) == "retracted"
    assert env.status(old) == "superseded"
    assert believed(env) == [(fixed, "enterprise")]
    closing = [e for e in env.ledger.history(claim).events if e.kind == "reject"]
    # The reason is sealed like every reason about a fact: history opens it.
    assert [(e.actor, (e.model_extra or {}).get("reason"))
            for e in closing] == [(SYSTEM_ACTOR, "superseded_while_pending")]
    assert env.ledger.review_queue().items == []
    consistent(env)


def test_a_claimed_correction_is_still_refused_while_one_is_pending(env: Env) -> None:
    old = env.put(value="basic", actor=HUMAN)
    env.put(value="pro", actor=AGENT, provenance="claimed", supersedes=old)
    with pytest.raises(LedgerError) as info:
        env.put(value="x", actor="agent:other", provenance="claimed", supersedes=old)
    assert info.value.code == "already_superseded"


def test_a_pending_retraction_survives_reopen_and_rebuild(env: Env) -> None:
    theirs = env.put(value="pro", actor=HUMAN)
    env.ledger.retract(theirs, actor=AGENT, reason="r", provenance="claimed")
    env.reopen()
    assert [r.fact.fact_id for r in env.ledger.pending_retractions()] == [theirs]
    assert env.ledger.rebuild().differences == []
