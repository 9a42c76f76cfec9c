"""Issue 31 over HTTP: one MCP client connecting twice (two sessions the server hands out) got
its claim confirmed by corroboration, superseding a user's verified fact. A real `serve --http`
subprocess; sessions of one unkeyed writer count for nothing (DESIGN 14)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from custody_app import Ledger
from tests.test_mcp_cli import CLI, TOKEN, _env, _free_port, _tool, _wait_listening

AGENT = "agent:bot"


async def test_one_http_client_reconnecting_never_corroborates_itself(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("[quarantine]\ncorroborate = 2\n", encoding="utf-8")
    path = tmp_path / "h.db"
    with Ledger.open(path, policy=policy) as ledger:
        users = ledger.assert_fact("acct:9", "plan", "basic", actor="user:dana",
                                   provenance="verified",
                                   cause={"kind": "manual", "ref": "signed-order"}).fact_id
    port = _free_port()
    proc = subprocess.Popen([CLI, "serve", "--http", "--port", str(port), "--agent", AGENT,
                             "--ledger", str(path), "--policy", str(policy)],
                            env=_env(CUSTODY_MCP_TOKEN=TOKEN), stderr=subprocess.PIPE, text=True)
    written = []
    try:
        _wait_listening(port, proc)
        url = f"http://127.0.0.1:{port}/mcp"
        for n in range(3):  # three connections: three sessions of one writer
            auth = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
            async with auth, Client(streamable_http_client(url, http_client=auth),
                                    mode="legacy") as client:
                fields = {"supersedes": users} if n == 0 else {}
                written.append(await _tool(client, "memory_write", subject="acct:9",
                                           predicate="plan", value="pro",
                                           cause={"kind": "message", "ref": f"m-{n}"}, **fields))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert [w["status"] for w in written] == ["quarantined"] * 3
    with Ledger.open(path, policy=policy, readonly=True) as ledger:
        assert len({ledger.why(w["fact_id"]).session for w in written}) == 3
        assert [f.value for f in ledger.as_of(subject="acct:9").facts] == ["basic"]
        assert not [e for e in ledger.events() if e.kind == "confirm"]
