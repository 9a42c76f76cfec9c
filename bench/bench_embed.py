"""Embedder throughput: texts/s one call per text (the old write path) against one call per batch
(what a transaction group's flush and `reindex` now do), for each installed embedder.

    .venv/bin/python bench/bench_embed.py [--texts 256] [--batch 64] [--out FILE]

Texts are synthetic support notes (6-30 words). Each embedder is warmed with two calls first.
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
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--single", type=int, default=32, help="texts embedded one call each")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rng = random.Random(5)
    texts = [f"acct:{i} note " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 30)))
             for i in range(args.texts)]
    rows = ["| embedder | load (1 min) | one call per text (texts/s) | batches of "
            f"{args.batch} (texts/s) | speed-up |", "|---|---:|---:|---:|---:|"]
    for name in EMBEDDERS:
        try:
            emb = make_embedder(name)
        except LedgerError:
            rows.append(f"| {name} | | not installed | | |")
            continue
        emb.embed(texts[:2])
        emb.embed(texts[2:3])
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        for t in texts[:args.single]:
            emb.embed([t])
        single = args.single / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for i in range(0, len(texts), args.batch):
            emb.embed(texts[i:i + args.batch])
        batched = len(texts) / (time.perf_counter() - t0)
        rows.append(f"| {emb.name} | {load:.2f} | {single:,.1f} | {batched:,.1f} | "
                    f"{batched / single:.1f}x |")
    text = header([f"other load at end: {machine_note()}"]) + "\n\n" + "\n".join(rows)
    print(text)
    if args.out:
        Path(args.out).write_text("# custody-app embedder throughput\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
