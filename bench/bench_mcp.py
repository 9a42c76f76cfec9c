"""What the MCP server adds to a tool call: SDK client -> server -> Ledger, against the Ledger
call itself (the floor, measured in the same run), in-process and over a stdio subprocess.

    .venv/bin/python bench/bench_mcp.py [--facts 2000] [--calls 200] [--out FILE]

Prints a markdown table; writes it only where `--out` says (by default into a new temp dir,
whose path it prints), never into the checkout unless asked (`--out bench/results_mcp.md`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.benchenv import ROOT, header, machine_note  # noqa: E402
from custody_app import Ledger  # noqa: E402
from custody_app.interfaces.mcp.server import build_server  # noqa: E402
from custody_app.interfaces.mcp.tools import MemoryTools  # noqa: E402

CAUSE = {"kind": "tool", "ref": "bench"}
WORDS = ["refund", "plan", "enterprise", "invoice", "renewal", "seats", "region", "contact"]


def fill(path: Path, facts: int) -> None:
    with Ledger.open(path) as led, led.transaction():
        for n in range(facts):
            led.assert_fact(f"acct:{n % 500}", WORDS[n % len(WORDS)],
                            f"{WORDS[(n * 3) % len(WORDS)]} note {n}", actor="user:ops",
                            cause=CAUSE, provenance="attested")


def ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.95) - 1] * 1000


async def timed(calls: int, fn: Callable[[int], Awaitable[Any]]) -> list[float]:
    for n in range(-5, 0):  # warm-up calls, not timed
        await fn(n - 100)
    out = []
    for n in range(calls):
        start = time.perf_counter()
        await fn(n)
        out.append(time.perf_counter() - start)
    return out


def ops(led: Ledger) -> dict[str, tuple[Callable[[int], Any], str, Callable[[int], dict[str, Any]]]]:
    """Per operation: the direct Ledger call, and the tool name with its arguments."""
    return {
        "write": (lambda n: led.assert_fact(f"acct:{n}", "note", f"bench {n}", actor="agent:b",
                                            cause=CAUSE, session="direct"),
                  "memory_write", lambda n: {"subject": f"acct:{n}", "predicate": "note",
                                             "value": f"bench {n}", "cause": CAUSE}),
        # Writes go to a new subject each (a new data key each), through either path.
        "read (as_of by subject)": (lambda n: led.as_of(subject=f"acct:{n % 500}",
                                                        session="direct"),
                                    "memory_read", lambda n: {"subject": f"acct:{n % 500}"}),
        "recall k=10": (lambda n: led.recall(WORDS[n % len(WORDS)] + " note", session="direct"),
                        "memory_recall", lambda n: {"query": WORDS[n % len(WORDS)] + " note"}),
    }


async def run(facts: int, calls: int) -> str:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        fill(path, facts)
        with Ledger.open(path) as led:
            table = ops(led)
            floors = {}
            for name, (direct, _, _) in table.items():
                async def call_direct(n: int, direct: Callable[[int], Any] = direct) -> None:
                    direct(n)
                floors[name] = await timed(calls, lambda n, c=call_direct: c(n + 30_000))
            server = build_server(MemoryTools(led, "agent:b"))
            async with Client(server, mode="legacy") as client:
                inproc = {name: await timed(calls, lambda n, t=tool, a=args: client.call_tool(
                    t, a(n + 10_000))) for name, (_, tool, args) in table.items()}
        cli = str(Path(sys.executable).parent / "custody-app")
        # The SDK hands the server only a few environment variables: PYTHONPATH is passed on
        # so the server runs this checkout's code, not whichever one the venv installed.
        params = StdioServerParameters(command=cli, args=["serve", "--ledger", str(path),
                                                          "--agent", "agent:b"],
                                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        async with Client(params) as client:
            stdio = {name: await timed(calls, lambda n, t=tool, a=args: client.call_tool(
                t, a(n + 20_000))) for name, (_, tool, args) in table.items()}
    for name in table:
        floor, _ = ms(floors[name])
        for where, samples in (("in-process (memory streams)", inproc[name]),
                               ("stdio subprocess", stdio[name])):
            med, p95 = ms(samples)
            rows.append(f"| {name} | {where} | {floor:.2f} | {med:.2f} | {p95:.2f} | "
                        f"{med / floor:.1f}x | {med - floor:.2f} |")
    notes = [f"{facts} believed facts; {calls} calls per row; each MCP call is a JSON-RPC "
             "round trip through the official SDK client and server; the floor is the same "
             "Ledger call made directly (with a session, so it also records `served`)",
             f"other load: {machine_note()} (the machine is shared: figures are noisy)"]
    return "\n".join([
        "# MCP server overhead", "", header(notes), "",
        "| operation | transport | floor: Ledger call median ms | MCP median ms | MCP p95 ms "
        "| ratio | added ms |",
        "|---|---|---|---|---|---|---|", *rows, ""])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--facts", type=int, default=2000)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--out", default=None, help="write the report here (default: a new temp dir)")
    args = p.parse_args()
    report = anyio.run(run, args.facts, args.calls)
    print(report)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="custody-bench-mcp-")) / "results_mcp.md"
    out.write_text(report)
    print(f"written to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
