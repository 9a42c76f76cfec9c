"""The MCP server: tools over the SDK's client in-process, trust, sessions, refusals."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp import Client

from custody_app.domain.commands import OPS
from custody_app.domain.errors import LedgerError
from custody_app.interfaces.mcp.server import build_server
from custody_app.interfaces.mcp.tools import SERVER_FIXED, TOOLS, MemoryTools
from tests.conftest import REVIEWER, Env, day, ledger_bytes
from tests.writer_keys import KEY, OTHER_KEY, registration, signer

AGENT = "agent:bot"
CAUSE = {"kind": "tool", "ref": "crm.lookup#1"}


@asynccontextmanager
async def connect(tools: MemoryTools, mode: str = "legacy") -> AsyncIterator[Client]:
    """The SDK's client on an in-process server: 'legacy' runs the initialize handshake over
    memory streams, 'auto' the 2026 per-request protocol through the SDK's direct dispatcher."""
    async with Client(build_server(tools), mode=mode) as client:
        yield client


async def call(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def refused(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert result.is_error
    assert isinstance(result.structured_content, dict)
    error: dict[str, Any] = result.structured_content["error"]
    assert result.content[0].text == f"{error['code']}: {error['message']}"  # type: ignore[union-attr]
    return error


def write_args(value: Any = "pro", **more: Any) -> dict[str, Any]:
    return {"subject": "acct:42", "predicate": "plan", "value": value, "cause": CAUSE, **more}


def served(env: Env) -> list[dict[str, Any]]:
    import json
    return [json.loads(e.body) for e in env.ledger.events() if e.kind == "served"]


async def test_tool_schemas_are_the_batch_commands_minus_what_the_server_fixes() -> None:
    from custody_app.interfaces.mcp.tools import arguments_model
    names = {"memory_write": "assert", "memory_read": "as_of", "memory_recall": "recall",
             "memory_retract": "retract", "memory_history": "history", "memory_why": "why",
             "memory_act": "act"}
    assert set(names) == set(TOOLS)
    for tool, op in names.items():
        command = OPS[op]
        schema = TOOLS[tool].input_schema()
        want = set(command.model_fields) - set(SERVER_FIXED)
        assert set(schema["properties"]) == want, tool
        assert schema["additionalProperties"] is False
        full = command.model_json_schema()
        for name in want:  # same types and constraints as the batch op's
            assert schema["properties"][name] == full["properties"][name], (tool, name)
        assert set(schema.get("required", [])) == set(full.get("required", [])) - set(SERVER_FIXED)
        assert not {"actor", "session", "provenance"} & set(schema["properties"])
        assert arguments_model(tool, command).model_json_schema() == schema


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_write_is_quarantined_and_invisible_until_a_reviewer_confirms(
        env: Env, mode: str) -> None:
    tools = MemoryTools(env.ledger, AGENT)
    async with connect(tools, mode) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert {"memory_write", "memory_read", "memory_recall", "memory_retract",
                "memory_history", "memory_why"} <= listed
        written = await call(client, "memory_write", **write_args("enterprise"))
        assert (written["status"], written["provenance"]) == ("quarantined", "claimed")
        fact = written["fact_id"]
        assert (await call(client, "memory_read", subject="acct:42"))["facts"] == []
        assert (await call(client, "memory_recall", query="enterprise plan"))["results"] == []
        assert env.ledger.why(fact).actor == AGENT
        env.at(day(2))
        env.ledger.confirm(fact, actor=REVIEWER)
        facts = (await call(client, "memory_read", subject="acct:42"))["facts"]
        assert [(f["fact_id"], f["value"], f["provenance"]) for f in facts] == [
            (fact, "enterprise", "attested")]
        hits = (await call(client, "memory_recall", query="enterprise plan"))["results"]
        assert [h["fact"]["fact_id"] for h in hits] == [fact]


async def test_reads_and_recalls_are_served_to_the_connection_session_and_writes_carry_it(
        env: Env) -> None:
    tools = MemoryTools(env.ledger, AGENT)
    known = env.put("acct:42", "plan", "pro plan", actor="user:ops")
    async with connect(tools) as client:
        write = await call(client, "memory_write", **write_args("note", predicate="note"))
        await call(client, "memory_read", subject="acct:42")
        await call(client, "memory_recall", query="pro plan")
        await call(client, "memory_why", fact_id=known)
    async with connect(tools) as other:
        await call(other, "memory_history", fact_id=known)
    session = env.ledger.why(write["fact_id"]).session
    assert session is not None and session.startswith("mcp-")
    records = served(env)
    assert [(r["via"], r["session"], r["fact_ids"]) for r in records[:3]] == [
        ("as_of", session, [known]), ("recall", session, [known]), ("why", session, [known])]
    assert records[3]["via"] == "history" and records[3]["fact_ids"] == [known]
    assert records[3]["session"].startswith("mcp-") and records[3]["session"] != session


async def test_a_retraction_through_the_tool_shows_in_history(env: Env) -> None:
    tools = MemoryTools(env.ledger, AGENT)
    async with connect(tools) as client:
        fact = (await call(client, "memory_write", **write_args()))["fact_id"]
        env.at(day(2))
        done = await call(client, "memory_retract", fact_id=fact, reason="wrong account")
        assert done["status"] == "retracted"
        history = await call(client, "memory_history", fact_id=fact)
    assert history["status"] == "retracted"
    kinds = [(e["kind"], e["actor"]) for e in history["events"]]
    assert kinds == [("assert", AGENT), ("retract", AGENT)]
    retract = history["events"][1]
    assert retract["reason"] == "wrong account"
    assert retract["session"] == history["events"][0]["session"]
    assert env.ledger.history(fact).status == "retracted"


@pytest.mark.parametrize(("tool", "arguments", "code", "named"), [
    ("memory_write", {"subject": "acct:42", "predicate": "plan", "value": "x"}, "bad_request",
     "cause"),
    ("memory_write", write_args(valid_from="next tuesday"), "invalid_time", "valid_from"),
    ("memory_write", write_args(actor="user:dana"), "bad_request", "actor"),
    ("memory_write", write_args(provenance="verified"), "bad_request", "provenance"),
    ("memory_write", write_args(session="someone-else"), "bad_request", "session"),
    ("memory_write", write_args(None), "bad_request", "value"),
    ("memory_write", write_args(supersedes="f_missing"), "unknown_fact", "f_missing"),
    ("memory_read", {"include": "claimed"}, "bad_request", "include"),
    ("memory_recall", {"query": "plan", "include_claimed": True}, "bad_request",
     "include_claimed"),
    ("memory_recall", {"query": ""}, "bad_request", "query"),
    ("memory_retract", {"fact_id": "f_missing", "reason": "x"}, "unknown_fact", "f_missing"),
    ("memory_retract", {"fact_id": "@fact"}, "bad_request", "reason"),
    ("memory_why", {"fact_id": "f_missing"}, "unknown_fact", "f_missing"),
])
async def test_an_invalid_argument_is_a_tool_error_with_the_code_and_writes_nothing(
        env: Env, tool: str, arguments: dict[str, Any], code: str, named: str) -> None:
    fact = env.put()
    arguments = {k: (fact if v == "@fact" else v) for k, v in arguments.items()}
    before = env.snapshot()
    async with connect(MemoryTools(env.ledger, AGENT)) as client:
        error = await refused(client, tool, **arguments)
    assert error["code"] == code
    assert named in error["message"]
    assert env.snapshot() == before


async def test_a_refused_lifecycle_move_is_a_tool_error_and_writes_nothing(env: Env) -> None:
    async with connect(MemoryTools(env.ledger, AGENT)) as client:
        fact = (await call(client, "memory_write", **write_args()))["fact_id"]
        await call(client, "memory_retract", fact_id=fact, reason="typo")
        before = env.snapshot()
        error = await refused(client, "memory_retract", fact_id=fact, reason="again")
        assert env.snapshot() == before
    assert error["code"] == "already_retracted"
    assert fact in error["message"]


async def test_an_unknown_tool_is_a_protocol_error(env: Env) -> None:
    from mcp import MCPError
    async with connect(MemoryTools(env.ledger, AGENT)) as client:
        with pytest.raises(MCPError, match="unknown tool"):
            await client.call_tool("memory_forget", {"fact_id": "x"})


async def test_another_writers_quarantined_claim_stays_hidden_from_history_and_why(
        env: Env) -> None:
    theirs = env.put(actor="agent:other", provenance="claimed")
    async with connect(MemoryTools(env.ledger, AGENT)) as client:
        mine = (await call(client, "memory_write", **write_args(predicate="tier")))["fact_id"]
        assert (await call(client, "memory_why", fact_id=mine))["fact"]["value"] == "pro"
        before = env.snapshot()
        for tool in ("memory_why", "memory_history"):
            error = await refused(client, tool, fact_id=theirs)
            assert error["code"] == "quarantined"
        assert env.snapshot() == before
        env.ledger.confirm(theirs, actor=REVIEWER)
        assert (await call(client, "memory_why", fact_id=theirs))["fact"]["value"] == "basic"


def test_the_server_identity_is_an_agent(env: Env) -> None:
    for bad in ("user:dana", "reviewer:x", "bot", "agent:"):
        with pytest.raises(LedgerError) as refusal:
            MemoryTools(env.ledger, bad)
        assert refusal.value.code == "invalid_actor"


def _keyed_policy(agent: str = AGENT, *, allow_declared: bool = True) -> str:
    return (f"[provenance]\nallow_declared = {str(allow_declared).lower()}\n"
            + registration((agent, KEY)))


@pytest.mark.parametrize(("policy_agent", "key", "trusted"), [
    (AGENT, KEY, True),
    ("agent:someone-else", KEY, False),
    ("agent:someone-else", None, False),
])
async def test_writes_are_attested_only_with_the_writer_key_the_policy_registers(
        make_env: Any, policy_agent: str, key: bytes | None, trusted: bool) -> None:
    env = make_env(_keyed_policy(policy_agent))
    tools = MemoryTools(env.ledger, AGENT, writer_key=key)
    assert tools.trusted is trusted
    async with connect(tools) as client:
        written = await call(client, "memory_write", **write_args())
        facts = (await call(client, "memory_read", subject="acct:42"))["facts"]
    if trusted:
        assert (written["status"], written["provenance"]) == ("active", "attested")
        assert [f["fact_id"] for f in facts] == [written["fact_id"]]
    else:
        assert (written["status"], written["provenance"]) == ("quarantined", "claimed")
        assert facts == []


@pytest.mark.parametrize("key", [None, OTHER_KEY, KEY[:40], signer(KEY).encode()])
def test_a_registered_agent_is_never_served_without_its_key(make_env: Any,
                                                            key: bytes | None) -> None:
    """The name IS the key (DESIGN 14): no key, another key, a broken key file or the
    public key alone (stolen from the policy) is refused, not served as a claimed writer."""
    env = make_env(_keyed_policy())
    before = ledger_bytes(env.path)
    with pytest.raises(LedgerError) as refusal:
        MemoryTools(env.ledger, AGENT, writer_key=key)
    assert refusal.value.code == "writer_key_required"
    assert ledger_bytes(env.path) == before


async def test_a_registered_key_vouches_even_where_declared_provenance_is_refused(
        make_env: Any) -> None:
    env = make_env(_keyed_policy(allow_declared=False))
    with pytest.raises(LedgerError) as refusal:
        env.put(actor=AGENT, provenance="attested")
    assert refusal.value.code == "writer_key_required"  # the name is the key: not without it
    async with connect(MemoryTools(env.ledger, AGENT, writer_key=KEY)) as client:
        written = await call(client, "memory_write", **write_args())
    assert written["provenance"] == "attested"
    with pytest.raises(LedgerError):  # the key vouches for its own actor only
        env.put(actor="agent:other", provenance="attested")


@pytest.mark.parametrize(("text", "key"), [
    ('[provenance]\nwriter_keys = {"agent:bot" = "abc"}\n', "provenance.writer_keys.agent:bot"),
    ('[provenance]\nwriter_keys = {"bot" = "' + "0" * 64 + '"}\n', "provenance.writer_keys"),
])
def test_a_malformed_writer_key_entry_is_a_policy_error_naming_the_key(
        tmp_path: Any, text: str, key: str) -> None:
    from custody_app.domain.policy import load_policy
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(LedgerError) as refusal:
        load_policy(path)
    assert refusal.value.code == "policy_invalid"
    assert key in refusal.value.message


async def test_an_agent_run_through_the_server_is_traced_by_blast_radius(env: Env) -> None:
    """Reads, an action and a later write of one MCP session all show in the blast radius of
    the fact it read, once that fact turns out wrong."""
    plan = env.put("acct:42", "plan", "enterprise", actor="user:ops")
    async with connect(MemoryTools(env.ledger, AGENT)) as client:
        assert "memory_act" in {t.name for t in (await client.list_tools()).tools}
        seen = (await call(client, "memory_recall", query="enterprise"))["results"]
        assert [h["fact"]["fact_id"] for h in seen] == [plan]
        acted = await call(client, "memory_act", tool="billing.refund", ref="refund#881",
                           outcome="refunded 120 EUR")
        note = (await call(client, "memory_write", **write_args(
            "refund issued", predicate="refund", sources=[plan])))["fact_id"]
        error = await refused(client, "memory_act", tool="t", ref="r", outcome="o",
                              session="another-run")
        assert error["code"] == "bad_request" and "session" in error["message"]
    session = env.ledger.why(note).session
    assert acted["session"] == session
    env.ledger.retract(plan, actor="user:ops", reason="the account was never enterprise")
    radius = env.ledger.blast(plan)
    assert [s.session for s in radius.sessions] == [session]
    reached = radius.sessions[0]
    assert [a.ref for a in reached.actions] == ["refund#881"]
    assert note in reached.writes
    assert env.ledger.explain("refund#881").served[0].fact_id == plan


def test_a_policy_without_writer_keys_keeps_its_hash(tmp_path: Any) -> None:
    from custody_app.domain.policy import policy_from_text
    plain = policy_from_text("", "a.toml")
    empty = policy_from_text("[provenance]\nwriter_keys = {}\n", "b.toml")
    keyed = policy_from_text(_keyed_policy(), "c.toml")
    assert plain.hash == empty.hash and "writer_keys" not in plain.canonical
    assert keyed.hash != plain.hash and signer(KEY) in keyed.canonical


async def test_a_run_begun_before_a_subject_was_erased_cannot_write_for_it_again(
        env: Env) -> None:
    """Each connection is one unit of work: the key fence holds for the run that may have read
    the erased subject, and a run begun afterwards writes (under a new key)."""
    tools = MemoryTools(env.ledger, AGENT)
    env.put("acct:42", "plan", "pro")
    async with connect(tools) as before:
        await call(before, "memory_read", subject="acct:42")
        env.at(day(2))
        env.ledger.forget_subject("acct:42", actor="user:dpo", reason="subject_request")
        env.at(day(3))
        snapshot = env.snapshot()
        error = await refused(before, "memory_write", **write_args("pro again"))
        assert error["code"] == "key_fenced" and env.snapshot() == snapshot
        env.at(day(4))
        async with connect(tools) as after:
            written = await call(after, "memory_write", **write_args("pro again"))
    assert written["status"] == "quarantined"


async def test_memory_pending_lists_only_this_agents_writes_awaiting_review(env: Env) -> None:
    tools = MemoryTools(env.ledger, AGENT)
    other = MemoryTools(env.ledger, "agent:other")
    async with connect(tools) as client, connect(other) as other_client:
        assert "memory_pending" in {t.name for t in (await client.list_tools()).tools}
        written = await call(client, "memory_write", **write_args("enterprise"))
        assert written["status"] == "quarantined"
        assert "memory_read and memory_recall do not return it" in written["note"]
        second = await call(client, "memory_write", **write_args("team", predicate="seats"))
        await call(other_client, "memory_write", **write_args("basic", subject="acct:7"))
        pending = await call(client, "memory_pending")
        assert pending["total"] == 2
        assert [(w["fact_id"], w["value"]) for w in pending["writes"]] == [
            (written["fact_id"], "enterprise"), (second["fact_id"], "team")]
        assert (await call(client, "memory_pending", limit=1))["total"] == 2
        assert len((await call(client, "memory_pending", limit=1))["writes"]) == 1
        assert (await refused(client, "memory_pending", limit=0))["code"] == "bad_request"
        assert (await refused(client, "memory_pending", agent="agent:other"))["code"] == "bad_request"
        env.at(day(2))
        env.ledger.confirm(written["fact_id"], actor=REVIEWER)
        after = await call(client, "memory_pending")
        assert [w["fact_id"] for w in after["writes"]] == [second["fact_id"]]
        assert (await call(other_client, "memory_pending"))["total"] == 1


async def test_a_trusted_write_carries_no_quarantine_note(env: Env) -> None:
    tools = MemoryTools(env.ledger, AGENT)
    tools.provenance = "attested"  # as with a registered writer key (tested above)
    async with connect(tools) as client:
        written = await call(client, "memory_write", **write_args("pro"))
    assert written["status"] == "active" and "note" not in written
