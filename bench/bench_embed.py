"""Embedder throughput: texts/s one call per text (the old write path) against one call per batch
(what a transaction group's flush and `reindex` now do), for each installed embedder.

    .venv/bin/python bench/bench_embed.py [--single 128] [--batch 64] [--embedders a,b] [--out FILE]

Texts are synthetic support notes (6-30 words), each unseen by the embedder when timed (its word
caches start equally cold for both ways): the first `--single` texts one call each, the next
`--single` in batches. Each embedder is warmed with two calls on other texts first.
Prints markdown (and writes it to `--out`).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.benchenv import header, machine_note  # noqa: E402
from custody_app.domain.errors import LedgerError  # noqa: E402
from custody_app.recall.embedders import EMBEDDERS, make_embedder  # noqa: E402

WORDS = ("customer asked about upgrade billing invoice migrated from legacy tier prefers email "
         "over phone renewal due next quarter support ticket escalated resolved refund").split()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--single", type=int, default=128, help="texts timed each way")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--embedders", default=",".join(EMBEDDERS))
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rng = random.Random(5)
    texts = [f"acct:{i} note " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 30)))
             for i in range(2 * args.single + 3)]
    rows = ["| embedder | model load (s) | load (1 min) | one call per text (texts/s) | "
            f"batches of {args.batch} (texts/s) | speed-up |", "|---|---:|---:|---:|---:|---:|"]
    for name in [e for e in args.embedders.split(",") if e.strip()]:
        t0 = time.perf_counter()
        try:
            emb = make_embedder(name)
        except LedgerError:
            rows.append(f"| {name} | | | not installed | | |")
            continue
        loaded = time.perf_counter() - t0
        emb.embed(texts[-3:-1])
        emb.embed(texts[-1:])
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        for t in texts[:args.single]:
            emb.embed([t])
        single = args.single / (time.perf_counter() - t0)
        second = texts[args.single:2 * args.single]
        t0 = time.perf_counter()
        for i in range(0, len(second), args.batch):
            emb.embed(second[i:i + args.batch])
        batched = len(second) / (time.perf_counter() - t0)
        rows.append(f"| {emb.name} | {loaded:.2f} | {load:.2f} | {single:,.1f} | {batched:,.1f} | "
                    f"{batched / single:.1f}x |")
    text = header([f"other load at end: {machine_note()}"]) + "\n\n" + "\n".join(rows)
    print(text)
    if args.out:
        Path(args.out).write_text("# custody-app embedder throughput\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
