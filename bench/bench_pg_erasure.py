"""What a server erasure certificate's own places cost (issue 34), at --facts facts.

    PYTHONPATH=. .venv/bin/python bench/bench_pg_erasure.py [--facts 100000] [--forgets 5]
        [--out bench/results_pg_erasure.md]

- a PostgreSQL 18 server of its own (tests/pgserver.start, the test settings: fsync off), a
  ledger of --facts facts built through the batch grouping (500 asserts a transaction; the
  build time is printed), pageinspect installed, the connecting role a superuser;
- --forgets single-fact forgets (`Ledger.forget`, the certificate included), each timed whole,
  with the certificate's outcome for the old row versions;
- then, on the same ledger, each step of the old-row-versions check alone: plain VACUUM of
  every ledger table, reading and searching every page of the tables, their TOAST tables and
  indexes (pageinspect), and VACUUM FULL of the events table (an ACCESS EXCLUSIVE lock for
  that long: every reader and writer of the ledger waits);
- table sizes.

Not a timed test: it prints markdown (and writes it to --out if given)."""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from custody_app.ledger.facade import Ledger  # noqa: E402
from store.postgres import pages, residue  # noqa: E402
from tests import pgserver  # noqa: E402

MASTER = "5e" * 32
CAUSE = {"kind": "tool", "ref": "bench"}
PREDICATES = ("plan", "region", "tier", "owner", "seats", "renewal")


def build(url: str, facts: int, seed: int) -> tuple[Ledger, list[str], float]:
    rng = random.Random(seed)
    ledger = Ledger.open(url)
    ids: list[str] = []
    start = time.perf_counter()
    for first in range(0, facts, 500):
        with ledger.transaction():
            for n in range(first, min(facts, first + 500)):
                ids.append(ledger.assert_fact(
                    f"acct:{rng.randrange(facts // 5)}", rng.choice(PREDICATES),
                    {"v": f"value number {n} for the bench", "seats": rng.randrange(500)},
                    actor="agent:bench", cause=CAUSE, provenance="attested").fact_id)
    return ledger, ids, time.perf_counter() - start


def timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--forgets", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("CUSTODY_MASTER_KEY", MASTER)
    server = pgserver.start()
    lines: list[str] = []
    try:
        url = server.fresh_database()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pageinspect")
        ledger, ids, built = build(url, args.facts, args.seed)
        lines += [f"# Server erasure certificate at {args.facts:,} facts", "",
                  f"Built in {built:.1f} s (500 asserts a transaction); load "
                  f"{Path('/proc/loadavg').read_text().split()[0]}.", "",
                  "| forget (whole call, certificate included) | seconds | old row versions |",
                  "|---|---|---|"]
        rng = random.Random(args.seed)
        whole = []
        for fact in rng.sample(ids, args.forgets):
            took, result = timed(lambda f=fact: ledger.forget(f, actor="user:dpo",
                                                              reason="subject_request"))
            old = next(p for p in result.certificate.places
                       if p.place == residue.OLD_VERSIONS_PLACE)
            whole.append(took)
            full = "VACUUM FULL" if "VACUUM FULL rewrote" in old.detail else "plain VACUUM"
            lines.append(f"| {fact} | {took:.2f} | {old.outcome} ({full}) |")
        lines.append(f"| median | {statistics.median(whole):.2f} | |")
        ledger.close()
        with psycopg.connect(url, autocommit=True) as conn:
            tables, _ = residue.maintainable(conn, "custody")
            names = [n for _o, n in tables]
            vac, _ = timed(lambda: residue.vacuum(conn, "custody", names))
            needles = [os.urandom(48)]  # found nowhere: every page is read and searched
            scan, (_hits, read) = timed(lambda: pages.search_pages(conn, tables, needles,
                                                                      "public"))
            full, _ = timed(lambda: residue.vacuum(conn, "custody", ["events"], full=True))
            full_all, _ = timed(lambda: residue.vacuum(conn, "custody", names, full=True))
            sizes = conn.execute(
                "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN "
                "pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'custody' AND "
                "c.relkind = 'r' ORDER BY 2 DESC LIMIT 6").fetchall()
        lines += ["", "| step (alone, same ledger) | seconds |", "|---|---|",
                  f"| plain VACUUM of the {len(names)} ledger tables | {vac:.2f} |",
                  f"| read and search {read:,} pages (pageinspect, heap + TOAST + indexes) "
                  f"| {scan:.2f} |",
                  f"| VACUUM FULL of events (ACCESS EXCLUSIVE lock held this long) | {full:.2f} |",
                  f"| VACUUM FULL of every ledger table | {full_all:.2f} |",
                  "", "| table (with indexes and TOAST) | MB |", "|---|---|"]
        lines += [f"| {name} | {size / 1e6:.1f} |" for name, size in sizes]
    finally:
        server.stop()
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
