"""The MCP surface of bench/bench_fuzz.py: hypothesis-generated messages to one real
`custody-app serve` over stdio, each followed by a ping; a case hangs when the ping's reply
does not come within 2 s."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from bench.fuzz_cases import HANG_S, Tally, expects_reply, file_state, mcp_messages


def mcp_requests(tmp: Path, cases: int, fuzz_seed: int = 32, hang_s: float = HANG_S,
                 policy: Path | None = None) -> Tally:
    """`policy`: the server's policy file (the tests name one that embeds in the write, so no
    background embedding changes the file between a refused request's two looks)."""
    tally, db = Tally(), tmp / "mcp.db"
    from custody_app.ledger.facade import Ledger
    Ledger.open(db).close()  # serve opens a ledger; it does not make one
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    if policy is not None:
        env["CUSTODY_POLICY"] = str(policy)
    cli = str(Path(sys.executable).parent / "custody-app")
    proc = subprocess.Popen([cli, "serve", "--agent", "agent:fuzz", "--ledger", str(db)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env)
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def send(text: str) -> None:
        stdin.write(text.encode("utf-8", errors="surrogatepass") + b"\n")
        stdin.flush()

    pending = bytearray()  # read with os.read: select() cannot see a file object's buffer

    def next_line(deadline: float) -> bytes | None:
        while b"\n" not in pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([stdout], [], [], max(0.0, left))
            if not ready:
                return None
            chunk = os.read(stdout.fileno(), 1 << 16)
            if not chunk:
                return None
            pending.extend(chunk)
        end = pending.index(b"\n") + 1
        line = bytes(pending[:end])
        del pending[:end]
        return line

    def replies_until(ping_id: int, within: float,
                      start: float | None = None) -> tuple[list[dict[str, Any]], float | None]:
        """The replies before the ping's, and how long since `start` (default now) it took
        (None: not within `within`)."""
        got: list[dict[str, Any]] = []
        start = time.monotonic() if start is None else start
        while True:
            raw = next_line(start + within)
            if raw is None:
                break
            reply = json.loads(raw)
            if reply.get("id") == ping_id and "result" in reply:
                return got, time.monotonic() - start
            got.append(reply)
        return got, None

    send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "f", "version": "0"}}}))
    next_line(time.monotonic() + 60)
    send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    # Warm up (the first write opens the key store and loads the embedder): not a case.
    send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "memory_write", "arguments": {"subject": "acct:1", "predicate": "plan",
                                              "value": "pro", "cause": {"kind": "tool", "ref": "r"}}}}))
    send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
    replies_until(2, 60)
    counter = [1_000_000]
    slowest = [0.0]
    unexpected = [0]

    @seed(fuzz_seed)
    @settings(max_examples=cases, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        tally.cases += 1
        counter[0] += 2
        message = data.draw(mcp_messages(counter[0]))
        before = file_state(db)
        sent_at = time.monotonic()  # the clock runs while a large message is still being sent
        send(message)
        send(json.dumps({"jsonrpc": "2.0", "id": counter[0] + 1, "method": "ping"}))
        got, took = replies_until(counter[0] + 1, hang_s, start=sent_at)
        if took is None:
            tally.hangs += 1
            tally.note(f"no reply within {hang_s:g} s", message)
            more, late = replies_until(counter[0] + 1, 60)  # resynchronise for the next case
            got += more
            if late is None:
                tally.note("no reply within 62 s", message)
        slowest[0] = max(slowest[0], took or hang_s)
        if proc.poll() is not None:
            tally.crashes += 1
            tally.note("server died", message)
            raise SystemExit("the MCP server died")
        if expects_reply(message):
            if len(got) != 1:
                tally.unanswered += len(got) == 0
                tally.note(f"{len(got)} replies to a request", message)
        elif got:
            unexpected[0] += 1
            tally.note("a notification or response answered", message)
        failed = [r for r in got if "error" in r or (r.get("result") or {}).get("isError")]
        if failed and len(failed) == len(got):
            tally.refusal(db, before, message)

    try:
        run()
    finally:
        stdin.close()
        proc.wait(timeout=60)
    tally.extra = (f"slowest reply {slowest[0] * 1000:.0f} ms; {tally.unanswered} requests "
                   f"unanswered; {unexpected[0]} notifications or responses answered")
    return tally
