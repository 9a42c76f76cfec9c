"""Semantic recall by default, off the write path: ingest under the shipped default (minilm-l6,
the background worker embedding beside the writes) against the same ingest with hashed-ngram
embedded inside each write (the floor of the same run), and the worker's backlog drain rate.
    .venv/bin/python bench/bench_embed_worker.py [--sizes 10000,100000] [--drain-window 60]
                                                 [--out FILE]
Each size: a fresh ledger per embedder, N asserts through the API in groups of 100 (one
`ledger.transaction()` each, as `--batch` groups them), distinct subjects, short sentences.
Figures: wall seconds, the writer thread's CPU seconds (time.thread_time), the process's CPU
seconds (main thread plus the worker and every other thread), facts a wall second, the
slowest group, and for minilm-l6 the facts still without a vector when the last write
returned. Drain: after the writes, the worker alone, timed until the backlog is empty or
`--drain-window` seconds have passed (then the rate over the window). No thread variable is
set here: the product's own choices run (the worker pins one BLAS thread with threadpoolctl).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.benchenv import header, machine_note, policy_with_embedder  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402

CAUSE = {"kind": "import", "ref": "bench-embed-worker"}
WORDS = ("beagle invoice piano peanuts standup tyres Lisbon Acme refund firmware renewal "
         "migraine hiking budget laptop garden chess violin").split()
GROUP = 100


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def ingest(tmp: Path, embedder: str, n: int, drain_window: float) -> dict[str, float]:
    with Ledger.open(tmp / f"{embedder}-{n}.db", policy=policy_with_embedder(tmp, embedder)) as ledger:
        wall0, cpu0, thread0 = time.perf_counter(), _cpu(), time.thread_time()
        slowest = 0.0
        for start in range(0, n, GROUP):
            g0 = time.perf_counter()
            with ledger.transaction():
                for i in range(start, min(n, start + GROUP)):
                    w = [WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7)]
                    ledger.assert_fact(f"user:{i}", "note", f"talked about {w[0]}, {w[1]} and "
                                       f"{w[2]} on day {i % 365}", actor="agent:support",
                                       cause=CAUSE, provenance="attested")
            slowest = max(slowest, time.perf_counter() - g0)
        wall, cpu, thread = (time.perf_counter() - wall0, _cpu() - cpu0,
                             time.thread_time() - thread0)
        out = {"wall": wall, "cpu": cpu, "writer_cpu": thread, "rate": n / wall,
               "slowest_group_ms": slowest * 1000, "backlog": float(ledger.index.unembedded())}
        if ledger.index.embedding is not None:
            before, d0, c0 = out["backlog"], time.perf_counter(), _cpu()
            done = ledger.index.settle_embedding(drain_window)
            left = ledger.index.unembedded()
            spent = time.perf_counter() - d0
            held = ledger.index.embedding.held_ms
            out.update(drained=float(done), drain_wall=spent, drain_cpu=_cpu() - c0,
                       drain_rate=(before - left) / spent if spent else 0.0, left=float(left),
                       held_max=max(held, default=0.0),
                       held_p50=sorted(held)[len(held) // 2] if held else 0.0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--drain-window", type=float, default=60.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    notes = [f"load at start: {Path('/proc/loadavg').read_text().split()[:3]}", machine_note()]
    rows = ["| facts | embedder | wall s | facts/s (wall) | writer CPU s | process CPU s | "
            "slowest group ms | not yet embedded at the last write | drain |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    tmp = Path(tempfile.mkdtemp(prefix="bench-embed-worker-"))
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            for embedder in ("hashed-ngram", "minilm-l6"):
                r = ingest(tmp, embedder, n, args.drain_window)
                drain = "-"
                if "drain_rate" in r:
                    drain = (f"{r['drain_rate']:.0f} facts/s over {r['drain_wall']:.0f} s "
                             f"({r['drain_cpu']:.0f} CPU s), "
                             + ("backlog empty" if r["drained"] else f"{r['left']:.0f} left")
                             + f"; its write lock held {r['held_p50']:.1f} ms median, "
                             f"{r['held_max']:.1f} ms at most")
                rows.append(f"| {n:,} | {embedder} | {r['wall']:.1f} | {r['rate']:,.0f} | "
                            f"{r['writer_cpu']:.1f} | {r['cpu']:.1f} | "
                            f"{r['slowest_group_ms']:.0f} | {r['backlog']:,.0f} | {drain} |")
                print(rows[-1], flush=True)
                for f in tmp.iterdir():
                    if f.name.startswith(f"{embedder}-{n}.db"):
                        f.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    notes.append(f"load at end: {Path('/proc/loadavg').read_text().split()[:3]}")
    text = header(notes) + "\n\n" + "\n".join(rows) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
