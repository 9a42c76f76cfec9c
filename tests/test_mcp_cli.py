"""`custody-app serve` as a real process: stdio through the SDK's client, loopback HTTP, keys."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from custody_app import Ledger
from tests.writer_keys import signer

CLI = str(Path(sys.executable).parent / "custody-app")
AGENT = "agent:bot"
CAUSE = {"kind": "tool", "ref": "crm.lookup#1"}
TOKEN = "s3cret-token-for-tests-0123456789"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    env.update(extra)
    return env


async def _tool(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def test_stdio_server_in_a_subprocess_quarantines_until_confirmed_through_the_api(
        tmp_path: Path) -> None:
    ledger_path = tmp_path / "agent.db"
    params = StdioServerParameters(command=CLI, args=["serve", "--create", "--ledger", str(ledger_path),
                                                      "--agent", AGENT], env=_env())
    async with Client(params) as client:
        written = await _tool(client, "memory_write", subject="acct:7", predicate="plan",
                              value="pro", cause=CAUSE)
        assert (written["status"], written["provenance"]) == ("quarantined", "claimed")
        assert (await _tool(client, "memory_read", subject="acct:7"))["facts"] == []
        bad = await client.call_tool("memory_write", {"subject": "acct:7", "predicate": "plan",
                                                      "value": "x", "cause": CAUSE,
                                                      "actor": "user:root"})
        assert bad.is_error and bad.structured_content["error"]["code"] == "bad_request"
        # A reviewer confirms from another process (here: the test) while the server runs.
        with Ledger.open(ledger_path) as reviewer:
            reviewer.confirm(written["fact_id"], actor="user:dana")
        facts = (await _tool(client, "memory_read", subject="acct:7"))["facts"]
        assert [(f["fact_id"], f["provenance"]) for f in facts] == [
            (written["fact_id"], "attested")]
    with Ledger.open(ledger_path, readonly=True) as ledger:
        why = ledger.why(written["fact_id"])
        assert why.actor == AGENT and why.session is not None
        events = [json.loads(e.body) for e in ledger.events() if e.kind == "served"]
        assert [(e["session"], e["fact_ids"]) for e in events] == [
            (why.session, []), (why.session, [written["fact_id"]])]
        assert ledger.verify().valid


def test_the_serve_path_never_loads_textual() -> None:
    code = ("import sys, custody_app.interfaces.cli.main, custody_app.interfaces.cli.serve, "
            "custody_app.interfaces.mcp.server, custody_app.interfaces.mcp.http, uvicorn; "
            "sys.exit(any(m.split('.')[0] == 'textual' for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


@pytest.mark.parametrize("token", [None, "", "short"])
def test_http_refuses_to_start_without_a_bearer_token(tmp_path: Path,
                                                      token: str | None) -> None:
    env = _env() if token is None else _env(CUSTODY_MCP_TOKEN=token)
    done = subprocess.run([CLI, "serve", "--http", "--port", "1", "--agent", AGENT, "--ledger",
                           str(tmp_path / "x.db")], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "bearer token" in done.stderr and "CUSTODY_MCP_TOKEN" in done.stderr
    assert not (tmp_path / "x.db").exists()


def test_serve_requires_an_agent_identity(tmp_path: Path) -> None:
    done = subprocess.run([CLI, "serve", "--ledger", str(tmp_path / "x.db")], env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--agent" in done.stderr
    done = subprocess.run([CLI, "serve", "--create", "--ledger", str(tmp_path / "x.db"), "--agent",
                           "user:dana"], env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "invalid_actor" in done.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[str], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail("the HTTP server did not start")


async def test_http_on_loopback_needs_the_bearer_token(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([CLI, "serve", "--http", "--port", str(port), "--agent", AGENT,
                             "--create", "--ledger", str(tmp_path / "h.db")],
                            env=_env(CUSTODY_MCP_TOKEN=TOKEN), stderr=subprocess.PIPE, text=True)
    try:
        _wait_listening(port, proc)
        url = f"http://127.0.0.1:{port}/mcp"
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}
        async with httpx2.AsyncClient(timeout=10) as raw:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                answer = await raw.post(url, json=hello, headers={
                    "Accept": "application/json, text/event-stream", **headers})
                assert answer.status_code == 401
        auth = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        async with auth, Client(streamable_http_client(url, http_client=auth),
                                mode="legacy") as client:
            written = await _tool(client, "memory_write", subject="acct:9", predicate="plan",
                                  value="pro", cause=CAUSE)
            await _tool(client, "memory_read", subject="acct:9")
        assert written["status"] == "quarantined"
        # A client of the stateless 2026 protocol (the SDK's default) is served too.
        auth = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        async with auth, Client(streamable_http_client(url, http_client=auth)) as modern:
            assert modern.protocol_version == "2026-07-28"
            stateless = await _tool(modern, "memory_write", subject="acct:9", predicate="tier",
                                    value="gold", cause=CAUSE)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    with Ledger.open(tmp_path / "h.db", readonly=True) as ledger:
        session = ledger.why(written["fact_id"]).session
        served = [json.loads(e.body) for e in ledger.events() if e.kind == "served"]
        assert session is not None and [s["session"] for s in served] == [session]
        other = ledger.why(stateless["fact_id"]).session
        assert other is not None and other.startswith("mcp-") and other != session


def test_writer_key_command_makes_a_private_key_and_the_policy_line(tmp_path: Path) -> None:
    key = tmp_path / "bot.key"
    done = subprocess.run([CLI, "writer-key", "--agent", AGENT, "--out", str(key)], env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    line = done.stdout.strip()
    # The PUBLIC key is registered (DESIGN 14): the policy holds no secret.
    assert line == f'writer_keys = {{"{AGENT}" = "{signer(key.read_bytes())}"}}'
    assert line.split('"')[3].startswith("ed25519:") and len(line.split('"')[3]) == 8 + 64
    again = subprocess.run([CLI, "writer-key", "--agent", AGENT, "--out", str(key)], env=_env(),
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "key_exists" in again.stderr
    policy = tmp_path / "policy.toml"
    policy.write_text(f"[provenance]\n{line}\n")
    with Ledger.open(tmp_path / "k.db", policy=policy) as ledger:
        assert ledger.present_writer_key(AGENT, key.read_bytes())
        assert not ledger.present_writer_key(AGENT, b"guess")
        assert not ledger.present_writer_key(AGENT, signer(key.read_bytes()).encode())
