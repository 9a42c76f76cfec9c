"""Where an ingest's time goes: SQL time by statement (SQLite's own timing, through APSW's
profile hook) during bench_ledger's workload written through the service, on a fresh ledger or
on top of a copy of a cached one.

    .venv/bin/python bench/bench_ingest_profile.py --ops 5000 --tmp DIR [--out FILE]
    .venv/bin/python bench/bench_ingest_profile.py --ops 10000 --tmp DIR \
        --base /work/bench-cache/erasure/erasure-1000000-s20260901-r100000.db [--out FILE]
    ... --removals-at 100000   # the same with every removal deferred to its group's end

Then the floor that also writes each fact's FTS5 and sqlite-vec rows inserts the rows this
ingest wrote into a copy of the ledger as it was before (as bench_ontop does), and the target's
budget an event (three times the floor's time) is set beside SQLite's own time an event in the
service.

A statement's time is SQLite's, from its first step to its reset, so it holds the work a virtual
table does for it, including what FTS5 does when that statement opens a statement transaction:
FTS5 writes its pending rows (and, with secure-delete, rewrites the pages of a deleted row's
terms) at the start of the next statement that needs one, which is why the vector table's DELETE
carries most of the lexical index's removal cost. The hook costs about a microsecond a statement,
so the ingest rate printed here is below bench_ledger's: use that one for the rate. The base is
only read (copied with its key store); the copies are written under `--tmp` and removed. Prints
markdown (and writes it to `--out` if given); writes nothing else.
"""

from __future__ import annotations

import argparse
import collections
import gc
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import bench_ledger as B  # noqa: E402
import bench_ontop as O  # noqa: E402

from bench.benchenv import header, machine_note  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402
from custody_app.recall import index as recall_index  # noqa: E402
from store import open_ledger  # noqa: E402

TOP = 15


def profile(path: Path, work: B.Workload, seed: int) -> tuple[B.Result, dict[str, list[int]], float]:
    """Ingest `work` into `path` with every statement of the ledger's connection timed."""
    stats: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])

    def hook(sql: str, nanoseconds: int, *_: Any) -> None:
        entry = stats[" ".join(sql.split())[:110]]
        entry[0] += 1
        entry[1] += nanoseconds

    opened = Ledger.open

    def open_profiled(p: Any, **options: Any) -> Ledger:
        ledger = opened(p, **options)
        ledger.db.conn.set_profile(hook)
        return ledger

    B.Ledger.open = open_profiled  # type: ignore[method-assign]
    try:
        gc.collect()
        gc.freeze()
        began = time.perf_counter()
        res = B.ingest(path, work, 1000, seed, lambda msg: print(msg, file=sys.stderr))
        wall = time.perf_counter() - began
        gc.unfreeze()
    finally:
        B.Ledger.open = opened  # type: ignore[method-assign]
    return res, stats, wall


def render(label: str, res: B.Result, stats: dict[str, list[int]], wall: float) -> str:
    total = sum(v[1] for v in stats.values()) / 1e9
    ops = res.ops_measured
    lines = [f"### {label}", "",
             f"{ops:,} ops in {wall:.1f} s with the hook ({ops / wall:,.0f} ops/s); SQL "
             f"{total:.2f} s of it ({total / wall:.0%}), "
             f"{sum(v[0] for v in stats.values()) / max(ops, 1):.0f} statements an op "
             "(those a virtual table runs for itself included).", "",
             "| statement | runs | total ms | share of SQL | ms a run |",
             "|---|---:|---:|---:|---:|"]
    for sql, (runs, ns) in sorted(stats.items(), key=lambda kv: -kv[1][1])[:TOP]:
        lines.append(f"| `{sql}` | {runs:,} | {ns / 1e6:,.0f} | {ns / 1e9 / total:.0%} | "
                     f"{ns / 1e6 / runs:.3f} |")
    return "\n".join(lines)


def recall_floor(path: Path, base: Path, head_seq: int, dst: Path) -> float:
    """Seconds the floor with the recall rows takes to insert what the service wrote into
    `path` after `head_seq` (its event rows, FTS5 rows and sqlite-vec rows) into a copy of
    `base`, 1,000 events a transaction, as bench_ontop measures it."""
    db = open_ledger(path, readonly=True)
    rows, fts, vec = O.written_after(db, head_seq)
    db.close()
    if not head_seq:  # a fresh ledger: its recall tables as the service made them
        made = open_ledger(base)
        embedder = open_ledger(path, readonly=True)
        try:
            name, dims = embedder.recall.embedder() or ("hashed-ngram-v1-256", 256)
        finally:
            embedder.close()
        with made.write():
            made.recall.create(name, dims)
        made.close()
    wall, _cpu, _upgrade = O._floor(base, dst, rows, fts, vec, 1000, True)
    return wall / len(rows)


def bound(res: B.Result, stats: dict[str, list[int]], wall: float, floor_s: float) -> str:
    """The target's budget an event against what SQLite alone spends on one in the service."""
    ops = res.ops_measured
    sql = sum(v[1] for v in stats.values()) / 1e9 / ops
    removal = sum(v[1] for k, v in stats.items() if k.startswith("DELETE FROM recall_vec")
                  ) / 1e9 / ops
    us = 1e6
    return "\n".join([
        "#### The target's budget against SQLite's own time", "",
        "Microseconds an event (an op writes one event), the floor measured in the same run on "
        "the rows this ingest wrote:", "",
        "| | µs an event | times the floor |",
        "|---|---:|---:|",
        f"| floor with one FTS5 + one sqlite-vec row per fact | {floor_s * us:,.0f} | 1.0 |",
        f"| the target: a third of the floor's rate | {3 * floor_s * us:,.0f} | 3.0 |",
        f"| the service, all of it (with the hook) | {wall / ops * us:,.0f} | "
        f"{wall / ops / floor_s:.1f} |",
        f"| the service's SQL alone (every statement) | {sql * us:,.0f} | {sql / floor_s:.1f} |",
        f"| ... less the vector table's DELETE (removals, FTS5's pending work) | "
        f"{(sql - removal) * us:,.0f} | {(sql - removal) / floor_s:.1f} |",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=5000)
    ap.add_argument("--base", default=None, help="a cached ledger to write on top of (only read)")
    ap.add_argument("--seed", type=int, default=20260907)
    ap.add_argument("--tmp", required=True, help="directory for the ledgers (removed at the end)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--removals-at", type=int, default=None,
                    help="write deferred removals once this many wait (the product: "
                         f"{recall_index.MOVE_AT}; a large number defers them to the group's end)")
    args = ap.parse_args(argv)
    if args.removals_at is not None:
        recall_index.MOVE_AT = args.removals_at
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="custody-ingest-profile-", dir=args.tmp))
    notes = [f"load at start {machine_note()}"]
    try:
        path = tmp / "ledger.db"
        start = datetime(2026, 1, 5, tzinfo=UTC)
        label = f"{args.ops:,} ops on a fresh ledger"
        if args.base:
            O._copy(Path(args.base), path)
            Ledger.open(path).close()  # a schema upgrade of an older base, untimed
            head_seq, head_at, _ = O._head(Path(args.base))
            start = datetime.fromisoformat(head_at.replace("Z", "+00:00")) + timedelta(seconds=1)
            label = f"{args.ops:,} ops on top of {head_seq:,} events ({Path(args.base).name})"
        head_seq = O._head(path)[0] if args.base else 0
        base = tmp / "base.db"  # what the floor inserts into: a copy of the ledger before
        if args.base:
            O._copy(path, base)
        else:
            open_ledger(base).close()
        work = B.make_workload(args.ops, args.seed, start)
        res, stats, wall = profile(path, work, args.seed)
        if args.removals_at is not None:
            label += f", removals written {args.removals_at} at a time"
        label += (f"; single op p99.9 {B._pct(res.op_ms, 0.999):.1f} ms, max "
                  f"{max(res.op_ms):.1f}; group end max {max(res.commit_ms):.1f} ms")
        floor_s = recall_floor(path, base, head_seq, tmp / "floor.db")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    notes.append(f"load at end {machine_note()}")
    out = "\n".join([header(notes), "", render(label, res, stats, wall), "",
                     bound(res, stats, wall, floor_s), ""])
    print(out)
    if args.out:
        Path(args.out).write_text(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
