"""The in-process vector copy's top 10 against the exact search, by the mode it keeps (int8 codes,
or sign bits with a shortlist), on one ledger.

    .venv/bin/python bench/bench_bits_quality.py --ledger L [--queries 100] [--shortlists 1000,4000]
                                                 [--out FILE]

The ledger is opened read-only. The exact answer: numpy over every vector of the ledger as
float32 (the floor), the 10 nearest believed ("live") rows. Each mode: a `VectorMatrix` loaded
under a budget that forces it (int8: the codes' bytes; bits: the sign bits' bytes), asked the
same queries through its own search (the one recall uses), re-scoring from sqlite-vec's float32
rows. Queries: three words drawn from bench_memory's vocabulary (as bench_cold_start asks),
embedded by the ledger's embedder. Reported per mode: the queries whose top 10 equals the
exact top 10 (as a set, and in order), recall@10, the hits whose exact cosine is within 0.01 of
the exact 10th (near-duplicates differ by noise only), the median search time beside the floor's,
and the copy's bytes.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_memory import WORDS  # noqa: E402
from bench.benchenv import emit, header, machine_note  # noqa: E402
from custody_app import Ledger  # noqa: E402
from custody_app.recall import matrix as matrix_mod  # noqa: E402
from custody_app.recall.cells import unit  # noqa: E402
from custody_app.recall.matrix import VectorMatrix  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ledger", required=True)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--shortlists", default="1000,4000")
    ap.add_argument("--int8", action="store_true", help="also the int8 mode (dims bytes a row)")
    ap.add_argument("--rescores", default=str(matrix_mod.BITS_RESCORE),
                    help="comma list: rows re-scored exactly (matrix.RESCORE, and "
                         "BITS_RESCORE for sign bits), each a mode")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    start_note, load0 = machine_note(), __import__("os").getloadavg()[0]
    led = Ledger.open(args.ledger, readonly=True)
    dims = led.index.embedder.dimensions
    with led.db.read():
        blocks = [(s.copy(), b.copy(), st.copy()) for s, b, st, *_ in
                  led.db.recall.iter_vector_blocks(dims)]
    seqs = np.concatenate([s for s, _, _ in blocks])
    live = np.concatenate([st for _, _, st in blocks]) == b"live"
    floats = np.concatenate([b for _, b, _ in blocks])
    del blocks
    rng = random.Random(3)
    texts = [" ".join(rng.sample(WORDS, 3)) for _ in range(args.queries)]
    queries = [unit(led.index.embedder.embed_query(t)) for t in texts]
    exact, floor_s, tenth = [], [], []
    for q in queries:
        t = time.perf_counter()
        scores = floats @ q
        scores[~live] = -np.inf
        top = np.argpartition(-scores, 10)[:10]
        top = top[np.lexsort((-seqs[top], -scores[top]))]
        floor_s.append(time.perf_counter() - t)
        exact.append([int(s) for s in seqs[top]])
        tenth.append(float(scores[top[-1]]))
    order = np.argsort(seqs)
    n = len(seqs)
    modes: list[tuple[str, int, int, int]] = []
    for rescore in [int(r) for r in args.rescores.split(",") if r.strip()]:
        if args.int8:
            modes.append((f"int8 codes, {rescore} re-scored", n * dims, matrix_mod.SHORTLIST,
                          rescore))
        for short in [int(s) for s in args.shortlists.split(",") if s.strip()]:
            modes.append((f"sign bits, shortlist {short:,}, {rescore} re-scored",
                          n * -(-dims // 8), short, rescore))
    rows = []
    for name, budget, short, rescore in modes:
        matrix_mod.SHORTLIST, matrix_mod.RESCORE = short, rescore
        matrix_mod.BITS_RESCORE = rescore
        copy = VectorMatrix(led.db, dims, max_bytes=budget, sign_bits=True)
        with led.db.read():
            t = time.perf_counter()
            assert copy.load()
            load_s = time.perf_counter() - t
        same_set = same_order = found = near = 0
        times = []
        for q, want, cut in zip(queries, exact, tenth, strict=True):
            t = time.perf_counter()
            got = copy.search(q, 10, ("live",), None, None)
            times.append(time.perf_counter() - t)
            assert got is not None
            ranked = [s for s, _ in got]
            found += len(set(ranked) & set(want))
            # Its cosine within 0.01 of the exact 10th's (near-duplicates tie in all but noise)
            at = order[np.searchsorted(seqs[order], ranked)]
            near += int(np.count_nonzero(floats[at] @ q >= cut - 0.01))
            same_set += set(ranked) == set(want)
            same_order += ranked == want
        rows.append(f"| {name} | {same_set} / {len(queries)} | {same_order} / {len(queries)} | "
                    f"{found / (10 * len(queries)):.3f} | {near / (10 * len(queries)):.3f} | "
                    f"{statistics.median(times) * 1000:,.1f} | "
                    f"{statistics.median(floor_s) * 1000:,.1f} | {copy.nbytes / 2**20:,.0f} | "
                    f"{load_s:,.1f} |")
        copy.drop()
    led.close()
    text = "\n".join([
        header([f"other load at start: {start_note}", f"other load at end: {machine_note()}",
                f"load (1 min) at start / end: {load0:.2f} / "
                f"{__import__('os').getloadavg()[0]:.2f}"]), "",
        f"{Path(args.ledger).name}: {n:,} vectors of {dims} dimensions "
        f"({led.index.embedder.name}), {args.queries} queries, k=10", "",
        "| copy keeps | same top 10 as exact (set) | same top 10 in order | recall@10 | "
        "hits within 0.01 cosine of the exact 10th | search median (ms) | floor: numpy exact "
        "over float32, median (ms) | codes (MB) | load (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|", *rows])
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
