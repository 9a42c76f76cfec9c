"""Single writes through the API, one transaction each (issue 35: no write over 100 ms at
p99.9): each write's latency, and for the slowest what it waited on.

    .venv/bin/python bench/bench_write_latency.py --grow 20000 --tmp DIR [--out FILE]
    .venv/bin/python bench/bench_write_latency.py --base CACHED.db --ops 20000 --tmp DIR

`--grow N` writes N facts into a new ledger; `--base` copies a cached ledger (with its key files)
into `--tmp` and writes `--ops` facts on top of it. Each fact has a subject and predicate of its
own (three predicates a subject), no corrections. Each write's time is split by wrapping, for
that write only: the wait for a WAL checkpoint pass (`Checkpointer.before_write`), the wait for
this process's write turn (`Gate.enter`: behind a re-clustering transaction), the wait for
SQLite's lock (`begin_immediate`), the deferred recall index flushes (`RecallIndex.flush`, where
FTS5's secure-delete merges and sqlite-vec's chunks are written), the key store's transactions
(their COMMITs, with their fsyncs: the key store has a rollback journal and synchronous=FULL;
the key store's transaction sits inside the ledger's, so the ledger's lock is held meanwhile) and Python's cyclic GC
(`gc.callbacks`), each counted only in the writing thread; beside them, whether a checkpoint pass or a re-clustering transaction ran
meanwhile. Two floors are measured in the same run, interleaved with the writes (one of each
per `--floor-every` writes): a one-row SQLite commit in WAL mode (synchronous=NORMAL, no fsync,
as the ledger's own commits) and one with an fsync (rollback journal, synchronous=FULL, as the
key store's), both in the same folder, so the disk's and the machine's own stalls show.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import apsw  # noqa: E402
from benchenv import emit, header, machine_note  # noqa: E402

import store.sqlite.connection as connection  # noqa: E402
from custody_app.domain.timeutil import ManualClock  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402
from custody_app.recall.index import RecallIndex  # noqa: E402
from store.sqlite.checkpointer import Checkpointer  # noqa: E402
from store.sqlite.gate import Gate  # noqa: E402
from store.sqlite.keystore import KeyStoreFile  # noqa: E402

PARTS = ("checkpoint wait", "turn wait", "lock wait", "index flush", "key store", "gc")
WORDS = ("invoice refund shipping address billing plan upgrade renewal discount warranty "
         "delivery pickup locker courier parcel order return exchange voucher loyalty points "
         "premium basic monthly yearly trial cancel pause resume card bank transfer").split()


class Probe:
    """What the write under way waited on (seconds a part), filled by the wrappers."""

    def __init__(self) -> None:
        self.now: dict[str, float] | None = None
        self.thread = threading.get_ident()  # the writer's: other threads' waits are not its own
        self.gc_gen: list[int] = []
        self._gc_at = 0.0

    def add(self, part: str, seconds: float) -> None:
        if self.now is not None and threading.get_ident() == self.thread:
            self.now[part] = self.now.get(part, 0.0) + seconds

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_at = time.perf_counter()
        else:
            self.add("gc", time.perf_counter() - self._gc_at)
            if self.now is not None and threading.get_ident() == self.thread:
                self.gc_gen.append(int(info["generation"]))


def instrument(probe: Probe) -> None:
    def wrap(owner: Any, name: str, part: str) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                probe.add(part, time.perf_counter() - t)
        setattr(owner, name, timed)

    wrap(Checkpointer, "before_write", "checkpoint wait")
    wrap(Gate, "enter", "turn wait")
    wrap(connection, "begin_immediate", "lock wait")
    wrap(RecallIndex, "flush", "index flush")
    keystore_write = KeyStoreFile.write

    @contextmanager
    def keystore_timed(self: KeyStoreFile) -> Iterator[None]:
        outer = not self.conn.in_transaction
        with keystore_write(self):
            yield
            t = time.perf_counter()  # the block is done: what follows is its COMMIT
        if outer:
            probe.add("key store", time.perf_counter() - t)
    KeyStoreFile.write = keystore_timed  # type: ignore[method-assign]
    gc.callbacks.append(probe.on_gc)


def floors(folder: Path) -> tuple[Callable[[], float], Callable[[], float]]:
    """Two plain SQLite commits of one row: WAL without fsync, rollback journal with fsync."""
    def make(name: str, journal: str, sync: str) -> apsw.Connection:
        conn = apsw.Connection(str(folder / name))
        conn.execute(f"PRAGMA journal_mode={journal}").fetchall()
        conn.execute(f"PRAGMA synchronous={sync}").fetchall()
        conn.execute("CREATE TABLE IF NOT EXISTS t(x BLOB)")
        return conn
    wal = make("floor-wal.db", "WAL", "NORMAL")
    full = make("floor-fsync.db", "DELETE", "FULL")
    blob = os.urandom(200)

    def commit(conn: apsw.Connection) -> float:
        t = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?)", (blob,))
        conn.execute("COMMIT")
        return time.perf_counter() - t
    return (lambda: commit(wal)), (lambda: commit(full))


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


def row(name: str, xs: list[float]) -> str:
    return (f"| {name} | {len(xs):,} | {statistics.median(xs) * 1000:.2f} | {pct(xs, 0.99):.1f} | "
            f"{pct(xs, 0.999):.1f} | {max(xs) * 1000:.1f} | {sum(x > 0.1 for x in xs)} |")


def run(path: Path, ops: int, start: datetime, seed: int, floor_every: int,
        log: Callable[[str], None], policy: Path | None = None) -> dict[str, Any]:
    probe = Probe()
    instrument(probe)
    clock = ManualClock(start)
    ledger = Ledger.open(path, clock=clock, policy=policy)
    wal_floor, fsync_floor = floors(path.parent)
    rng = random.Random(seed)
    lat: list[float] = []
    cpus: list[float] = []  # the writing thread's own CPU time in each write
    parts: list[dict[str, float]] = []
    context: list[tuple[bool, int, int]] = []  # (checkpoint pass ran, re-clustering txns, gcs)
    floor_wal: list[float] = []
    floor_fsync: list[float] = []
    maint = ledger.index.maintenance
    cpu0 = time.process_time()
    t_start = time.perf_counter()
    try:
        for i in range(ops):
            clock.set(start + timedelta(milliseconds=i))
            text = " ".join(rng.sample(WORDS, 4)) + f" ref {rng.randrange(10**6)}"
            cp = ledger.db.checkpointer
            passes = cp.passes if cp is not None else 0
            held = len(maint.held_ms)
            probe.now = {}
            probe.gc_gen = []
            c = time.thread_time()
            t = time.perf_counter()
            ledger.assert_fact(f"cust:{seed}:{i // 3}", f"note{i % 3}", text, actor="agent:bench",
                               cause={"kind": "message", "ref": f"m{i}"}, provenance="attested")
            lat.append(time.perf_counter() - t)
            cpus.append(time.thread_time() - c)
            parts.append(probe.now)
            probe.now = None
            running = cp is not None and (cp.passes != passes or cp._running)
            context.append((running, len(maint.held_ms) - held, len(probe.gc_gen)))
            if i % floor_every == 0:
                floor_wal.append(wal_floor())
                floor_fsync.append(fsync_floor())
            if (i + 1) % 5000 == 0:
                log(f"  {i + 1:,} writes, {(time.perf_counter() - t_start):.0f} s, "
                    f"cells {ledger.index.cells.count_cells()}")
        cpu = time.process_time() - cpu0
        wall = time.perf_counter() - t_start
        cells = ledger.index.cells.count_cells()
        clustered = ledger.db.recall.clustered_on()
        vectors = ledger.db.recall.vector_count()
    finally:
        ledger.close()
    return {"lat": lat, "cpus": cpus, "parts": parts, "context": context, "floor_wal": floor_wal,
            "floor_fsync": floor_fsync, "cpu": cpu, "wall": wall, "cells": cells,
            "clustered": clustered, "vectors": vectors,
            "recluster_held": list(maint.held_ms)}


def report(r: dict[str, Any], title: str, slowest: int, load: tuple[str, str]) -> str:
    lat = r["lat"]
    out = [f"## {title}", "", header([f"load (1/5/15 min) at start {load[0]}, at end {load[1]}",
                                       f"other processes at end: {machine_note()}"]), "",
           f"{len(lat):,} writes in {r['wall']:.0f} s wall, {r['cpu']:.0f} s CPU "
           f"({len(lat) / r['cpu']:.0f} writes per CPU-second); at the end {r['vectors']:,} "
           f"vectors in {r['cells']} cells (clustered on {r['clustered']:,}; "
           f"sqrt(n) = {r['vectors'] ** 0.5:.0f}); re-clustering transactions during the run: "
           f"{len(r['recluster_held'])}, longest "
           f"{max(r['recluster_held'], default=0.0):.1f} ms.", "",
           "| what | n | p50 ms | p99 ms | p99.9 ms | max ms | over 100 ms |",
           "|---|---:|---:|---:|---:|---:|---:|",
           row("a write through the API (`assert_fact`)", lat),
           row("... its own CPU time (the writing thread's)", r["cpus"]),
           row("floor: one-row SQLite commit, WAL, no fsync", r["floor_wal"]),
           row("floor: one-row SQLite commit with fsync (as the key store)", r["floor_fsync"]),
           "", f"The {slowest} slowest writes, and what each waited on (ms):", "",
           "| # | write | total | its CPU | " + " | ".join(PARTS) + " | other | checkpoint pass "
           "meanwhile | re-clustering txns meanwhile |",
           "|---:|---:|---:|---:|" + "---:|" * len(PARTS) + "---:|---|---:|"]
    order = sorted(range(len(lat)), key=lambda i: -lat[i])[:slowest]
    for rank, i in enumerate(order, 1):
        p = r["parts"][i]
        other = lat[i] - sum(p.values())
        ran, txns, _ = r["context"][i]
        out.append(f"| {rank} | {i:,} | {lat[i] * 1000:.1f} | {r['cpus'][i] * 1000:.1f} | "
                   + " | ".join(f"{p.get(k, 0.0) * 1000:.1f}" for k in PARTS)
                   + f" | {other * 1000:.1f} | {'yes' if ran else 'no'} | {txns} |")
    totals = {k: sum(p.get(k, 0.0) for p in r["parts"]) for k in PARTS}
    out += ["", "Summed over every write (s): " + ", ".join(f"{k} {v:.1f}"
                                                         for k, v in totals.items()), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grow", type=int, default=0, help="write N facts into a new ledger")
    ap.add_argument("--base", default=None, help="a cached ledger to write on top of (copied)")
    ap.add_argument("--ops", type=int, default=20_000, help="with --base: writes on top")
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--slowest", type=int, default=20)
    ap.add_argument("--floor-every", type=int, default=5)
    ap.add_argument("--ann-min-facts", type=int, default=0,
                    help="with --grow: cluster from this size on (the default policy otherwise), "
                         "so a short run meets several re-clusterings")
    ap.add_argument("--embedder", default=None,
                    help="the default policy with this embedder instead (hashed-ngram embeds in "
                         "the write's transaction, so its vectors and re-clusterings run beside "
                         "the writes; the shipped model's worker waits for pauses a run of "
                         "back-to-back writes never leaves)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="custody-latency-", dir=args.tmp))
    load0 = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        path = tmp / "latency.db"
        start = datetime(2027, 1, 1)
        if args.base:
            for suffix in ("", ".keys", ".keys.master"):
                if Path(f"{args.base}{suffix}").exists():
                    shutil.copyfile(f"{args.base}{suffix}", f"{path}{suffix}")
            Ledger.open(path).close()  # an older base's upgrade, outside the timed writes
            # The copies' pages are written out before the clock starts: left dirty, the first
            # fsync of the ledger (its first WAL checkpoint pass) flushed the whole copied file
            # and stalled the disk under the key store's commits (a write of 54-343 ms, always
            # about the 50th, in session 22's first runs). A user's ledger is not a fresh copy.
            for suffix in ("", ".keys", ".keys.master"):
                if Path(f"{path}{suffix}").exists():
                    fd = os.open(f"{path}{suffix}", os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
            title = f"{args.ops:,} writes on top of a copy of {Path(args.base).name}"
            ops = args.ops
        else:
            title = f"growing a new ledger to {args.grow:,} facts"
            ops = args.grow
        policy = None
        if args.ann_min_facts or args.embedder:
            text = (ROOT / "policies" / "default.toml").read_text(encoding="utf-8")
            if args.ann_min_facts:
                text = text.replace("ann_min_facts = 20000",
                                    f"ann_min_facts = {args.ann_min_facts}")
                title += f" (clustering from {args.ann_min_facts:,} facts on)"
            if args.embedder:
                text, n = re.subn(r'(?m)^embedder = "[^"]*"$',
                                  f'embedder = "{args.embedder}"', text)
                if n != 1:
                    raise SystemExit("the default policy names no embedder to replace")
                title += f" (embedder {args.embedder})"
            policy = tmp / "policy.toml"
            policy.write_text(text, encoding="utf-8")
        log(title)
        r = run(path, ops, start, args.seed, args.floor_every, log, policy)
        load1 = " / ".join(f"{x:.2f}" for x in os.getloadavg())
        text = report(r, title, args.slowest, (load0, load1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
