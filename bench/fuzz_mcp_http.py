"""The MCP-over-HTTP surface of bench/bench_fuzz.py: hypothesis-generated messages POSTed (now
and then with another method) to one real `custody-app serve --http`, in the session the
server issued, in a made-up or ended one, outside any, or without the token. Every request
must get an HTTP answer within the hang limit; a JSON-RPC request answered 2xx must carry a
JSON-RPC reply; 5xx or a dead server is a crash."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx2
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from bench.fuzz_cases import HANG_S, Tally, expects_reply, file_state, mcp_messages

TOKEN = "fuzz-token-0123456789abcdef"
LEGACY = "2025-06-18"
BASE = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json"}


def _start(db: Path, policy: Path | None = None) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    env["CUSTODY_MCP_TOKEN"] = TOKEN
    if policy is not None:
        env["CUSTODY_POLICY"] = str(policy)
    cli = str(Path(sys.executable).parent / "custody-app")
    proc = subprocess.Popen([cli, "serve", "--http", "--port", str(port), "--agent",
                             "agent:fuzz", "--ledger", str(db)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the HTTP server did not start")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the HTTP server did not start")


def _messages(answer: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an answer (a JSON body or an event stream)."""
    kind = answer.headers.get("content-type", "")
    texts = ([line[5:].strip() for line in answer.text.splitlines() if line.startswith("data:")]
             if kind.startswith("text/event-stream") else [answer.text])
    found = []
    for text in texts:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        found += [v for v in (value if isinstance(value, list) else [value])
                  if isinstance(v, dict) and ("result" in v or "error" in v)]
    return found


def _initialize(http: httpx2.Client, url: str) -> str:
    answer = http.post(url, headers=BASE, json={
        "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "0"}}})
    session = answer.headers["mcp-session-id"]
    http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
              headers={**BASE, "mcp-session-id": session, "mcp-protocol-version": LEGACY})
    return session


def mcp_http_requests(tmp: Path, cases: int, fuzz_seed: int = 32,
                      hang_s: float = HANG_S, policy: Path | None = None) -> Tally:
    from custody_app.ledger.facade import Ledger

    tally, db = Tally(), tmp / "mcp-http.db"
    Ledger.open(db).close()
    proc, url = _start(db, policy)
    http = httpx2.Client(timeout=hang_s)
    warm = httpx2.Client(timeout=120)
    session = _initialize(warm, url)
    ended = _initialize(warm, url)
    warm.delete(url, headers={**BASE, "mcp-session-id": ended, "mcp-protocol-version": LEGACY})
    warm.post(url, headers={**BASE, "mcp-session-id": session, "mcp-protocol-version": LEGACY},
              json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                  "name": "memory_write", "arguments": {
                      "subject": "acct:1", "predicate": "plan", "value": "pro",
                      "cause": {"kind": "tool", "ref": "r"}}}})  # warm up: not a case
    counter = [1_000_000]
    slowest = [0.0]
    slowest_case = [""]
    statuses: dict[int, int] = {}

    @seed(fuzz_seed)
    @settings(max_examples=cases, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        tally.cases += 1
        counter[0] += 1
        message = data.draw(mcp_messages(counter[0]))
        which = data.draw(st.sampled_from(["issued"] * 6 + ["none", "made-up", "ended"]))
        method = data.draw(st.sampled_from(["POST"] * 12 + ["GET", "PUT", "DELETE"]))
        version = data.draw(st.sampled_from([LEGACY] * 4 + [None, "2026-07-28", "1999"]))
        headers = dict(BASE)
        if data.draw(st.integers(0, 19)) == 0:
            headers["Authorization"] = "Bearer wrong"
        sid = {"issued": session, "none": None, "made-up": uuid.uuid4().hex,
               "ended": ended}[which]
        if method == "DELETE" and which == "issued":
            sid = uuid.uuid4().hex  # never end the session the cases use
        if sid is not None:
            headers["mcp-session-id"] = sid
        if version is not None:
            headers["mcp-protocol-version"] = version
        before = file_state(db)
        start = time.monotonic()
        try:
            answer = http.request(method, url, headers=headers,
                                  content=message.encode("utf-8", errors="surrogatepass"))
        except httpx2.TimeoutException:
            tally.hangs += 1
            tally.note(f"no answer within {hang_s:g} s", message)
            return
        except httpx2.TransportError as exc:
            tally.crashes += 1
            tally.note(f"connection failed: {exc!r}", message)
            if proc.poll() is not None:
                raise SystemExit("the MCP HTTP server died") from None
            return
        finally:
            took = time.monotonic() - start
            if took > slowest[0]:
                slowest[0] = took
                slowest_case[0] = f"{len(message.encode('utf-8', 'surrogatepass')):,}-byte {method}"
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
        if answer.status_code >= 500:
            tally.crashes += 1
            tally.note(f"HTTP {answer.status_code}", message)
        replies = _messages(answer)
        if method == "POST" and answer.status_code < 300 and expects_reply(message) \
                and not replies:
            tally.unanswered += 1
            tally.note(f"HTTP {answer.status_code} without a JSON-RPC reply", message)
        refused = answer.status_code >= 400 or (replies and all(
            "error" in r or (r.get("result") or {}).get("isError") for r in replies))
        if refused:
            tally.refusal(db, before, message)

    try:
        run()
    finally:
        http.close()
        warm.close()
        proc.terminate()
        code = proc.wait(timeout=60)
    shown = ", ".join(f"{k}: {v:,}" for k, v in sorted(statuses.items()))
    tally.extra = (f"slowest answer {slowest[0] * 1000:.0f} ms (a {slowest_case[0]}); "
                   f"{tally.unanswered} requests "
                   f"without a reply; exit {code} on SIGTERM; statuses {shown}")
    if code != 0:
        tally.crashes += 1
    return tally
