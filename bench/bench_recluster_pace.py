"""Does the background re-clustering keep pace with writes (issue 35)? A new ledger grown to
`--facts` through the API, in groups of `--tx` asserts a transaction (as `--batch` writes them;
`--tx 1`: single writes), reporting the vector cells against sqrt(n) as it grows and each
re-clustering: the size it began at, the size when it ended, how long it took, its transactions
and the longest of them.

    .venv/bin/python bench/bench_recluster_pace.py --facts 200000 --tmp DIR [--tx 1000] [--out FILE]
        [--embedder hashed-ngram] [--progress FILE]

`--embedder` replaces the shipped default's (minilm-l6, whose vectors a background worker fills
after the writes) in a copy of the default policy; hashed-ngram, the default here, places each
vector in its write, so the index grows as fast as the ledger: the worst case for re-clustering.
`--progress FILE` gets each sample row (with the writes' latency over the stage since the last
row) and each re-clustering's start and end as they happen, so a run stopped early still leaves
its table.

The reference beside the product's figure is sqrt(n), what the cells are sized to (the policy's
`ann_min_facts`, 20,000 by default, is where clustering begins); a re-clustering keeps pace when
it ends before the index has grown REGROW-fold (threefold) from the size it began at, when the
next one is due.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from benchenv import emit, header, machine_note, policy_with_embedder  # noqa: E402

from custody_app.domain.timeutil import ManualClock  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402
from custody_app.recall import recluster as rc  # noqa: E402
from custody_app.recall.cells import REGROW  # noqa: E402

WORDS = ("invoice refund shipping address billing plan upgrade renewal discount warranty "
         "delivery pickup locker courier parcel order return exchange voucher loyalty points "
         "premium basic monthly yearly trial cancel pause resume card bank transfer").split()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--facts", type=int, default=200_000)
    ap.add_argument("--tx", type=int, default=1000)
    ap.add_argument("--every", type=int, default=10_000, help="sample the cells this often")
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--out", default=None)
    ap.add_argument("--embedder", default="hashed-ngram")
    ap.add_argument("--progress", default=None, help="append rows here as the run goes")
    ap.add_argument("--drain-s", type=float, default=0.0,
                    help="after the writes, at most this long while the embedding worker drains")
    ap.add_argument("--drain-every", type=float, default=20.0)
    args = ap.parse_args(argv)
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="custody-pace-", dir=args.tmp))
    load0 = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    written = [0]
    runs: list[dict[str, Any]] = []
    original = rc.recluster
    plock = threading.Lock()
    t0 = time.perf_counter()

    def note(line: str) -> None:
        if args.progress:
            with plock, open(args.progress, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")

    note(header([f"run: --facts {args.facts} --tx {args.tx} --every {args.every} "
                 f"--embedder {args.embedder} --seed {args.seed}",
                 f"load (1/5/15 min) at start {load0}",
                 f"other processes at start: {machine_note()}"]))
    note("\n| facts | vectors | cells | sqrt(vectors) | cells / sqrt | clustered on | at (s) | "
         "load 1 min | assert p50 (ms) | assert p99 (ms) | slowest assert (ms) | "
         "slowest group of asserts (ms) | re-clustering |")
    note("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")

    def observed(*a: Any, **k: Any) -> int:
        run: dict[str, Any] = {"facts0": written[0], "t0": time.perf_counter()}
        note(f"| re-clustering began at {written[0]:,} facts, "
             f"{run['t0'] - t0:.0f} s | | | | | | | | | | | | |")
        held: list[float] = k["held_ms"] if k.get("held_ms") is not None else []
        before = len(held)
        try:
            run["cells"] = original(*a, **k)
        finally:
            run["facts1"] = written[0]
            run["s"] = time.perf_counter() - run["t0"]
            run["txns"] = held[before:]
            runs.append(run)
            note(f"| re-clustering begun at {run['facts0']:,} ended at {run['facts1']:,} facts, "
                 f"{time.perf_counter() - t0:.0f} s: {run.get('cells')} cells, {run['s']:.0f} s, "
                 f"{len(run['txns'])} transactions, longest "
                 f"{max(run['txns'], default=0.0):.1f} ms | | | | | | | | | | | | |")
        return int(run["cells"])
    rc.recluster = observed  # Maintenance's thread calls the module's function
    samples: list[tuple[int, int, int, float]] = []
    try:
        clock = ManualClock(datetime(2027, 1, 1))
        ledger = Ledger.open(tmp / "pace.db", clock=clock,
                             policy=policy_with_embedder(tmp, args.embedder))
        rng = random.Random(args.seed)
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        i = 0
        asserts: list[float] = []
        groups: list[float] = []

        def sample() -> None:
            samples.append((i, ledger.index.cells.count_cells(),
                            ledger.db.recall.clustered_on(), time.perf_counter() - t0))
            ms = sorted(x * 1000 for x in asserts) or [0.0]
            m = ledger.index.maintenance
            vectors = max(ledger.db.recall.vector_count(), 1)
            note(f"| {i:,} | {vectors:,} | {samples[-1][1]} | {vectors ** 0.5:.0f} | "
                 f"{samples[-1][1] / vectors ** 0.5:.2f} | {samples[-1][2]:,} | "
                 f"{samples[-1][3]:.0f} | {os.getloadavg()[0]:.1f} | "
                 f"{ms[len(ms) // 2]:.2f} | {ms[int(len(ms) * 0.99)]:.2f} | {ms[-1]:.1f} | "
                 f"{max(groups, default=0.0) * 1000:.0f} | "
                 f"{'running ' + str(m.progress) if m.running else 'idle'} |")
            asserts.clear()
            groups.clear()
            print(f"  {i:,} facts, {samples[-1][1]} cells, {samples[-1][3]:.0f} s, "
                  f"re-clustering {'running' if m.running else 'idle'} {m.progress}",
                  file=sys.stderr, flush=True)

        def write(n: int) -> None:
            nonlocal i
            g0 = time.perf_counter()
            with ledger.transaction():
                for _ in range(n):
                    clock.set(datetime(2027, 1, 1) + timedelta(milliseconds=i))
                    text = " ".join(rng.sample(WORDS, 4)) + f" ref {rng.randrange(10**6)}"
                    a0 = time.perf_counter()
                    ledger.assert_fact(f"cust:{i // 3}", f"note{i % 3}", text,
                                       actor="agent:bench", cause={"kind": "message",
                                                                   "ref": f"m{i}"},
                                       provenance="attested")
                    asserts.append(time.perf_counter() - a0)
                    i += 1
            groups.append(time.perf_counter() - g0)
            written[0] = i

        while i < args.facts:
            write(min(args.tx, args.facts - i))
            if i % args.every < args.tx or i == args.facts:
                sample()
        # Under a model embedder: the worker drains its backlog while one fact is written every
        # --drain-every seconds (the writer's commit starts a re-clustering its vectors made due).
        drain_end = time.perf_counter() + args.drain_s
        while args.drain_s and time.perf_counter() < drain_end:
            time.sleep(args.drain_every)
            drained = not ledger.index.unembedded()
            write(1)  # also after the last vector: its commit starts what they made due
            sample()
            if drained:
                break
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        ledger.index.settle()
        final = (ledger.index.cells.count_cells(), ledger.db.recall.clustered_on(),
                 ledger.db.recall.vector_count())
        ledger.close()
    finally:
        rc.recluster = original
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [f"## Growing a new ledger to {args.facts:,} facts, {args.tx} a transaction", "",
             header([f"load (1/5/15 min) at start {load0}, at end {load1}",
                     f"other processes at end: {machine_note()}"]), "",
             f"Ingest: {args.facts:,} facts in {wall:.0f} s wall, {cpu:.0f} s CPU of this process "
             f"(every thread). At the end, once the last re-clustering settled: {final[0]} cells "
             f"for {final[2]:,} vectors (sqrt(n) = {final[2] ** 0.5:.0f}, clustered on "
             f"{final[1]:,}).", "",
             f"Each re-clustering (begun when the index had grown {REGROW}-fold since the last):", "",
             "| began at (facts) | ended at (facts) | ended before the next was due | took (s) | "
             "cells | transactions | longest transaction (ms) |",
             "|---:|---:|---|---:|---:|---:|---:|"]
    for r in runs:
        if not r.get("cells"):
            continue  # not due after all (another connection's), or stopped
        on_time = ("yes" if r["facts1"] < REGROW * max(r["facts0"], 1) else "no") + (
            " (ended after the last write)" if r["facts1"] == args.facts else "")
        lines.append(f"| {r['facts0']:,} | {r['facts1']:,} | {on_time} | "
                     f"{r['s']:.1f} | {r['cells']} | {len(r['txns'])} | "
                     f"{max(r['txns'], default=0.0):.1f} |")
    lines += ["", "The cells as the ledger grew:", "",
              "| facts | cells | sqrt(facts) | cells / sqrt | clustered on | at (s) |",
              "|---:|---:|---:|---:|---:|---:|"]
    for n, cells, clustered, at in samples:
        lines.append(f"| {n:,} | {cells} | {n ** 0.5:.0f} | {cells / n ** 0.5:.2f} | "
                     f"{clustered:,} | {at:.0f} |")
    text = "\n".join(lines) + "\n"
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
