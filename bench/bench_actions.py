"""Action search benchmark: `Ledger.actions(...)` by each filter on a ledger of many actions.

    .venv/bin/python bench/bench_actions.py [--actions 100000] [--repeat 15] [--out bench/results_actions.md]

Builds one ledger through the real service (`Ledger.act` inside `Ledger.transaction()` groups
of 5,000, a stepped `ManualClock`): `--actions` actions over 20 tools, 50 actors, 10,000
sessions and 5,000 subjects (one in ten actions names none). Then times, warm (one untimed
call first), median of `--repeat`, each filter alone (a page of 100, newest first), a rare
value of each, two filters together, and a time window. The floor, measured in the same run on
the same file: fetching those 100 events by seq in plain APSW (what building any page costs),
and, for scale, the session filter as a scan of the events' JSON bodies without the index.
Not a timed test: prints a markdown table and writes it to --out.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.benchenv import header, machine_note  # noqa: E402
from custody_app import Ledger, ManualClock  # noqa: E402
from custody_app.domain.timeutil import format_time  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def build(path: Path, n: int) -> tuple[Ledger, ManualClock, float]:
    clock = ManualClock(T0)
    ledger = Ledger.open(path, clock=clock)
    rnd = random.Random(18)
    start = time.perf_counter()
    done = 0
    while done < n:
        with ledger.transaction():
            for _ in range(min(5000, n - done)):
                clock.set(T0 + timedelta(seconds=done * 30))
                subject = None if rnd.random() < 0.1 else f"acct:{rnd.randrange(5000)}"
                ledger.act(f"sess-{rnd.randrange(10000)}", f"tool.{rnd.randrange(20)}",
                           f"ref-{done}", "ok", actor=f"agent:bot{rnd.randrange(50)}",
                           subject=subject)
                done += 1
    return ledger, clock, time.perf_counter() - start


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    out = fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--actions", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--out", default=str(ROOT / "bench" / "results_actions.md"))
    args = p.parse_args()
    load_start = f"{Path('/proc/loadavg').read_text().strip()}; {machine_note()}"
    with tempfile.TemporaryDirectory() as tmp:
        ledger, _clock, built = build(Path(tmp) / "actions.db", args.actions)
        mid = format_time(T0 + timedelta(seconds=args.actions * 15))
        late = format_time(T0 + timedelta(seconds=args.actions * 15 + 3600))
        cases: list[tuple[str, dict[str, Any]]] = [
            ("tool (1 of 20)", {"tool": "tool.7"}),
            ("actor (1 of 50)", {"actor": "agent:bot7"}),
            ("session (1 of 10,000)", {"session": "sess-77"}),
            ("subject (1 of 5,000, by hash)", {"subject": "acct:77"}),
            ("since (newest page)", {"since": mid}),
            ("since + until (a one-hour window mid-ledger)", {"since": mid, "until": late}),
            ("tool + actor", {"tool": "tool.7", "actor": "agent:bot7"}),
            ("tool none matches", {"tool": "tool.none"}),
            ("no filter", {}),
        ]
        rows = []
        for name, filters in cases:
            ms, result = timed(lambda f=filters: ledger.actions(**f), args.repeat)
            rows.append((name, ms, len(result.actions)))
        conn = ledger.db.conn
        seqs = [a.seq for a in ledger.actions(tool="tool.7").actions]
        marks = ",".join("?" * len(seqs))
        floor, _ = timed(lambda: conn.execute(
            f"SELECT seq, body FROM events WHERE seq IN ({marks})", seqs).fetchall(), args.repeat)
        scan, _ = timed(lambda: conn.execute(
            "SELECT seq FROM events WHERE kind = 'acted' AND json_extract(body, '$.session') = ? "
            "ORDER BY seq DESC LIMIT 100", ("sess-77",)).fetchall(), 3)
        events = ledger.verify().events
        ledger.close()
    load_end = f"{Path('/proc/loadavg').read_text().strip()}; {machine_note()}"
    worst = max(ms for _, ms, _ in rows)
    lines = ["# custody-app action search benchmark", "",
             header([f"load at start (/proc/loadavg; others): {load_start}",
                     f"load at end: {load_end}",
                     "the 2-core machine is shared with other engineers: treat differences under "
                     "~20-30% as noise"]), "",
             f"## Ledger: {events:,} events, {args.actions:,} actions, built in {built:.0f} s", "",
             f"## Timings (warm, median of {args.repeat}; a page is at most 100 actions)", "",
             "| filter | ms | actions returned | x floor |", "| --- | --- | --- | --- |"]
    lines += [f"| {n} | {ms:.2f} | {k} | {ms / floor:.1f} |" for n, ms, k in rows]
    lines += [f"| floor: the 100 events of a page by seq, plain APSW | {floor:.2f} | 100 | 1.0 |",
              f"| for scale: the session filter as a scan of event bodies (no index) | {scan:.1f} | 12 "
              f"| {scan / floor:.0f} |", "",
              f"- target: every filter under 50 ms on {args.actions:,} actions: "
              f"**{'met' if worst < 50 else 'NOT met'}** (slowest {worst:.2f} ms)."]
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
