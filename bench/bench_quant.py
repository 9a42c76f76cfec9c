"""In-process vector search options, side by side: exact float32 (the recall matrix up to 250k
vectors), per-row int8 codes with a SIMD dot and exact re-scoring (the matrix above 250k), binary
codes with re-scoring, and usearch (exact brute force over int8; its HNSW graph up to
`--hnsw-max`).

    .venv/bin/python bench/bench_quant.py [--sizes 100000] [--queries 50]
                                                                  [--out FILE]

Vectors are the default embedder's (`hashed-ngram-v1-256`) of the synthetic support facts of
`bench_recall.py` (same generator and seed), queries its synthetic queries. For each option:
median ms per query (k=10, interleaved query by query), memory of what it keeps per vector,
and top-10 overlap with exact float32 search. Not a test: prints markdown (and `--out`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_recall import synth_facts, synth_queries  # noqa: E402
from bench.benchenv import header, machine_note  # noqa: E402
from custody_app.recall import codes as codes_mod  # noqa: E402
from custody_app.recall.embedders import HashedNgramEmbedder  # noqa: E402
from custody_app.recall.text import fact_text  # noqa: E402

Search = Callable[[np.ndarray], np.ndarray]


def top(scores: np.ndarray, k: int) -> np.ndarray:
    part = np.argpartition(-scores, k - 1)[:k]
    return part[np.argsort(-scores[part])]


def options(a: np.ndarray, n: int, hnsw_max: int) -> dict[str, tuple[Search, float]]:
    """name -> (search returning top-10 row indexes, bytes kept per vector)."""
    scale = float(np.abs(a).max()) or 1.0
    bits = np.packbits(a > 0, axis=1).view(np.uint64)
    d = a.shape[1]
    codes, factor = codes_mod.encode(a)  # what the recall matrix keeps above 250k vectors

    def exact(q: np.ndarray) -> np.ndarray:
        return top(a @ q, 10)

    def int8_rows(rescore: int, kernel: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Search:
        def run(q: np.ndarray) -> np.ndarray:
            qc = codes_mod.encode(q[None, :])[0][0]
            approx = kernel(codes, qc) * factor
            cand = np.argpartition(-approx, rescore - 1)[:rescore]
            return cand[top(a[cand] @ q, 10)]
        return run

    def numpy_dots(c: np.ndarray, qc: np.ndarray) -> np.ndarray:
        out = np.empty(len(c), dtype=np.float64)
        qf = qc.astype(np.float32)
        for at in range(0, len(c), codes_mod.CHUNK):
            out[at:at + codes_mod.CHUNK] = c[at:at + codes_mod.CHUNK].astype(np.float32) @ qf
        return out

    def binary(pool: int, rescore: np.ndarray) -> Search:
        def run(q: np.ndarray) -> np.ndarray:
            qb = np.packbits(q > 0).view(np.uint64)
            dist = np.bitwise_count(bits ^ qb).sum(axis=1, dtype=np.uint16)
            cand = np.argpartition(dist, pool - 1)[:pool]
            exact_part = rescore[cand].astype(np.float32) @ q
            return cand[top(exact_part, 10)]
        return run

    out: dict[str, tuple[Search, float]] = {
        "float32 exact (the recall matrix up to 250k vectors; the floor)": (exact, 4 * d),
        "int8 codes per row, numkong SIMD dot, re-score best 200 from float32 (chosen above "
        "250k; the float32 rows are read from sqlite-vec)": (int8_rows(200, codes_mod.dots),
                                                             d + 4),
        "int8 codes per row, numkong SIMD dot, no re-scoring": (
            lambda q: top(codes_mod.dots(codes, codes_mod.encode(q[None, :])[0][0]) * factor,
                          10), d + 4),
        "int8 codes per row, numpy (chunks to float32), re-score best 200": (
            int8_rows(200, numpy_dots), d + 4),
        "binary codes, re-score best 1,000 from float32": (binary(1000, a), d / 8 + 4 * d),
        "binary codes, re-score best 4,000 from float32": (binary(4000, a), d / 8 + 4 * d),
    }
    try:
        from usearch.index import Index, MetricKind
        from usearch.index import search as usearch_exact
    except ImportError:
        return out

    def us_exact(q: np.ndarray) -> np.ndarray:
        qc = np.clip(np.rint(q / scale * 127), -127, 127).astype(np.int8)
        found = usearch_exact(us8, qc, 200, MetricKind.IP, exact=True, threads=1)
        cand = np.asarray(found.keys, dtype=np.int64)
        return cand[top(a[cand] @ q, 10)]

    us8 = np.clip(np.rint(a / scale * 127), -127, 127).astype(np.int8)
    out["usearch exact brute force over int8 (one scale), re-score best 200"] = (us_exact, d)
    if n <= hnsw_max:
        index = Index(ndim=d, metric="ip", dtype="i8")
        t0 = time.perf_counter()
        index.add(np.arange(n), a, threads=1)
        BUILD[n] = time.perf_counter() - t0

        def hnsw(q: np.ndarray) -> np.ndarray:
            cand = np.asarray(index.search(q, 200, threads=1).keys, dtype=np.int64)
            return cand[top(a[cand] @ q, 10)]
        out[f"usearch HNSW over int8 built in memory at open, re-score best 200 (build "
            f"{BUILD[n]:,.0f} s single-threaded)"] = (hnsw, d + 64)
    return out


BUILD: dict[int, float] = {}


def exact_of(opts: dict[str, tuple[Search, float]]) -> Search:
    return next(iter(opts.values()))[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--out", default=None)
    ap.add_argument("--hnsw-max", type=int, default=100_000,
                    help="build usearch's HNSW graph only up to this many vectors (its build "
                         "is single-threaded and slow)")
    args = ap.parse_args(argv)
    notes = [f"other load at start: {machine_note()}"]
    emb = HashedNgramEmbedder()
    parts = []
    for n in [int(s) for s in args.sizes.split(",") if s.strip()]:
        facts = synth_facts(n, 4242)
        texts = [fact_text(s, p, v) for s, p, v, _ in facts]
        a = np.concatenate([emb.embed(texts[i:i + 2000]) for i in range(0, n, 2000)])
        queries = [emb.embed_query(q) for q in synth_queries(facts, args.queries, n)]
        t0 = time.perf_counter()
        opts = options(a, n, args.hnsw_max)
        log_s = time.perf_counter() - t0
        print(f"  {n:,}: options built in {log_s:,.0f} s", file=sys.stderr, flush=True)
        times: dict[str, list[float]] = {name: [] for name in opts}
        overlap: dict[str, list[float]] = {name: [] for name in opts}
        for i, q in enumerate(queries):
            truth = set(exact_of(opts)(q).tolist())
            names = list(opts)
            for name in names[i % len(names):] + names[:i % len(names)]:  # order rotated
                run = opts[name][0]
                t0 = time.perf_counter()
                got = run(q)
                times[name].append((time.perf_counter() - t0) * 1000)
                overlap[name].append(len(truth & set(got.tolist())) / 10)
        floor = statistics.median(times[next(iter(opts))])
        rows = [f"### {n:,} vectors of 256 dimensions, {len(queries)} queries", "",
                "| option | median ms | vs float32 | bytes per vector | top-10 overlap |",
                "| --- | --- | --- | --- | --- |"]
        for name, (_, per) in opts.items():
            med = statistics.median(times[name])
            rows.append(f"| {name} | {med:,.2f} | {med / floor:.2f}x | {per:,.0f} | "
                        f"{statistics.fmean(overlap[name]):.2f} |")
        parts.append("\n".join(rows))
        print(parts[-1], file=sys.stderr, flush=True)
    notes.append(f"other load at end: {machine_note()}")
    out = header(notes, f", numpy {np.__version__}") + "\n\n" + "\n\n".join(parts)
    print(out)
    if args.out:
        Path(args.out).write_text(out + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
