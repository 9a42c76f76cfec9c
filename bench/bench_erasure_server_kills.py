"""Kill trials for forget and forget-subject on a real PostgreSQL server (issue 34): each named
crash point, then random instants over the erasure's measured duration until `--kills` of them
landed mid-erasure, per operation; every trial on its own database made from a prepared base
as a template, its child forked from one pre-imported process (tests/erasure_crash.py).

    .venv/bin/python bench/bench_erasure_server_kills.py [--kills 30] [--seed 34] [--out FILE]

Without --out the table goes to a temporary folder (named on stderr), never into the checkout.
After each kill a read-write open in this process judges it: whole (rolled forward or already
complete: forgotten, the old key generation retired or the subject's key destroyed, no scrub
left pending), none (never started: every value readable, the old key still opening it) or
broken (anything else, or a lost acknowledged write, or any value no erasure touches not
reading back, or verify failing); broken must be 0. The test suite runs the same 30 each
(tests/test_erasure_server_kills.py)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench.benchenv import machine_note  # noqa: E402
from tests import pgserver  # noqa: E402
from tests.erasure_crash import (  # noqa: E402
    Forker,
    build_base,
    drop_server_copy,
    server_copier,
    server_trials,
)

KINDS = ("forget", "forget_subject")


def row(result: dict[str, object]) -> str:
    named, randoms = result["named"], result["randoms"]
    assert isinstance(named, list) and isinstance(randoms, list)
    where = {k: sum(t.landed == k for t in randoms) for k in ("before", "mid", "after")}
    problems = result["problems"]
    assert isinstance(problems, list)
    return (f"| {result['kind']} | {float(str(result['window_s'])) * 1000:.0f} ms | "
            f"{sum(t.landed == 'mid' for t in named)}/{len(named)} | {len(randoms)} | "
            f"{where['mid']} | {where['before']} | {where['after']} | {result['whole']} | "
            f"{result['none']} | {result['broken']} | "
            f"{'none' if not problems else '; '.join(map(str, problems[:3]))} | "
            f"{float(str(result['seconds'])):.0f} s |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="kills-")) / "kills.md"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    load_start = Path("/proc/loadavg").read_text().split()[:3]
    began = time.time()
    rows = []
    with tempfile.TemporaryDirectory() as xdg:
        os.environ["XDG_DATA_HOME"] = xdg  # the copies' local folders (master key files)
        server = pgserver.start()
        try:
            url = server.fresh_database()
            build_base(url)
            with Forker() as forker:
                for kind in KINDS:
                    result = server_trials(kind, server, server_copier(server, url), forker,
                                           kills=args.kills, seed=args.seed)
                    rows.append(row(result))
                    print(rows[-1], flush=True)
            drop_server_copy(server, url)
        finally:
            server.stop()
    load_end = Path("/proc/loadavg").read_text().split()[:3]
    out.write_text("\n".join([
        "# Kill trials of forget and forget-subject on a PostgreSQL server (issue 34)", "",
        f"- run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(began))}, "
        f"`bench/bench_erasure_server_kills.py --kills {args.kills} --seed {args.seed}`",
        f"- commit: {commit}",
        f"- load average at start {' '.join(load_start)}, at end {' '.join(load_end)} "
        f"(2 cores, shared); other load at end: {machine_note()}",
        "- server: the test fixture's (tests/pgserver.py: PostgreSQL 18 from the pinned wheel, "
        "fsync off); each trial's database made from the base's as a template",
        "- window: the median of the erasure's own duration over 3 unkilled runs; random "
        "instants uniform in [0, window], counted by a timer thread the child starts as the "
        "erasure begins, which then SIGKILLs its own process",
        "- landed mid: killed after the child printed `go` and before `done`; whole / none / "
        "broken: the state the next read-write open showed, over the named points and the "
        "random kills that landed mid-erasure (broken counts every trial)",
        "", "| erasure | window | named points: mid / points | random trials | landed mid | "
        "before | after | whole | none | broken | problems | time |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|", *rows, ""]))
    print(f"written to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
