"""verify's cost per event with the checks of DESIGN 13, against the verify of the release before
(the floor, measured in the same run on the same file: the chain walk with its value
commitments and signed checkpoints, and the recall index comparison).

    .venv/bin/python bench/bench_verify.py [--sizes 100000] [--mix affirms|asserts]
        [--fill-from N] [--rounds 3] [--keep /tmp/custody-bench-verify]

Issue 35's measurement (`bench/verify_floor.py`): verify (the API call, and `custody-app verify`
as a subprocess) against reading and sha256-hashing every event with plain APSW, in the same
run, on ledgers given by path (copies: nothing is written to them), with a profile by check:

    .venv/bin/python bench/bench_verify.py --read-floor L100K.db,L1M.db [--rounds 2] [--no-profile]

Builds each ledger once through the Python API in transactions of 5,000 (see `build` for the
mixes) and keeps it under `--keep` for the next run; then times the floor and the full verify
alternately, `--rounds` times each, on wall and CPU time, and puts the best of each into its
row of `--out` (rows of other ledgers stay). No assert on time anywhere; the machine's load is
printed beside the figures.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.benchenv import machine_note  # noqa: E402
from custody_app.domain.chain import verify_chain  # noqa: E402
from custody_app.evidence.checkpoints import CheckpointAudit  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402

CAUSE = {"kind": "tool", "ref": "bench"}
# (assert below, retract below, supersede below[, session read or action below]) for a roll in
# [0, 1); above: affirm. `sessions`: 12% reads served to a session, 2% actions (issue 31's
# derived tables: served reads, session events, sessions, actions).
MIXES: dict[str, tuple[float, ...]] = {
    "affirms": (0.40, 0.48, 0.08), "asserts": (0.90, 1.0, 0.0), "fill": (0.04, 0.06, 0.01),
    "sessions": (0.40, 0.46, 0.08, 0.60)}


def build(path: Path, events: int, seed: int = 5, log: Any = print, mix: str = "affirms",
          fill_from: int | None = None) -> int:
    """About `events` events in transactions of 5,000. Mix `affirms`: about 40% asserts (a
    fifth of them superseding a live fact), 52% affirms of live facts (the cheapest kind),
    8% retractions. Mix `asserts` (the mix of the first measurement): 90% asserts, 10%
    retractions. From `fill_from` events on, mix `fill`: 4% asserts, 2% retractions, 94%
    affirms (a long ledger built in the time there is). All: a forget after about a third of
    the groups and one forget_subject at the end. A file left by a build that stopped is
    continued from its last committed group."""
    rng = random.Random(seed)
    t0 = time.perf_counter()
    with Ledger.open(path) as led:
        believed = [f for f in led.db.facts.with_status("active") if f.actor == "agent:b"]
        live = [f.fact_id for f in believed]
        about = {f.fact_id: f.subject for f in believed}
        if live:
            log(f"  continuing at {led.db.events.count():,} events, {len(live):,} live facts")
        while led.db.events.count() < events - 3:
            share = MIXES["fill" if fill_from and led.db.events.count() >= fill_from else mix]
            with led.transaction():
                for i in range(min(5000, events - 3 - led.db.events.count())):
                    roll = rng.random()
                    if roll < share[0] or len(live) < 200:
                        extra: dict[str, Any] = {}
                        subject = f"acct:{rng.randrange(5000)}"
                        if roll < share[2] and live:
                            extra["supersedes"] = live.pop(rng.randrange(len(live)))
                            subject = about.pop(extra["supersedes"])
                        r = led.assert_fact(subject, "note",
                                            {"n": i, "text": "x" * rng.randrange(200)},
                                            actor="agent:b", cause=CAUSE, provenance="attested",
                                            **extra)
                        live.append(r.fact_id)
                        about[r.fact_id] = subject
                    elif roll < share[1]:
                        led.retract(live.pop(rng.randrange(len(live))), actor="agent:b",
                                    reason="bench")
                    elif len(share) > 3 and roll < share[3]:
                        session = f"sess-{rng.randrange(2000)}"
                        if roll < share[3] - 0.02:
                            led.history(live[rng.randrange(len(live))], session=session)
                        else:
                            led.act(session, "billing.refund", f"r-{i}", "ok", actor="agent:b")
                    else:
                        who = "agent:b" if roll < 0.93 else "agent:c"
                        led.affirm(live[rng.randrange(len(live))], actor=who)
            count = led.db.events.count()
            if count < events - 3 and rng.random() < 0.3:
                led.forget(live.pop(rng.randrange(len(live))), actor="user:dpo", reason="error")
            if count % 50_000 < 5000:
                log(f"  {count:,} events ({time.perf_counter() - t0:.0f} s)")
        while led.db.events.count() < events - 2:
            led.affirm(live[0], actor="agent:b")
        led.forget_subject("acct:1", actor="user:dpo", reason="subject_request")
        led.checkpoint()
        return led.db.events.count()


def ledger_for(keep: Path, size: int, log: Any = print, mix: str = "affirms",
               fill_from: int | None = None) -> tuple[Path, int, float | None]:
    """The ledger of `size` events under `keep`, built once and reused (building 1M events
    takes long here); a file whose build did not finish is continued."""
    keep.mkdir(parents=True, exist_ok=True)
    name = f"v{size}" if mix == "affirms" else f"v{size}-{mix}"
    path, done = keep / f"{name}.db", keep / f"{name}.built"
    if done.exists():
        return path, int(done.read_text().split()[0]), None
    t0 = time.perf_counter()
    count = build(path, size, log=log, mix=mix, fill_from=fill_from)
    built = time.perf_counter() - t0
    done.write_text(f"{count} {built:.0f}\n")
    return path, count, built


def floor(led: Ledger) -> bool:
    """The verify of the release before this one, step for step."""
    pem = led.keys.public_pem() if led.keys is not None else None
    with led.db.read():
        audit = CheckpointAudit(led.db.erasure.events_of_kind("checkpoint"), pem)
        report = verify_chain(led.db.events.iter_all(), None, led.values.opener, audit.check)
        problems = led.index.differences()
    return report.valid and not problems


def timed(fn: object) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): on a shared machine the CPU time is the
    steadier of the two, since a descheduled process's wall clock keeps running."""
    began, cpu = time.perf_counter(), time.process_time()
    assert callable(fn)
    ok = fn()
    assert ok, "verify failed on an untampered ledger"
    return time.perf_counter() - began, time.process_time() - cpu


def kinds(path: Path) -> str:
    """The events by kind, most frequent first (read-only)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        counts = con.execute("SELECT kind, count(*) FROM events GROUP BY kind "
                             "ORDER BY count(*) DESC").fetchall()
    finally:
        con.close()
    total = sum(n for _, n in counts)
    return ", ".join(f"{k} {n / total:.0%}" if n * 100 >= total else f"{k} {n}"
                     for k, n in counts)


def commit() -> str:
    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
    dirty = git("status", "--porcelain", "--", "store", "custody_app")
    return git("rev-parse", "--short", "HEAD") + (" (dirty)" if dirty else "")


HEADER = [
    "# verify with the checks of DESIGN 13, against the verify before them", "",
    "- `bench/bench_verify.py --sizes N [--mix M] [--fill-from F] --rounds R`: each row is one "
    "ledger, built once through the Python API and kept under /tmp/custody-bench-verify; floor "
    "and full verify alternate R times on it, best of the rounds",
    "- floor: the chain walk (hashes, links, mirrored columns, value commitments under the "
    "subject keys, signed checkpoints) and the recall index comparison, as verify did before",
    "- full: the floor plus unknown kinds, valueless asserts, receipts, policy texts, the "
    "projection folded from the events and compared row by row, tombstones",
    "- target: full at most 2x the floor per event; the ratio is shown on wall time and on the "
    "process's CPU time (the machine is shared: wall time includes time spent descheduled)",
    "- load: the 1-minute load average on the 2 shared cores at the start and end of the row's "
    "measurement; commit: HEAD when the row was written (`(dirty)` if product code was not "
    "committed)",
    "- before this work (commit 1734f62, 100,017 events of asserts and retractions built in "
    "groups of 1,000): full 25.73 s against a floor of 9.73 s, 2.64 on wall time at load 3-11",
    "",
    "| events | kinds | floor wall (s) | full wall (s) | wall ratio | floor CPU (s) | full CPU "
    "(s) | CPU ratio | full CPU µs/event | load | commit | run |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
]


def merge(out: Path, rows: dict[str, str], notes: list[str]) -> None:
    """Rows of earlier runs (other ledgers) are kept; a ledger measured again replaces its row."""
    old: dict[str, str] = {}
    kept_notes: list[str] = []
    if out.exists():
        for line in out.read_text().splitlines():
            if line.startswith("| ") and not line.startswith("| events"):
                old[line.split("|")[1].strip() + line.split("|")[2].strip()[:30]] = line
            elif line.startswith("- other load"):
                kept_notes.append(line)
    old.update(rows)
    body = sorted(old.values(), key=lambda r: int(r.split("|")[1].strip().replace(",", "")))
    out.write_text("\n".join([*HEADER, *body, "", *kept_notes[-3:], *notes, ""]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results_verify.md"))
    parser.add_argument("--keep", default="/tmp/custody-bench-verify",
                        help="folder of built ledgers, reused across runs")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--mix", choices=sorted(MIXES), default="affirms")
    parser.add_argument("--fill-from", type=int, default=None,
                        help="events from which on a ledger is filled with the cheap mix")
    parser.add_argument("--read-floor", metavar="LEDGER[,LEDGER]",
                        help="issue 35: verify against reading and hashing every event of "
                             "these ledgers (bench/verify_floor.py)")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--before", metavar="CHECKOUT",
                        help="with --read-floor: also run `custody-app verify` from this older "
                             "checkout (a worktree of the commit before), the figure before")
    args = parser.parse_args()
    if args.read_floor:
        from bench.verify_floor import run
        run([Path(p) for p in args.read_floor.split(",")], args.rounds, Path(args.out),
            not args.no_profile, Path(args.before) if args.before else None)
        return
    rows: dict[str, str] = {}
    notes: list[str] = []
    keep = Path(args.keep)
    for size in [int(s) for s in args.sizes.split(",")]:
        path, events, _built = ledger_for(keep, size, mix=args.mix, fill_from=args.fill_from)
        if args.build_only:
            continue
        load = Path("/proc/loadavg").read_text().split()[0]
        with Ledger.open(path, readonly=True) as led:
            old, new = [], []
            for _ in range(args.rounds):
                old.append(timed(lambda: floor(led)))  # noqa: B023
                new.append(timed(lambda: led.verify().valid))  # noqa: B023
        load += "-" + Path("/proc/loadavg").read_text().split()[0]
        wall_old, wall_new = min(t[0] for t in old), min(t[0] for t in new)
        cpu_old, cpu_new = min(t[1] for t in old), min(t[1] for t in new)
        mix = kinds(path)
        rows[f"{events:,}" + mix[:30]] = (
            f"| {events:,} | {mix} | {wall_old:.2f} | {wall_new:.2f} | {wall_new / wall_old:.2f} | "
            f"{cpu_old:.2f} | {cpu_new:.2f} | {cpu_new / cpu_old:.2f} | "
            f"{cpu_new / events * 1e6:.1f} | {load} | {commit()} | "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} |")
        print(rows[f"{events:,}" + mix[:30]], flush=True)
        notes.append(f"- other load after the {events:,}-event row: {machine_note()}")
    if not args.build_only:
        merge(Path(args.out), rows, notes)


if __name__ == "__main__":
    main()
