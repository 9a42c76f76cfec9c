"""Re-clustering moves on a synthetic vector index: what a move costs, statement by statement,
in fact order and in old-cell order, and what the write transactions of `recluster` hold.

    .venv/bin/python bench/bench_recluster.py [--vectors 100000] [--rows 8000]

Builds (once, in `--tmp`) an index of `--vectors` random unit vectors of 256 dimensions in
sqrt(n) cells, every fact's cell drawn at random as in a ledger clustered long ago, and a new set
of centroids being moved to (a re-clustering begun); then, each on a fresh copy:
- 500 rows moved by hand in transactions of 50, timing the point read, the vec0 DELETE, the
  INSERT and the COMMIT of each, in fact order and in old-cell order;
- `recluster` itself moving `--rows` rows, with the time budget and without, reporting what
  its transactions held the write lock.
With `--longest N`, instead: the N longest transactions of each of those two runs, with their
rows, the chunks sqlite-vec made in them and their COMMIT against its estimate. With
`--lookup`, instead: the move by statement (old-cell order) and `recluster` with its budget,
each without and with the store's index on sqlite-vec's chunks by cell (issue 35: without it
every insert scans every chunk row). Not a test: prints markdown tables.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from custody_app.recall import recluster as rc  # noqa: E402
from store import LedgerFile, open_ledger  # noqa: E402
from store.rows import vec_row  # noqa: E402
from store.sqlite.recall import CHUNK_LOOKUP, VEC_DELETE, VEC_INSERT, VEC_META_ONE  # noqa: E402

DIMS = 256


def build(path: Path, n: int) -> None:
    db = open_ledger(path)
    rng = np.random.default_rng(1)
    cells = round(n ** 0.5)
    with db.write():
        db.recall.create("hashed-ngram", DIMS)
    for lo in range(0, n, 10_000):
        size = min(10_000, n - lo)
        v = rng.standard_normal((size, DIMS)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1)[:, None]
        with db.write():
            db.recall._insert_vectors([vec_row(lo + i + 1, int(rng.integers(cells)),
                                               v[i].tobytes(), "active", "org",
                                               f"s{(lo + i) % 5000}")
                                       for i in range(size)])
    centroids = rng.standard_normal((cells, DIMS)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1)[:, None]
    with db.write():
        db.recall.begin_moving(cells + 1, [c.tobytes() for c in centroids])
    db.wal_checkpoint()
    db.close()


def fresh(base: Path, work: Path) -> LedgerFile:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{work}{suffix}"):
            os.remove(f"{work}{suffix}")
    shutil.copy(base, work)
    db = open_ledger(work)
    # As the background re-clustering opens it: no memory map, and its commits hand the WAL
    # checkpoint to a thread (without this, SQLite's own checkpoint ran inside the COMMIT that
    # passed 1,000 pages, 20-130 ms, which the product's commits never do).
    db.limit_mmap(0)
    db.checkpoint_in_background()
    return db


def by_statement(db: LedgerFile, order: str) -> dict[str, float]:
    """ms per row of each statement of a move, 500 rows in transactions of 50."""
    conn = db.conn
    seqs, cells = db.recall.vector_seqs_by_cell(10**9)
    rows = sorted(zip(cells, seqs, strict=True))
    if order == "fact":
        rows.sort(key=lambda r: r[1])
    picked = rows[len(rows) // 5:len(rows) // 5 + 500]
    vectors = dict(db.recall.vectors_of([s for _, s in picked]))
    spent = {"point read": 0.0, "vec0 DELETE": 0.0, "INSERT": 0.0, "COMMIT": 0.0}
    base = db.recall.moving_below()
    for lo in range(0, len(picked), 50):
        conn.execute("BEGIN IMMEDIATE")
        for cell, seq in picked[lo:lo + 50]:
            t0 = time.perf_counter()
            meta = conn.execute(VEC_META_ONE, (seq,)).fetchall()[0]
            t1 = time.perf_counter()
            conn.execute(VEC_DELETE, (seq,))
            t2 = time.perf_counter()
            conn.execute(VEC_INSERT, (seq, base + cell % 7, vectors[seq], *meta[1:]))
            t3 = time.perf_counter()
            spent["point read"] += t1 - t0
            spent["vec0 DELETE"] += t2 - t1
            spent["INSERT"] += t3 - t2
        t4 = time.perf_counter()
        conn.execute("COMMIT")
        spent["COMMIT"] += time.perf_counter() - t4
    return {k: v / len(picked) * 1000 for k, v in spent.items()}


def moves(db: LedgerFile, rows: int, budget: float | None) -> str:
    held: list[float] = []
    stop = threading.Event()
    done = [0]

    def progress(moved: int, total: int) -> None:
        done[0] = moved
        if moved >= rows:
            stop.set()

    began = time.perf_counter()
    rc.recluster(db, None, budget_s=budget, progress=progress, stop=stop,  # type: ignore[arg-type]
                 held_ms=held)
    wall = time.perf_counter() - began
    held.sort()
    return (f"{len(held)} transactions, {done[0]:,} rows: held p50 {held[len(held) // 2]:.1f} / "
            f"p99 {held[int(len(held) * 0.99)]:.1f} / max {held[-1]:.1f} ms, "
            f"{sum(held) / done[0]:.2f} ms held a row, {wall:.1f} s wall")


def longest(db: LedgerFile, rows: int, budget: float | None, n: int) -> str:
    """The `n` longest write transactions of `recluster` moving `rows` rows: what each held,
    its rows, the chunks sqlite-vec made in it, and its COMMIT against the estimate made
    before it (a table)."""
    seen: list[tuple[int, int, float, float]] = []  # rows, chunks, COMMIT s, estimate s
    learn = rc.CommitCost.learn

    def noting(self: rc.CommitCost, used: int, chunks: int, seconds: float) -> None:
        seen.append((used, chunks, seconds, self.of(used, chunks)))
        learn(self, used, chunks, seconds)
    rc.CommitCost.learn = noting  # type: ignore[method-assign]
    held: list[float] = []
    stop = threading.Event()

    def progress(moved: int, total: int) -> None:
        if moved >= rows:
            stop.set()
    try:
        rc.recluster(db, None, budget_s=budget, progress=progress, stop=stop,  # type: ignore[arg-type]
                     held_ms=held)
    finally:
        rc.CommitCost.learn = learn  # type: ignore[method-assign]
    label = "no time budget" if budget is None else f"{budget * 1000:.0f} ms budget"
    out = [f"The {n} longest of {len(held)} transactions, {label}:", "",
           "| held (ms) | rows | chunks made | COMMIT (ms) | COMMIT estimated before it (ms) |",
           "|---:|---:|---:|---:|---:|"]
    for i in sorted(range(len(held)), key=lambda i: -held[i])[:n]:
        used, chunks, commit, estimate = seen[i]
        out.append(f"| {held[i]:.1f} | {used} | {chunks} | {commit * 1000:.2f} | "
                   f"{estimate * 1000:.2f} |")
    made = sum(1 for _, c, _, _ in seen if c)
    out.append(f"\n{made} of {len(seen)} transactions made a chunk.")
    return "\n".join(out)


def lookup(base: Path, work: Path, vectors: int, rows: int) -> str:
    """The move by statement and `recluster`'s transactions without the store's index on
    sqlite-vec's chunks by cell (dropped from the fresh copy) and with it."""
    out = [f"{vectors:,} vectors of {DIMS} dimensions in {round(vectors ** 0.5)} cells; load "
           f"(1/5/15 min) at start {Path('/proc/loadavg').read_text().split()[:3]}", "",
           "| chunks' cell index | point read | vec0 DELETE | INSERT | COMMIT | all (ms a row) | "
           f"recluster, {rc.BUDGET_S * 1000:.0f} ms budget |", "|---|---:|---:|---:|---:|---:|---|"]
    for with_index in (False, True, False, True):
        db = fresh(base, work)
        if not with_index:
            with db.write():
                db.conn.execute(f"DROP INDEX {CHUNK_LOOKUP}")
        spent = by_statement(db, "old cell")
        db.close()
        db = fresh(base, work)
        if not with_index:
            with db.write():
                db.conn.execute(f"DROP INDEX {CHUNK_LOOKUP}")
        moved = moves(db, rows, rc.BUDGET_S)
        db.close()
        out.append(f"| {'with' if with_index else 'without'} | "
                   + " | ".join(f"{v:.3f}" for v in spent.values())
                   + f" | {sum(spent.values()):.3f} | {moved} |")
    out.append(f"\nload at the end {Path('/proc/loadavg').read_text().split()[:3]}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vectors", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=8000)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--longest", type=int, default=0,
                    help="instead: list the N longest transactions of each recluster run")
    ap.add_argument("--lookup", action="store_true",
                    help="instead: compare moves without and with the chunks' cell index")
    args = ap.parse_args()
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="bench-recluster-"))
    tmp.mkdir(parents=True, exist_ok=True)
    base = tmp / f"synthetic-{args.vectors}.db"
    if not base.exists():
        build(tmp / "building.db", args.vectors)
        os.rename(tmp / "building.db", base)
    work = tmp / "work.db"
    if args.lookup:
        print(lookup(base, work, args.vectors, args.rows))
        return 0
    if args.longest:
        for budget in (None, rc.BUDGET_S):
            db = fresh(base, work)
            print(longest(db, args.rows, budget, args.longest) + "\n")
            db.close()
        return 0
    print(f"{args.vectors:,} vectors of {DIMS} dimensions in {round(args.vectors ** 0.5)} cells; "
          f"load average {os.getloadavg()[0]:.2f}\n")
    print("| a move, ms per row | " + " | ".join(
        ["point read", "vec0 DELETE", "INSERT", "COMMIT", "all"]) + " |")
    print("|---|---:|---:|---:|---:|---:|")
    for order in ("fact", "old cell", "fact", "old cell"):
        db = fresh(base, work)
        spent = by_statement(db, order)
        db.close()
        print(f"| {order} order | " + " | ".join(f"{v:.3f}" for v in spent.values())
              + f" | {sum(spent.values()):.3f} |")
    print()
    for budget in (None, rc.BUDGET_S):
        db = fresh(base, work)
        db.checkpoint_in_background()
        label = "no time budget" if budget is None else f"{budget * 1000:.0f} ms budget"
        print(f"- recluster, batches of {rc.BATCH}, {label}: {moves(db, args.rows, budget)}")
        db.close()
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
