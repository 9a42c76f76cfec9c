"""Blast-radius benchmark: blast(fact) and explain(ref) on a large ledger with many sessions.

    .venv/bin/python bench/bench_blast.py [--events 1000000] [--sessions 10000] [--budget 720]
                                          [--out bench/results_blast.md]

Builds one ledger through the real service (`Ledger.transaction()` groups of `--tx` ops, a
stepped `ManualClock`): a few thousand base facts (CRM-style imports, no session), then
`--sessions` sessions of ~`events/sessions` events each: `served` events (1-3 base facts each,
appended through the same `_serve` path a read with a session uses, without the read's own
query), 1-2 writes (asserts in the session) and 3-5 `act` actions. The root fact is served to
exactly `--root-sessions` sessions; each session write is read by one later session with
probability `--reread` (so the fixpoint goes a few levels deep, as it would in real use), and a
few base facts derive from the root (`sources`). If the build would overrun `--budget` seconds
it stops early and the table says how far it got.

Timings are warm (one untimed call first), wall clock `time.perf_counter`, median of `--repeat`.
The floor, measured in the same run on the same file: the two indexed SQL reads a depth-1 blast
cannot avoid (sessions served the root, then each such session's later events) in plain APSW,
and, for scale, what finding the sessions would cost without the session index (a scan of the
events table's served bodies). Not a timed test: prints a markdown table and writes it to --out.
"""

from __future__ import annotations

import argparse
import random
import shutil
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
from custody_app.domain.timeutil import ManualClock  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402

T0 = datetime(2026, 1, 5, tzinfo=UTC)
CAUSE = {"kind": "import", "ref": "crm-export"}
TARGET_MS = 100.0


def _median(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    fn()
    samples, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples), out


class Build:
    """Builds the ledger and remembers what the measurements need."""

    def __init__(self, path: Path, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.clock = ManualClock(T0)
        self.ledger = Ledger.open(path, clock=self.clock, id_seed=args.seed)
        self.base: list[str] = []
        self.writes: list[str] = []
        self.root = ""
        self.popular = ""
        self.early = ""
        self.refs: list[str] = []
        self.reread: list[str] = []
        self.sessions_done = 0
        self.stopped = False
        self.seconds = 0.0

    def tick(self, seconds: float = 1.0) -> None:
        self.clock.set(self.clock.now() + timedelta(seconds=seconds))

    def run(self) -> None:
        a, led = self.args, self.ledger
        start = time.perf_counter()
        n_base = max(100, a.events // 200)
        with led.transaction():
            self.root = led.assert_fact("acct:1", "plan", {"tier": "enterprise", "seats": 120},
                                        actor="system:crm-sync", cause=CAUSE,
                                        provenance="verified").fact_id
            for i in range(n_base):
                self.base.append(led.assert_fact(
                    f"acct:{i + 2}", "plan", {"tier": "team", "seats": i % 90 + 1},
                    actor="system:crm-sync", cause=CAUSE, provenance="verified").fact_id)
            # Derived from the root (no session): an SLA deadline, and one derived from that.
            sla = led.assert_fact("acct:1", "sla_hours", 4, actor="rule:sla", cause=CAUSE,
                                  provenance="attested", sources=[self.root]).fact_id
            led.assert_fact("acct:1", "escalation", "p1", actor="rule:sla", cause=CAUSE,
                            provenance="attested", sources=[sla])
            # Never read by any session, retracted after the first 5% of sessions.
            self.early = led.assert_fact("acct:early", "plan", "gold", actor="system:crm-sync",
                                         cause=CAUSE, provenance="verified").fact_id
        self.popular = self.base[-1]
        per_session = max(10, -(-(a.events - n_base) // a.sessions))
        root_sessions = set(self.rng.sample(range(a.sessions), min(a.root_sessions, a.sessions)))
        popular_sessions = set(self.rng.sample(range(a.sessions), min(a.popular_sessions,
                                                                      a.sessions)))
        pending_reads: list[str] = []
        ops_in_tx = 0
        tx = led.transaction()
        tx.__enter__()
        try:
            for s in range(a.sessions):
                if time.perf_counter() - start > a.budget:
                    self.stopped = True
                    break
                name = f"sess-{s:05d}"
                n_writes, n_acts = self.rng.randint(1, 2), self.rng.randint(3, 5)
                n_served = per_session - n_writes - n_acts
                plan: list[str] = ["S"] * n_served + ["W"] * n_writes + ["A"] * n_acts
                self.rng.shuffle(plan)
                root_at = self.rng.randrange(n_served) if s in root_sessions else -1
                popular_at = self.rng.randrange(n_served) if s in popular_sessions else -1
                served_i = 0
                for step in plan:
                    self.tick(0.5)
                    if step == "S":
                        ids = self.rng.sample(self.base, self.rng.randint(1, 3))
                        if served_i == root_at:
                            ids.append(self.root)
                        if served_i == popular_at:
                            ids.append(self.popular)
                        if pending_reads and self.rng.random() < 0.05:
                            self.reread.append(pending_reads.pop())
                            ids.append(self.reread[-1])
                        led.serve(name, ids, "as_of")
                        served_i += 1
                    elif step == "W":
                        fact = led.assert_fact(f"ticket:T-{s}", f"note{len(self.writes) % 7}",
                                               f"session {s} concluded {self.rng.random():.4f}",
                                               actor="agent:support-bot", cause=CAUSE,
                                               provenance="attested", session=name).fact_id
                        self.writes.append(fact)
                        if self.rng.random() < a.reread:
                            pending_reads.append(fact)
                    else:
                        ref = f"RF-{s:05d}-{self.rng.getrandbits(24):06x}"
                        self.refs.append(ref)
                        led.act(name, "billing.issue_refund", ref, "issued",
                                actor="agent:support-bot")
                    ops_in_tx += 1
                    if ops_in_tx >= a.tx:
                        tx.__exit__(None, None, None)
                        tx = led.transaction()
                        tx.__enter__()
                        ops_in_tx = 0
                if a.blind and s % a.blind == a.blind - 1:
                    # A session with no recorded read that writes once (issue 32): INCOMPLETE
                    # only for a fact believed while it wrote, of its subject or space.
                    self.tick(0.5)
                    led.assert_fact(f"ticket:B-{s}", "note", f"blind {s}", actor="agent:batch",
                                    cause=CAUSE, provenance="attested", session=f"blind-{s:05d}",
                                    space="team:ops" if (s // a.blind) % 2 else "org")
                if s == max(1, a.sessions // 20) and self.early:
                    self.tick()
                    led.retract(self.early, actor="user:maria", reason="imported by mistake")
                self.sessions_done = s + 1
                if s % 500 == 499:
                    rate = led.db.events.count() / (time.perf_counter() - start)
                    print(f"  {s + 1:,} sessions, {led.db.events.count():,} events, "
                          f"{rate:,.0f} events/s", file=sys.stderr, flush=True)
        finally:
            tx.__exit__(None, None, None)
        with led.transaction():
            self.tick()
            led.retract(self.root, actor="user:maria", reason="the CRM row was a quote")
        self.seconds = time.perf_counter() - start


def floor_ms(build: Build, repeat: int) -> float:
    """Plain APSW: the sessions served the root, then each one's later asserts and actions."""
    conn = build.ledger.db.conn
    fact = build.ledger.db.facts.get(build.root)
    assert fact is not None

    def run() -> int:
        rows = conn.execute("SELECT session, min(seq) FROM served_facts WHERE fact_id = ? "
                            "AND seq > ? GROUP BY session", (build.root, fact.assert_seq)).fetchall()
        n = 0
        for session, seq in rows:
            n += len(conn.execute("SELECT seq, kind, fact_id FROM session_events WHERE session = ? "
                                  "AND seq > ? AND kind IN ('assert', 'acted')",
                                  (session, seq)).fetchall())
        return n

    return _median(run, repeat)[0]


def scan_ms(build: Build) -> float:
    """Without the session index: find the served events naming the root by scanning bodies."""
    conn = build.ledger.db.conn
    t = time.perf_counter()
    conn.execute("SELECT count(*) FROM events WHERE kind = 'served' AND instr(body, ?) > 0",
                 (build.root,)).fetchone()
    return (time.perf_counter() - t) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--sessions", type=int, default=10_000)
    p.add_argument("--root-sessions", type=int, default=100)
    p.add_argument("--popular-sessions", type=int, default=1000)
    p.add_argument("--reread", type=float, default=0.3)
    p.add_argument("--tx", type=int, default=5000)
    p.add_argument("--budget", type=float, default=720.0, help="build time limit, seconds")
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--blind", type=int, default=10,
                   help="after every Nth session, one with no recorded read writes (0: none)")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    load_start = machine_note()
    tmp = Path(tempfile.mkdtemp(prefix="bench-blast-"))
    try:
        build = Build(tmp / "blast.db", a)
        build.run()
        led = build.ledger
        events = led.db.events.count()
        db_mb = (tmp / "blast.db").stat().st_size / 1e6
        rows: list[tuple[str, str, str, str]] = []

        def blast_row(label: str, fact_id: str) -> float:
            ms, result = _median(lambda: led.blast(fact_id), a.repeat)
            reached = [s for s in result.sessions if not s.incomplete]
            ruled = sum(r.sessions for r in getattr(result, "ruled_out", []))
            size = (f"{len(reached):,} sessions, {len(result.actions):,} actions, "
                    f"{len(result.facts):,} facts, {len(result.incomplete_sessions)} incomplete, "
                    f"{ruled:,} ruled out")
            served = led.db.conn.execute("SELECT count(DISTINCT session) FROM served_facts "
                                         "WHERE fact_id = ?", (fact_id,)).fetchone()[0]
            rows.append((label, f"{ms:.1f}", size, f"{served:,}"))
            return ms

        root_ms = blast_row(f"blast(root): served to {a.root_sessions} sessions", build.root)
        pop_ms = blast_row(f"blast(popular fact): put in {a.popular_sessions:,} sessions' reads, "
                           "plus random reads", build.popular)
        quiet = build.base[len(build.base) // 2]
        blast_row("blast(a base fact picked at random)", quiet)
        write = (build.reread or build.writes)[len(build.reread or build.writes) // 2]
        blast_row("blast(a session's write that a later session read)", write)
        blast_row("blast(a fact no session read, retracted after 5% of the sessions)",
                  build.early)
        ref = build.refs[len(build.refs) // 2]
        ex_ms, ex = _median(lambda: led.explain(ref), a.repeat)
        rows.append(("explain(refund ref)", f"{ex_ms:.1f}",
                     f"{len(ex.served)} facts served before it", ""))
        fl = floor_ms(build, a.repeat)
        rows.append(("floor: plain APSW, depth-1 sessions of the root + their events",
                     f"{fl:.2f}", "", ""))
        sc = scan_ms(build)
        rows.append(("for scale: served events naming the root without the index (body scan)",
                     f"{sc:.0f}", "one pass, cold-ish", ""))
        load_end = machine_note()
        verdict = "met" if root_ms < TARGET_MS else "NOT met"
        built = (f"{events:,} events ({a.events:,} asked), {build.sessions_done:,} of "
                 f"{a.sessions:,} sessions, in {build.seconds:.0f} s = "
                 f"{events / build.seconds:,.0f} events/s"
                 + (f"; STOPPED at the {a.budget:.0f} s budget" if build.stopped else ""))
        lines = [
            "# custody-app blast-radius benchmark", "",
            header([f"other load at start: {load_start}", f"other load at end: {load_end}",
                    "the 2-core machine is shared with other agents: treat differences under "
                    "~20-30% as noise"]), "",
            f"## Ledger: {built}", "",
            "| what | value |", "| --- | --- |",
            f"| ledger file | {db_mb:,.0f} MB |",
            f"| base facts / session writes / actions | {len(build.base):,} / "
            f"{len(build.writes):,} / {len(build.refs):,} |",
            f"| each session write re-read by a later session with probability | {a.reread} |",
            f"| sessions with no recorded read (one write each, half in another space) | "
            f"{build.sessions_done // a.blind if a.blind else 0:,} |",
            "",
            f"## Timings (warm, median of {a.repeat})", "",
            "| measure | ms | blast size (sessions reached include later levels) | sessions "
            "served the fact |", "| --- | --- | --- | --- |",
            *[f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |" for r in rows],
            "",
            f"- target: blast of a fact served to {a.root_sessions} sessions under "
            f"{TARGET_MS:.0f} ms on a 1M-event ledger with 10k sessions: **{verdict}** "
            f"({root_ms:.1f} ms at {events:,} events); {root_ms / fl:.1f}x the depth-1 floor "
            f"({fl:.2f} ms), which does not follow writes to the next level or build the result.",
            f"- the popular fact ({a.popular_sessions:,} sessions) took {pop_ms:.1f} ms: blast "
            "time grows with the size of the radius, not of the ledger (every step is an "
            "indexed lookup: served_facts by fact, session_events by session, fact_sources by "
            "source).",
        ]
        text = "\n".join(lines) + "\n"
        print(text)
        if a.out:
            a.out.write_text(text, encoding="utf-8")
        led.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
