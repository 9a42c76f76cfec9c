"""MCP replies escape what JSON output must (DESIGN section 13, issue 14): a stored value or
reason holding U+2028, U+2029, an ANSI sequence, DEL, a C1 control or a bidi override goes out
over stdio and over HTTP with each of them as a `\\uNNNN` escape, in the JSON-RPC envelope and in
the tool's text content, and parses back to exactly what was stored. Real `custody-app serve`
processes; the test reads the raw bytes off the wire."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from custody_app import Ledger

CLI = str(Path(sys.executable).parent / "custody-app")
AGENT = "agent:bot"
TOKEN = "s3cret-token-for-tests-0123456789"
HOSTILE = "a\u2028b\u2029c\x1b[31md\u202ee\x7ff\x85g\u2066h"
# Each character above as UTF-8: none of these bytes may be on the wire.
RAW = [b"\xe2\x80\xa8", b"\xe2\x80\xa9", b"\x1b", b"\xe2\x80\xae", b"\x7f", b"\xc2\x85", b"\xe2\x81\xa6"]
VALUE = {"note": HOSTILE, HOSTILE: [HOSTILE]}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    return {**env, **extra}


@pytest.fixture()
def stored(tmp_path: Path) -> tuple[Path, str, str]:
    """A ledger holding a believed fact whose value is hostile, and a fact retracted with a
    hostile reason (both written through the API as attested, so believed at once)."""
    db = tmp_path / "m.db"
    with Ledger.open(db) as led:
        kept = led.assert_fact("acct:1", "note", VALUE, actor="user:dana",
                               cause={"kind": "manual", "ref": "desk", "detail": HOSTILE},
                               provenance="attested")
        gone = led.assert_fact("acct:1", "plan", "pro", actor="user:dana",
                               cause={"kind": "manual", "ref": "desk"}, provenance="attested")
        led.retract(gone.fact_id, actor="user:dana", reason=HOSTILE)
    return db, kept.fact_id, gone.fact_id


def _calls(kept: str, gone: str) -> list[dict[str, Any]]:
    return [{"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "memory_read", "arguments": {"subject": "acct:1"}}},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
             "params": {"name": "memory_history", "arguments": {"fact_id": gone}}},
            {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
             "params": {"name": "memory_why", "arguments": {"fact_id": kept}}}]


def _hello(version: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


def _check(raw: bytes, reply: dict[str, Any], kept: str, gone: str) -> None:
    """No hostile byte on the wire, the escapes there instead, and the parsed reply (envelope
    and text content alike) equal to what was stored."""
    for byte in RAW:
        assert byte not in raw, (byte, raw[:300])
    assert b"\\u2028" in raw and b"\\u202e" in raw
    result = reply["result"]
    assert not result.get("isError"), result
    data = result["structuredContent"]
    assert json.loads(result["content"][0]["text"]) == data
    if reply["id"] == 2:
        assert [f["value"] for f in data["facts"]] == [VALUE]
    elif reply["id"] == 3:
        assert HOSTILE in [e.get("reason") for e in data["events"]], data
    else:
        assert data["cause"]["detail"] == HOSTILE, data


def test_stdio_replies_carry_the_hostile_characters_escaped(stored: tuple[Path, str, str]) -> None:
    db, kept, gone = stored
    proc = subprocess.Popen([CLI, "serve", "--ledger", str(db), "--agent", AGENT], env=_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    lines: list[bytes] = []
    try:
        for message in [_hello("2025-06-18"), {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        *_calls(kept, gone)]:
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()
            if "id" not in message:
                continue
            ready, _, _ = select.select([proc.stdout], [], [], 30)
            assert ready, "no reply"
            lines.append(proc.stdout.readline())
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    for raw in lines[1:]:
        _check(raw, json.loads(raw), kept, gone)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _json_of(answer: httpx2.Response) -> dict[str, Any]:
    if answer.headers["content-type"].startswith("text/event-stream"):
        data = [ln[5:].strip() for ln in answer.text.splitlines() if ln.startswith("data:")]
        assert len(data) == 1, answer.text
        return dict(json.loads(data[0]))
    return dict(json.loads(answer.content))


async def test_http_replies_carry_the_hostile_characters_escaped(stored: tuple[Path, str, str]) -> None:
    db, kept, gone = stored
    port = _free_port()
    proc = subprocess.Popen([CLI, "serve", "--http", "--port", str(port), "--agent", AGENT,
                             "--ledger", str(db)], env=_env(CUSTODY_MCP_TOKEN=TOKEN),
                            stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"}
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None and time.monotonic() < deadline
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            hello = await http.post(url, json=_hello("2025-06-18"))
            assert hello.status_code == 200, hello.text
            session = {"mcp-session-id": hello.headers["mcp-session-id"],
                       "mcp-protocol-version": "2025-06-18"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                            headers=session)
            for call in _calls(kept, gone):
                answer = await http.post(url, json=call, headers=session)
                assert answer.status_code == 200, answer.text
                length = answer.headers.get("content-length")
                assert length is None or int(length) == len(answer.content)
                _check(answer.content, _json_of(answer), kept, gone)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
