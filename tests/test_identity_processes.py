"""One identity per process (DESIGN 14, issue 31), through real `--batch` and `serve` processes
and the MCP tools: an agent process names only itself and runs no operator op; a name whose key
the policy registers is that key; "own fact" needs the same key, not only the same name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from custody_app.domain.errors import LedgerError
from custody_app.interfaces.mcp.server import build_server
from custody_app.interfaces.mcp.tools import MemoryTools
from custody_app.keys import crypto
from custody_app.ledger.facade import Ledger
from tests.conftest import CAUSE, REVIEWER, ledger_bytes
from tests.test_batch_cli import _env, results
from tests.writer_keys import KEY, OTHER_KEY, registration, signer

X = "agent:x"
ALICE = "user:alice"


def _cli(*args: str | Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "custody_app", *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=120, env=_env())


def _setup(tmp_path: Path, policy_text: str) -> tuple[Path, Path, str]:
    """A ledger under `policy_text` holding one believed fact of user:alice's (confirmed by a
    reviewer). Returns (ledger, policy, fact id)."""
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_text)
    db = tmp_path / "l.db"
    with Ledger.open(db, policy=policy) as ledger:
        fact = ledger.assert_fact("acct:1", "plan", "pro", actor=ALICE, cause=CAUSE,
                                  provenance="claimed").fact_id
        ledger.confirm(fact, actor=REVIEWER)
    return db, policy, fact


def _ops(*ops: dict[str, Any]) -> str:
    return "".join(json.dumps(op) + "\n" for op in ops)


def test_an_unkeyed_batch_agent_cannot_confirm_retract_as_owner_forget_or_sweep(
        tmp_path: Path) -> None:
    """Issue 31: through --batch, a writer with no key under allow_declared = false confirmed
    its own claim as user:x, retracted as the fact's owner, forgot and swept everything."""
    db, policy, alice = _setup(tmp_path, "[provenance]\nallow_declared = false\n")
    ops = _ops(
        {"op": "assert", "ref": "a", "subject": "acct:1", "predicate": "plan", "value": "free",
         "actor": X, "cause": CAUSE, "supersedes": alice},
        {"op": "confirm", "fact_id": "@a", "actor": "user:x"},
        {"op": "confirm", "fact_id": "@a", "actor": X},
        {"op": "retract", "fact_id": alice, "actor": ALICE, "reason": "mine"},
        {"op": "retract", "fact_id": alice, "actor": X, "reason": "wrong"},
        {"op": "forget", "fact_id": alice, "actor": X, "reason": "error"},
        {"op": "forget_subject", "subject": "acct:1", "actor": X, "reason": "error"},
        {"op": "sweep", "before": "2100-01-01T00:00:00Z", "actor": X},
        {"op": "sweep", "before": "2100-01-01T00:00:00Z"},
        {"op": "hold", "fact_id": alice, "actor": X, "reason": "mine"},
        {"op": "checkpoint"},
    )
    done = _cli("--batch", "-", "--agent", X, "--ledger", db, "--policy", policy, stdin=ops)
    assert done.returncode == 1, done.stderr
    out = results(done)
    codes = [r["ok"] or r["error"]["code"] for r in out]
    assert codes == [True, "actor_mismatch", "not_reviewer", "actor_mismatch", True,
                     "operator_only", "operator_only", "operator_only", "operator_only",
                     "operator_only", "operator_only"]
    assert out[0]["result"]["status"] == "quarantined"
    assert out[4]["result"]["pending"] is True
    with Ledger.open(db, policy=policy) as ledger:
        assert ledger.history(alice).status == "active"
        assert ledger.as_of(subject="acct:1").facts[0].fact_id == alice
        assert ledger.verify().valid
        kinds = [e.kind for e in ledger.events()]
    assert "forget" not in kinds and "expire" not in kinds and "forget_subject" not in kinds
    assert kinds[-1] == "checkpoint"  # the run's own closing checkpoint, not the agent's op


@pytest.mark.parametrize("key", [None, "other", "public"])
def test_a_batch_or_server_using_a_keyed_name_without_its_key_is_refused(
        tmp_path: Path, key: str | None) -> None:
    db, policy, _ = _setup(tmp_path, "[provenance]\n" + registration((X, KEY)))
    flags: list[str | Path] = []
    if key is not None:
        path = tmp_path / "k.pem"
        path.write_bytes(OTHER_KEY if key == "other" else crypto.public_pem(
            crypto.private_from_pem(KEY.decode())).encode())
        flags = ["--writer-key", path]
    before = ledger_bytes(db)
    op = _ops({"op": "assert", "subject": "acct:1", "predicate": "plan", "value": "x",
               "actor": X, "cause": CAUSE, "provenance": "claimed"})
    batch = _cli("--batch", "-", "--agent", X, "--ledger", db, "--policy", policy, *flags,
                 stdin=op)
    serve = _cli("serve", "--agent", X, "--ledger", db, "--policy", policy, *flags, stdin="")
    expected = "key_unreadable" if key == "public" else "writer_key_required"
    for done in (batch, serve):
        assert done.returncode in (2, 3) and expected in done.stderr, done.stderr
        assert done.stdout == ""
    assert ledger_bytes(db) == before


def test_a_batch_agent_holding_its_key_signs_every_event(tmp_path: Path) -> None:
    db, policy, _ = _setup(tmp_path, "[provenance]\nallow_declared = false\n"
                           + registration((X, KEY)))
    key = tmp_path / "x.pem"
    key.write_bytes(KEY)
    op = _ops({"op": "assert", "subject": "acct:2", "predicate": "plan", "value": "pro",
               "actor": X, "cause": CAUSE, "provenance": "attested"})
    done = _cli("--batch", "-", "--agent", X, "--writer-key", key, "--ledger", db,
                "--policy", policy, stdin=op)
    assert done.returncode == 0, done.stderr
    fact = results(done)[0]["result"]
    assert (fact["status"], fact["provenance"]) == ("active", "attested")
    with Ledger.open(db, policy=policy) as ledger:
        row = next(e for e in ledger.events() if e.fact_id == fact["fact_id"])
        assert json.loads(row.body)["signer"] == signer(KEY) and row.signature is not None
        assert ledger.verify().valid


def test_an_operator_batch_with_a_writer_key_writes_as_the_actor_it_is_registered_for(
        tmp_path: Path) -> None:
    db, policy, alice = _setup(tmp_path, "[provenance]\n" + registration((X, KEY)))
    key = tmp_path / "x.pem"
    key.write_bytes(KEY)
    op = _ops({"op": "assert", "subject": "acct:2", "predicate": "plan", "value": "pro",
               "actor": X, "cause": CAUSE},
              {"op": "hold", "fact_id": alice, "actor": "user:ops", "reason": "audit"})
    unkeyed = _cli("--batch", "-", "--ledger", db, "--policy", policy, stdin=op)
    assert [r["ok"] or r["error"]["code"] for r in results(unkeyed)] == [
        "writer_key_required", True]
    keyed = _cli("--batch", "-", "--writer-key", key, "--ledger", db, "--policy", policy,
                 stdin=op.splitlines()[0] + "\n")
    assert keyed.returncode == 0, keyed.stderr
    with Ledger.open(db, policy=policy) as ledger:
        assert ledger.verify().valid


async def _retract(tools: MemoryTools, fact_id: str) -> dict[str, Any]:
    async with Client(build_server(tools)) as client:
        result = await client.call_tool("memory_retract", {"fact_id": fact_id, "reason": "mine"})
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def test_an_unkeyed_server_with_a_keyed_writers_name_cannot_retract_its_facts_at_once(
        tmp_path: Path) -> None:
    """Issue 31: an unkeyed server started with the same --agent name as a keyed writer
    retracted the keyed writer's attested facts at once ("own fact" compared names). While the
    key is registered the server is refused outright (above); after the registration is
    withdrawn, the name alone still does not make the signed fact its own."""
    keyed = tmp_path / "keyed.toml"
    keyed.write_text("[provenance]\n" + registration((X, KEY)))
    with Ledger.open(tmp_path / "l.db", policy=keyed) as ledger:
        with pytest.raises(LedgerError) as refused:
            MemoryTools(ledger, X)
        assert refused.value.code == "writer_key_required"
        assert ledger.present_writer_key(X, KEY)
        fact = ledger.assert_fact("acct:1", "plan", "pro", actor=X, cause=CAUSE,
                                  provenance="attested").fact_id
        own = ledger.assert_fact("acct:2", "plan", "pro", actor=X, cause=CAUSE,
                                 provenance="attested").fact_id
        done = await _retract(MemoryTools(ledger, X), own)  # the key holder: at once
        assert (done["pending"], done["status"]) == (False, "retracted")
    plain = tmp_path / "plain.toml"
    plain.write_text("")  # a policy adopted since that registers no key (the key withdrawn)
    with Ledger.open(tmp_path / "l.db", policy=plain) as ledger:
        done = await _retract(MemoryTools(ledger, X), fact)
        assert (done["pending"], done["status"]) == (True, "active")
        assert ledger.history(fact).status == "active"
        assert ledger.verify().valid


def test_a_reviewer_holding_the_key_that_wrote_a_claim_cannot_confirm_it(tmp_path: Path) -> None:
    first = tmp_path / "first.toml"
    first.write_text("[provenance]\n" + registration((X, KEY)))
    later = tmp_path / "later.toml"
    later.write_text("[provenance]\n" + registration((REVIEWER, KEY)))
    with Ledger.open(tmp_path / "l.db", policy=first) as ledger:
        assert ledger.present_writer_key(X, KEY)
        claim = ledger.assert_fact("acct:1", "plan", "pro", actor=X, cause=CAUSE,
                                   provenance="claimed").fact_id
    with Ledger.open(tmp_path / "l.db", policy=later) as ledger:
        assert ledger.present_writer_key(REVIEWER, KEY)
        with pytest.raises(LedgerError) as refused:
            ledger.confirm(claim, actor=REVIEWER)
        assert refused.value.code == "own_write"
        assert ledger.confirm(claim, actor="user:dana").status == "active"
        assert ledger.verify().valid


def test_agent_and_writer_key_are_refused_outside_a_batch(tmp_path: Path) -> None:
    """The terminal app and --demo run as the operator: an --agent given there would be
    silently dropped, so it is a usage error instead."""
    done = _cli("--agent", X, "--ledger", tmp_path / "l.db")
    assert done.returncode == 2 and "--batch" in done.stderr
    assert not (tmp_path / "l.db").exists()


async def test_a_keyed_server_signs_what_its_agent_writes(tmp_path: Path) -> None:
    from mcp import StdioServerParameters
    db, policy, _ = _setup(tmp_path, "[provenance]\n" + registration((X, KEY)))
    key = tmp_path / "x.pem"
    key.write_bytes(KEY)
    params = StdioServerParameters(
        command=sys.executable, env=_env(),
        args=["-m", "custody_app", "serve", "--ledger", str(db), "--policy", str(policy),
              "--agent", X, "--writer-key", str(key)])
    async with Client(params) as client:
        result = await client.call_tool("memory_write", {
            "subject": "acct:9", "predicate": "plan", "value": "pro", "cause": CAUSE})
    assert not result.is_error, result.content
    written = result.structured_content
    assert isinstance(written, dict) and written["provenance"] == "attested"
    with Ledger.open(db, policy=policy) as ledger:
        row = next(e for e in ledger.events() if e.fact_id == written["fact_id"])
        assert json.loads(row.body)["signer"] == signer(KEY) and row.signature is not None
        assert ledger.verify().valid


@pytest.mark.parametrize("agent", ["agent:", "user:ops", "bot", "agent:\u202ex"])
def test_a_batch_agent_must_be_an_agent_identity(tmp_path: Path, agent: str) -> None:
    db, policy, _ = _setup(tmp_path, "")
    before = ledger_bytes(db)
    done = _cli("--batch", "-", "--agent", agent, "--ledger", db, "--policy", policy, stdin="")
    assert done.returncode == 3 and "invalid_actor" in done.stderr
    assert ledger_bytes(db) == before


def test_an_unkeyed_batch_agent_declares_no_standing_even_where_the_policy_allows_it(
        tmp_path: Path) -> None:
    """Found in review: under the default policy (allow_declared = true) an unkeyed
    `--batch --agent` wrote `verified` with no receipt and was believed at once, and retracted a
    user's fact at once. An agent surface earns standing by its key or a receipt only, as MCP."""
    db, policy, alice = _setup(tmp_path, "")
    before = ledger_bytes(db)
    ops = _ops(
        {"op": "assert", "subject": "acct:1", "predicate": "plan", "value": "free",
         "actor": X, "cause": CAUSE, "provenance": "verified"},
        {"op": "assert", "subject": "acct:1", "predicate": "plan", "value": "free",
         "actor": X, "cause": CAUSE, "provenance": "attested"},
        {"op": "retract", "fact_id": alice, "actor": X, "reason": "wrong",
         "provenance": "attested"},
    )
    done = _cli("--batch", "-", "--agent", X, "--ledger", db, "--policy", policy, stdin=ops)
    assert done.returncode == 1, done.stderr
    assert [r["ok"] or r["error"]["code"] for r in results(done)] == ["provenance_not_allowed"] * 3
    assert ledger_bytes(db) == before  # refused ops write nothing, not even a checkpoint
    undeclared = _ops(
        {"op": "assert", "subject": "acct:1", "predicate": "plan", "value": "free",
         "actor": X, "cause": CAUSE},
        {"op": "retract", "fact_id": alice, "actor": X, "reason": "wrong"})
    done = _cli("--batch", "-", "--agent", X, "--ledger", db, "--policy", policy,
                stdin=undeclared)
    assert done.returncode == 0, done.stderr
    wrote, retracted = (r["result"] for r in results(done))
    assert wrote["status"] == "quarantined" and wrote["provenance"] == "claimed"
    assert retracted["pending"] is True
    with Ledger.open(db, policy=policy) as ledger:
        assert ledger.history(alice).status == "active"
        assert [f.fact_id for f in ledger.as_of(subject="acct:1").facts] == [alice]
