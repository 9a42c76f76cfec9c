"""Ingest at a large size without building it here: `--ops` more events of bench_ledger's
workload written through the service on top of a copy of an existing (cached) ledger, against
both floors measured on copies of the same ledger in the same run.

    .venv/bin/python bench/bench_ontop.py --base /work/bench-cache/NAME.db --ops 10000 \
        --tmp /work/bench-cache/ing --out FILE

The base is only read (copied with its key store and master key file); the copies are written
in a temp dir under `--tmp` and removed at the end. A base at an older schema is upgraded at
the first (untimed, but reported) open of each copy. The floors insert the very event rows the
service wrote (read back from its copy), and for the second floor their FTS5 and sqlite-vec
rows as the service stored them, `--tx` rows per transaction, into a copy of the base opened by
`store.open_ledger()`. Prints a markdown table (and writes it to `--out` if given).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import apsw  # noqa: E402
import bench_ledger as B  # noqa: E402

from custody_app.ledger.facade import Ledger  # noqa: E402
from store import LedgerFile, open_ledger  # noqa: E402
from store.rows import EVENT_COLUMNS  # noqa: E402
from store.sqlite.recall import FTS_INSERT, VEC_COLUMNS, VEC_INSERT  # noqa: E402

SUFFIXES = ("", ".keys", ".keys.master")


def _copy(base: Path, dst: Path) -> None:
    for suffix in SUFFIXES:
        src = Path(f"{base}{suffix}")
        if src.exists():
            shutil.copyfile(src, f"{dst}{suffix}")
    if Path(f"{base}-wal").exists() and Path(f"{base}-wal").stat().st_size:
        raise SystemExit(f"{base} has a non-empty WAL: close its writer first")


def _remove(path: Path) -> None:
    for p in path.parent.glob(path.name + "*"):
        p.unlink()


def _head(path: Path) -> tuple[int, str, int]:
    """(seq, tx_at) of the newest event and the number of facts, read without migrating."""
    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        seq, tx_at = con.execute("SELECT seq, tx_at FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        facts = con.execute("SELECT count(*) FROM facts").fetchone()[0]
        return int(seq), str(tx_at), int(facts)
    finally:
        con.close()


def written_after(db: LedgerFile, head_seq: int) -> tuple[list, list, list]:
    """The event rows, FTS5 rows and sqlite-vec rows written after `head_seq`: what the floors
    insert."""
    cols = ", ".join(EVENT_COLUMNS)
    rows = db.conn.execute(f"SELECT {cols} FROM events WHERE seq > ? ORDER BY seq",
                           (head_seq,)).fetchall()
    fts = db.conn.execute("SELECT rowid, terms, scope FROM recall_fts WHERE rowid > ?",
                          (head_seq,)).fetchall()
    vec = db.conn.execute(f"SELECT {VEC_COLUMNS} FROM recall_vec WHERE fact_seq > ?",
                          (head_seq,)).fetchall()
    return rows, fts, vec


def _floor(base: Path, dst: Path, rows: list, fts: list, vec: list, tx: int,
           with_recall: bool) -> tuple[float, float, float]:
    """(wall s, CPU s, upgrade-at-open s) of inserting `rows` (and the recall rows) into a copy."""
    _copy(base, dst)
    t0 = time.perf_counter()
    db = open_ledger(dst)  # migrates an older base (untimed below)
    upgrade = time.perf_counter() - t0
    extras = ((FTS_INSERT, {r[0]: [r] for r in fts}), (VEC_INSERT, {r[0]: [r] for r in vec}))
    wall, cpu = B.timed_inserts(db.conn, rows, tx, extras if with_recall else ())
    out = (wall, cpu, upgrade)
    db.close()
    _remove(dst)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the ledger to write on top of (only read)")
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--tx", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20260907)
    ap.add_argument("--tmp", required=True, help="directory for the copies (removed at the end)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    base = Path(args.base)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    head_seq, head_at, base_facts = _head(base)
    if args.tmp:
        Path(args.tmp).mkdir(parents=True, exist_ok=True)  # the folder it was told to use
    tmp = Path(tempfile.mkdtemp(prefix="custody-ontop-", dir=args.tmp))
    try:
        path = tmp / "ontop.db"
        _copy(base, path)
        t0 = time.perf_counter()
        Ledger.open(path).close()  # the schema upgrade of an older base, if any
        upgrade_s = time.perf_counter() - t0
        start = datetime.fromisoformat(head_at.replace("Z", "+00:00")) + timedelta(seconds=1)
        work = B.make_workload(args.ops, args.seed, start)
        gc.collect()
        gc.freeze()
        load = f"{os.getloadavg()[0]:.2f}"
        log(f"ingest {args.ops:,} ops on top of {head_seq:,} events")
        res = B.ingest(path, work, args.tx, args.seed, log)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        gc.unfreeze()
        del work
        db = open_ledger(path, readonly=True)
        rows, fts, vec = written_after(db, head_seq)
        facts_after = db.conn.execute("SELECT count(*) FROM facts").fetchone()[0]
        db.close()
        log("floors")
        ev_wall, ev_cpu, _ = _floor(base, tmp / "floor.db", rows, fts, vec, args.tx, False)
        rc_wall, rc_cpu, _ = _floor(base, tmp / "floor.db", rows, fts, vec, args.tx, True)
        log("verify")
        led = Ledger.open(path)
        t0 = time.perf_counter()
        report = led.verify()
        verify_s = time.perf_counter() - t0
        led.close()
        size = B._file_size(path)
        keys = sum(p.stat().st_size for p in path.parent.glob(f"{path.name}.keys*"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    n = len(rows)
    svc_wall, svc_cpu = res.ingest_rate, res.ingest_cpu_rate
    pct = B._pct
    lines = [
        B.header(),
        f"- base: `{base.name}`, {head_seq:,} events, {base_facts:,} facts; the schema upgrade "
        f"at the first open of the copy took {upgrade_s:.1f} s (not in any figure below)",
        f"- load average (1 min) before the ingest: {load}; after: {os.getloadavg()[0]:.2f}",
        "",
        f"| metric | {args.ops:,} events on top of {head_seq:,} | target |",
        "|---|---:|---|",
        f"| ingest through the service (events/s, wall / per CPU-s) | {svc_wall:,.0f} / {svc_cpu:,.0f} | |",
        f"| floor, events only (events/s, wall / per CPU-s) | {n / ev_wall:,.0f} / {n / ev_cpu:,.0f} | |",
        f"| floor with one FTS5 + one sqlite-vec row per fact (events/s, wall / per CPU-s) | "
        f"{n / rc_wall:,.0f} / {n / rc_cpu:,.0f} | |",
        f"| service / recall floor (wall / CPU) | {svc_wall / (n / rc_wall):.3f} / "
        f"{svc_cpu / (n / rc_cpu):.3f} | >= 0.33 |",
        "| single op in a group, p50 / p99 / p99.9 / max (ms) | "
        + " / ".join(f"{pct(res.op_ms, q):.2f}" for q in (0.5, 0.99, 0.999))
        + f" / {max(res.op_ms):.1f} | p99.9 <= 100 |",
        "| group end (deferred recall rows + COMMIT), p50 / p99 / max (ms) | "
        + " / ".join(f"{pct(res.commit_ms, q):.1f}" for q in (0.5, 0.99))
        + f" / {max(res.commit_ms):.1f} | |",
        "| a group's wait to begin (the background checkpoint pass a commit past CAP "
        "started, then the write lock), p50 / p99 / max (ms) | "
        + " / ".join(f"{pct(res.begin_ms, q):.1f}" for q in (0.5, 0.99))
        + f" / {max(res.begin_ms):.1f} | < busy timeout (5 s) |",
        f"| background re-clustering batches during the ingest | {len(res.recluster_ms)} | |",
        f"| verify, full chain (s) | {verify_s:.1f}" + ("" if report.valid else " INVALID")
        + " | < 30 |",
        f"| peak RSS of this process (MB) | {rss:,.0f} | |",
        f"| ledger file + WAL after (MB); key store (MB) | {size / 1e6:,.1f}; {keys / 1e6:,.1f} | |",
        f"| bytes per event; per fact ({facts_after:,} facts) | {size / (head_seq + n):,.0f}; "
        f"{size / facts_after:,.0f} | |",
        "",
        f"Failures: {res.failures}. Op mix: {res.counts}.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
