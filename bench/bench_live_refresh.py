"""Live refresh across machines (issue 34): how soon another process's commit reaches a listener
and the terminal app's screen on a ledger on a PostgreSQL server, and what the notify trigger
costs a writer.

    PYTHONPATH=. .venv/bin/python bench/bench_live_refresh.py [--screen 30] [--heard 200]
        [--asserts 500] [--out bench/results_live_refresh.md]

- a PostgreSQL 18 server of its own (tests/pgserver.start: a Unix socket, the test settings:
  fsync off);
- heard: --heard asserts by one writer process (`custody-app --batch -`, each op its own
  transaction, its result line read back once committed); for each, the time from the op sent
  to `LedgerChanges.wait` returning in this process, beside the time to the writer's own
  result line;
- on screen: the terminal app (Textual, headless `run_test`) on the story ledger, its fallback
  poll set to an hour; --screen asserts by the writer process, each timed from its result line
  to its row on the Beliefs screen (the app checked every 10 ms);
- cost: --asserts single-assert transactions (`Ledger.assert_fact`) on a fresh ledger with the
  notify trigger and on one with it dropped, interleaved, after 20 untimed ones each.

Not a timed test: it prints markdown (and writes it to --out if given)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CAUSE = {"kind": "tool", "ref": "bench"}


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def summary(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    return (f"median {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms, max {ms[-1]:.1f} ms "
            f"(n = {len(ms)})")


class Writer:
    """`custody-app --batch -` as the other process: one op a line, its result once committed."""

    def __init__(self, url: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
        self.proc = subprocess.Popen([sys.executable, "-m", "custody_app", "--batch", "-",
                                      "--ledger", url], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)

    def assert_fact(self, n: int) -> tuple[dict[str, Any], float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        op = {"op": "assert", "subject": f"acct:{n}", "predicate": "plan", "value": f"v{n}",
              "actor": "agent:bench", "cause": CAUSE, "provenance": "attested",
              "space": "org"}
        self.proc.stdin.write(json.dumps(op) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        return json.loads(line)["result"], time.monotonic()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


def heard(url: str, count: int) -> tuple[list[float], list[float]]:
    """(op sent -> notification here, op sent -> the writer's own result line), per assert."""
    from custody_app.ledger.changes import LedgerChanges
    from custody_app.ledger.facade import Ledger

    Ledger.open(url).close()  # init
    changes = LedgerChanges.open(url)
    assert changes is not None
    writer = Writer(url)
    notified, answered = [], []
    try:
        for n in range(count):
            sent = time.monotonic()
            result, committed = writer.assert_fact(n)
            while True:
                seq = changes.wait(30)
                assert seq is not None, "no notification within 30 s"
                if seq >= result["seq"]:
                    break
            notified.append(time.monotonic() - sent)
            answered.append(committed - sent)
    finally:
        writer.close()
        changes.close()
    return notified, answered


async def on_screen(url: str, count: int) -> list[float]:
    from textual.widgets import DataTable

    from custody_app.interfaces.tui import app as app_module
    from tests.tuikit import app_on, build_story, idle, keys

    app_module.POLL_S = 3600.0
    build_story(url)  # type: ignore[arg-type]
    app = app_on(url, watch=True)  # type: ignore[arg-type]
    writer = Writer(url)
    out = []
    try:
        async with app.run_test(size=(180, 40)) as pilot:
            await idle(pilot)
            while app.listening is not True:
                await asyncio.sleep(0.01)
            table = app.screen.query_one("#facts", DataTable)
            for n in range(count):
                result, committed = await asyncio.to_thread(writer.assert_fact, 1000 + n)
                deadline = time.monotonic() + 30
                while result["fact_id"] not in keys(table):
                    assert time.monotonic() < deadline, "not on screen within 30 s"
                    await asyncio.sleep(0.01)
                out.append(time.monotonic() - committed)
    finally:
        writer.close()
    return out


def write_cost(with_url: str, without_url: str, count: int) -> tuple[list[float], list[float]]:
    """Single-assert latency on a ledger with the notify trigger and on one with it dropped,
    the two interleaved assert by assert (the machine's load falls on both alike)."""
    import psycopg

    from custody_app.ledger.facade import Ledger

    ledgers = [Ledger.open(with_url), Ledger.open(without_url)]
    with psycopg.connect(without_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER events_notify ON custody.events")
    times: list[list[float]] = [[], []]
    try:
        for n in range(20 + count):
            for i, ledger in enumerate(ledgers):
                start = time.perf_counter()
                ledger.assert_fact(f"acct:{n % 200}", "plan", {"v": n}, actor="agent:bench",
                                   cause=CAUSE, provenance="attested")
                if n >= 20:
                    times[i].append(time.perf_counter() - start)
    finally:
        for ledger in ledgers:
            ledger.close()
    return times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--screen", type=int, default=30)
    parser.add_argument("--heard", type=int, default=200)
    parser.add_argument("--asserts", type=int, default=500)
    parser.add_argument("--out")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="bench-live-")
    os.environ["XDG_DATA_HOME"] = os.path.join(scratch, "xdg")
    from tests import pgserver

    server = pgserver.start()
    lines = [f"# Live refresh across machines (issue 34), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "", f"load before: {loadavg()}", ""]
    try:
        notified, answered = heard(server.fresh_database(), args.heard)
        lines.append(f"- another process's assert, from its op sent: notified here "
                     f"{summary(notified)}; its own result line (after its commit) "
                     f"{summary(answered)}")
        shown = asyncio.run(on_screen(server.fresh_database(), args.screen))
        lines.append(f"- commit to the Beliefs screen (the app's poll off): {summary(shown)}")
        with_trigger, without = write_cost(server.fresh_database(), server.fresh_database(),
                                           args.asserts)
        lines.append(f"- one assert with the notify trigger: {summary(with_trigger)}")
        lines.append(f"- one assert without it: {summary(without)}")
    finally:
        server.stop()
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    lines += ["", f"load after: {loadavg()}", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
