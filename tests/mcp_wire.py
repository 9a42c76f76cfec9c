"""A raw JSON-RPC client of a real `custody-app serve` over stdio (bytes in, lines out), for the
protocol tests and the fuzz: what a hostile client sends is sent as is, and a reply that never
comes is seen as missing, not waited on forever."""

from __future__ import annotations

import hashlib
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CLI = str(Path(sys.executable).parent / "custody-app")
HELLO = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    env.update(extra)
    return env


def file_state(db: Path) -> tuple[str | None, ...]:
    """sha256 of the ledger, its WAL and its key store (None: absent)."""
    return tuple(hashlib.sha256(f.read_bytes()).hexdigest() if f.exists() else None
                 for f in (db, Path(f"{db}-wal"), Path(f"{db}.keys")))


class StdioWire:
    """One `custody-app serve` process spoken to line by line."""

    def __init__(self, db: Path, *args: str, agent: str = "agent:wire") -> None:
        self.proc = subprocess.Popen([CLI, "serve", "--agent", agent, "--ledger", str(db), *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=clean_env())
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.pending = bytearray()
        self.send_json(HELLO)
        hello = self.line(time.monotonic() + 60)
        assert hello is not None and b'"result"' in hello, hello
        self.send_json({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, raw: bytes) -> None:
        self.stdin.write(raw + b"\n")
        self.stdin.flush()

    def send_json(self, message: Any) -> None:
        self.send(json.dumps(message).encode())

    def line(self, deadline: float) -> bytes | None:
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(self.stdout.fileno(), 1 << 16)
            if not chunk:
                return None
            self.pending.extend(chunk)
        end = self.pending.index(b"\n") + 1
        out = bytes(self.pending[:end])
        del self.pending[:end]
        return out

    def replies_until(self, ping_id: Any, within: float) -> tuple[list[dict[str, Any]], bool]:
        """The replies before the ping `ping_id`'s, and whether the ping's came in time."""
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + within
        while (raw := self.line(deadline)) is not None:
            reply = json.loads(raw)
            if reply.get("id") == ping_id and "result" in reply:
                return got, True
            got.append(reply)
        return got, False

    def exchange(self, raw: bytes, within: float = 60) -> list[dict[str, Any]]:
        """Send `raw` then a ping: every reply that came before the ping's."""
        self.send(raw)
        self.send_json({"jsonrpc": "2.0", "id": "after", "method": "ping"})
        got, answered = self.replies_until("after", within)
        assert answered, f"the server stopped answering after {raw[:200]!r}"
        return got

    def call(self, name: str, msg_id: int = 1, **arguments: Any) -> dict[str, Any]:
        [reply] = self.exchange(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "tools/call",
                                            "params": {"name": name, "arguments": arguments}})
                                .encode())
        return reply

    def close(self) -> int:
        self.stdin.close()
        return self.proc.wait(timeout=60)
