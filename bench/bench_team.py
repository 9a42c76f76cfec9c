"""Team ledger benchmark (issue 33): PostgreSQL over loopback TCP beside SQLite, in one run.

    PYTHONPATH=. .venv/bin/python bench/bench_team.py [--asserts 2000] [--groups 40]
        [--group 50] [--facts 100000] [--reads 200] [--tmp DIR] [--out bench/results_team.md]

- a PostgreSQL 18 server of its own (tests/pgserver.start with a TCP port on 127.0.0.1, the
  test settings: fsync off), every ledger reached over TCP; SQLite ledgers are files in --tmp;
- single-assert latency: --asserts asserts, each its own transaction (`Ledger.assert_fact`),
  on a fresh ledger (subjects cycle over 200, so some asserts make a subject key, most not),
  after 20 untimed ones; round trips of one assert counted on the wire (tests/pg_roundtrips);
- batched throughput: 1, 2 and 4 writer processes, each --groups transactions of --group
  asserts (`Ledger.transaction()`, the API's batch grouping), on one fresh ledger; the rate
  is all asserts over the wall time from the writers' common start to the last one's end;
- reads at --facts facts (built through the same batch grouping, 500 asserts a transaction;
  the build time is printed): as_of of one subject, history of one fact, one browse page
  (`beliefs`, 50 facts, first page and a page from a random seq), --reads each, warm.

Not a timed test: it prints markdown (and writes it to --out if given). No thread settings
are made here (the machine's defaults stand)."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from custody_app.ledger.facade import Ledger  # noqa: E402

MASTER = "5e" * 32  # one master key for every process of the run (CUSTODY_MASTER_KEY)
PREDICATES = ("plan", "region", "tier", "owner", "seats", "renewal")
CAUSE = {"kind": "tool", "ref": "bench"}


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tcp_url(server: Any, port: int) -> str:
    """A fresh database of the server, reached over loopback TCP."""
    url = server.fresh_database()
    name = url.split("?", 1)[0].rsplit("/", 1)[1]
    return f"postgresql://custody@127.0.0.1:{port}/{name}"


def put(ledger: Ledger, rng: random.Random, n: int, subjects: int) -> Any:
    return ledger.assert_fact(f"acct:{rng.randrange(subjects)}", rng.choice(PREDICATES),
                              {"v": f"value {n}", "seats": rng.randrange(500)},
                              actor="agent:bench", cause=CAUSE, provenance="attested")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def ms(values: list[float]) -> tuple[str, str, str]:
    return (f"{statistics.median(values) * 1e3:.2f}", f"{pct(values, 0.99) * 1e3:.2f}",
            f"{max(values) * 1e3:.2f}")


# ---- single asserts ---------------------------------------------------------------------------

def single(address: str, count: int) -> list[float]:
    rng = random.Random(7)
    times = []
    with Ledger.open(address) as ledger:
        for n in range(20):
            put(ledger, rng, n, 200)
        for n in range(count):
            t0 = time.perf_counter()
            put(ledger, rng, n, 200)
            times.append(time.perf_counter() - t0)
    return times


def round_trips(server: Any) -> tuple[tuple[int, int], tuple[int, int]]:
    """(ledger, key store) round trips of one assert making its subject's key, and of one
    whose subject has a key (tests/test_pg_round_trips.py's measure)."""
    from tests.pg_roundtrips import TurnCounter

    url = server.fresh_database()
    proxy = TurnCounter.before(url)
    try:
        with Ledger.open(proxy.url(url)) as ledger:
            rng = random.Random(3)
            for n in range(16):
                put(ledger, rng, n, 8)
            wires = list(proxy.wires)
            keys = next(w for w in wires if w.says(b"keystore_changes"))
            main = next(w for w in wires if w is not keys and w.says(b"events"))

            def cost(subject: str) -> tuple[int, int]:
                before = (main.turns, keys.turns)
                ledger.assert_fact(subject, "plan", {"v": 1}, actor="agent:bench", cause=CAUSE,
                                   provenance="attested")
                return main.turns - before[0], keys.turns - before[1]

            return cost("acct:fresh"), cost("acct:fresh")
    finally:
        proxy.close()


# ---- batched throughput -----------------------------------------------------------------------

def child(address: str, seed: int, groups: int, size: int, start_at: float) -> None:
    """A writer process: `groups` transactions of `size` asserts, from `start_at`."""
    rng = random.Random(seed)
    with Ledger.open(address) as ledger:
        while time.time() < start_at:
            time.sleep(0.001)
        t0 = time.time()
        errors: list[str] = []
        for g in range(groups):
            try:
                with ledger.transaction():
                    for i in range(size):
                        put(ledger, rng, g * size + i, 5000)
            except Exception as exc:  # noqa: BLE001 - reported in the table, the run goes on
                errors.append(f"{type(exc).__name__}: {str(exc)[:120]}")
        print(json.dumps({"start": t0, "end": time.time(), "errors": errors}))


def head_seq(address: str) -> int:
    with Ledger.open(address, readonly=True) as ledger:
        head = ledger.db.events.head()
    return head[0] if head else 0


def throughput(address: str, writers: int, groups: int, size: int) -> tuple[float, list[str]]:
    """(committed events a second, the writers' errors): what the ledger holds at the end,
    not what the writers attempted."""
    with Ledger.open(address) as ledger:  # made before the writers race to open it
        put(ledger, random.Random(0), 0, 10)
    first = head_seq(address)
    start_at = time.time() + 3.0 + writers  # every writer open and waiting by then
    procs = [subprocess.Popen([sys.executable, __file__, "--child", address, str(seed),
                               str(groups), str(size), str(start_at)],
                              stdout=subprocess.PIPE, text=True, env=os.environ.copy())
             for seed in range(1, writers + 1)]
    spans = []
    for p in procs:
        out, _ = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise SystemExit(f"a writer failed ({p.returncode})")
        spans.append(json.loads(out.strip().splitlines()[-1]))
    wall = max(s["end"] for s in spans) - min(s["start"] for s in spans)
    return (head_seq(address) - first) / wall, [e for s in spans for e in s["errors"]]


# ---- reads at scale ---------------------------------------------------------------------------

def build(address: str, facts: int) -> tuple[float, list[str], list[str]]:
    """`facts` asserts, 500 a transaction; (seconds, some fact ids, some subjects)."""
    rng = random.Random(11)
    subjects = max(50, facts // 5)
    ids: list[str] = []
    t0 = time.perf_counter()
    with Ledger.open(address) as ledger:
        done = 0
        while done < facts:
            with ledger.transaction():
                for _ in range(min(500, facts - done)):
                    r = put(ledger, rng, done, subjects)
                    if rng.random() < 0.01:
                        ids.append(r.fact_id)
                    done += 1
    return time.perf_counter() - t0, ids, [f"acct:{n}" for n in range(subjects)]


def reads(address: str, ids: list[str], subjects: list[str], count: int,
          ) -> dict[str, list[float]]:
    rng = random.Random(5)
    out: dict[str, list[float]] = {"as_of": [], "history": [], "browse": [], "browse_deep": []}
    with Ledger.open(address, readonly=True) as ledger:
        head = ledger.db.events.head()
        top = head[0] if head else 1
        calls: dict[str, Callable[[], Any]] = {
            "as_of": lambda: ledger.as_of(subject=rng.choice(subjects)),
            "history": lambda: ledger.history(rng.choice(ids)),
            "browse": lambda: ledger.beliefs(limit=50),
            "browse_deep": lambda: ledger.beliefs(limit=50, after_seq=rng.randrange(top)),
        }
        for name, call in calls.items():
            for _ in range(min(20, count)):
                call()  # warm
            for _ in range(count):
                t0 = time.perf_counter()
                call()
                out[name].append(time.perf_counter() - t0)
    return out


# ---- the run ----------------------------------------------------------------------------------

def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--asserts", type=int, default=2000)
    ap.add_argument("--groups", type=int, default=40)
    ap.add_argument("--group", type=int, default=50)
    ap.add_argument("--facts", type=int, default=100_000)
    ap.add_argument("--reads", type=int, default=200)
    ap.add_argument("--tmp", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", nargs=5, default=None)
    ap.add_argument("--commit", default=None,
                    help="the commit measured, when run from an export of it (no .git)")
    args = ap.parse_args()
    if args.child:
        address, seed, groups, size, start_at = args.child
        child(address, int(seed), int(groups), int(size), float(start_at))
        return
    from tests import pgserver

    tmp = Path(tempfile.mkdtemp(prefix="bench-team-", dir=args.tmp))
    os.environ["XDG_DATA_HOME"] = str(tmp / "data")
    os.environ["CUSTODY_MASTER_KEY"] = MASTER
    port = free_port()
    load_start, started = loadavg(), time.time()
    dirty = git("status", "--porcelain", "--", "store", "custody_app")
    lines = ["# Team ledger: PostgreSQL over loopback TCP beside SQLite (issue 33)", "",
             f"- commit measured: {args.commit or git('rev-parse', '--short', 'HEAD')}"
             + (" (with uncommitted changes in store/ or custody_app/)" if dirty else ""),
             f"- command: `PYTHONPATH=. .venv/bin/python bench/bench_team.py --asserts "
             f"{args.asserts} --groups {args.groups} --group {args.group} --facts {args.facts} "
             f"--reads {args.reads} --out bench/results_team.md`",
             f"- machine: {os.cpu_count()} cores (shared); /proc/loadavg at start: {load_start}"]
    server = pgserver.start(tcp_port=port)
    try:
        sqlite_n = iter(range(1, 1000))

        def fresh(kind: str) -> str:
            if kind == "sqlite":
                return str(tmp / f"ledger{next(sqlite_n)}.db")
            return tcp_url(server, port)

        # Single asserts.
        rows = []
        for kind in ("sqlite", "postgres"):
            t = single(fresh(kind), args.asserts)
            rows.append(f"| {kind} | {args.asserts} | " + " | ".join(ms(t)) + " |")
        new, known = round_trips(server)
        lines += ["", f"## Single-assert latency ({args.asserts} asserts, each its own "
                  "transaction; ms)", "", "| backend | asserts | median | p99 | max |",
                  "|---|---|---|---|---|", *rows, "",
                  f"Round trips of one assert on the server, counted on the wire (ledger, key "
                  f"store): {new[0]} + {new[1]} when it makes its subject's key (the key store "
                  f"then also records a high-water mark), {known[0]} + {known[1]} when the "
                  "subject has one."]
        print("\n".join(lines), flush=True)

        # Batched throughput.
        rows, failures = [], []
        for writers in (1, 2, 4):
            runs = [throughput(fresh(kind), writers, args.groups, args.group)
                    for kind in ("sqlite", "postgres")]
            rates = [r[0] for r in runs]
            rows.append(f"| {writers} | {writers * args.groups * args.group} | "
                        f"{rates[0]:,.0f} ({len(runs[0][1])}) | {rates[1]:,.0f} "
                        f"({len(runs[1][1])}) | {rates[1] / rates[0]:.2f} |")
            failures += [f"{kind}, {writers} writers: {e}" for kind, r in
                         zip(("SQLite", "PostgreSQL"), runs, strict=True) for e in r[1]]
            print(rows[-1], flush=True)
        lines += ["", f"## Batched throughput (each writer {args.groups} transactions of "
                  f"{args.group} asserts; events committed a second, (failed transactions))",
                  "", "| writers | asserts tried | SQLite | PostgreSQL | PG/SQLite |",
                  "|---|---|---|---|---|", *rows]
        if failures:
            lines += ["", "Failed transactions (the rate counts only what the ledger holds):",
                      *[f"- {f}" for f in failures[:12]]]

        # Reads at scale.
        built: dict[str, dict[str, list[float]]] = {}
        took = {}
        for kind in ("sqlite", "postgres"):
            address = fresh(kind)
            took[kind], ids, subjects = build(address, args.facts)
            print(f"built {args.facts} facts on {kind} in {took[kind]:.0f} s", flush=True)
            built[kind] = reads(address, ids, subjects, args.reads)
        rows = []
        for name, what in (("as_of", "as_of of one subject"), ("history", "history of one fact"),
                           ("browse", "browse page (beliefs, 50, first page)"),
                           ("browse_deep", "browse page (beliefs, 50, after a random seq)")):
            s, p = ms(built["sqlite"][name]), ms(built["postgres"][name])
            rows.append(f"| {what} | {s[0]} / {s[1]} | {p[0]} / {p[1]} | "
                        f"{float(p[0]) / max(float(s[0]), 1e-9):.1f} |")
        lines += ["", f"## Reads at {args.facts:,} facts ({args.reads} calls each, warm; "
                  "median / p99 ms)", "",
                  "| read | SQLite | PostgreSQL | PG/SQLite (median) |", "|---|---|---|---|", *rows,
                  "", f"Building {args.facts:,} facts (500 asserts a transaction): SQLite "
                  f"{took['sqlite']:.0f} s, PostgreSQL {took['postgres']:.0f} s."]
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    lines += ["", f"- /proc/loadavg at end: {loadavg()}; whole run {time.time() - started:.0f} s"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
