"""In-process vector search options, side by side: exact float32 (what the recall matrix does),
int8, float16, and binary codes with exact re-scoring of the best candidates.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_quant.py [--sizes 100000] [--queries 50]
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
from custody_app.recall.embedders import HashedNgramEmbedder  # noqa: E402
from custody_app.recall.text import fact_text  # noqa: E402

Search = Callable[[np.ndarray], np.ndarray]


def top(scores: np.ndarray, k: int) -> np.ndarray:
    part = np.argpartition(-scores, k - 1)[:k]
    return part[np.argsort(-scores[part])]


def options(a: np.ndarray) -> dict[str, tuple[Search, float]]:
    """name -> (search returning top-10 row indexes, bytes kept per vector)."""
    scale = float(np.abs(a).max()) or 1.0
    a8 = np.round(a / scale * 127).astype(np.int8)
    a16 = a.astype(np.float16)
    bits = np.packbits(a > 0, axis=1).view(np.uint64)
    d = a.shape[1]

    def exact(q: np.ndarray) -> np.ndarray:
        return top(a @ q, 10)

    def int8(q: np.ndarray) -> np.ndarray:
        # int32 query: an int8 x int8 (or int16) product accumulates in that type and overflows.
        return top((a8 @ np.round(q / scale * 127).astype(np.int32)).astype(np.float32), 10)

    def f16(q: np.ndarray) -> np.ndarray:
        return top((a16 @ q.astype(np.float16)).astype(np.float32), 10)

    def binary(pool: int, rescore: np.ndarray) -> Search:
        def run(q: np.ndarray) -> np.ndarray:
            qb = np.packbits(q > 0).view(np.uint64)
            dist = np.bitwise_count(bits ^ qb).sum(axis=1, dtype=np.uint16)
            cand = np.argpartition(dist, pool - 1)[:pool]
            exact_part = rescore[cand].astype(np.float32) @ q
            return cand[top(exact_part, 10)]
        return run

    return {
        "float32 exact (the recall matrix)": (exact, 4 * d),
        "int8 (numpy integer matmul, int32 accumulation)": (int8, d),
        "float16": (f16, 2 * d),
        "binary codes, re-score best 200 from float32": (binary(200, a), d / 8 + 4 * d),
        "binary codes, re-score best 1,000 from float32": (binary(1000, a), d / 8 + 4 * d),
        "binary codes, re-score best 1,000 from int8": (binary(1000, a8.astype(np.float32)
                                                               / 127 * scale), d / 8 + d),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    notes = [f"other load at start: {machine_note()}"]
    emb = HashedNgramEmbedder()
    parts = []
    for n in [int(s) for s in args.sizes.split(",") if s.strip()]:
        facts = synth_facts(n, 4242)
        texts = [fact_text(s, p, v) for s, p, v, _ in facts]
        a = np.concatenate([emb.embed(texts[i:i + 2000]) for i in range(0, n, 2000)])
        queries = [emb.embed_query(q) for q in synth_queries(facts, args.queries, n)]
        opts = options(a)
        times: dict[str, list[float]] = {name: [] for name in opts}
        overlap: dict[str, list[float]] = {name: [] for name in opts}
        for q in queries:
            truth = set(opts["float32 exact (the recall matrix)"][0](q).tolist())
            for name, (run, _) in opts.items():
                t0 = time.perf_counter()
                got = run(q)
                times[name].append((time.perf_counter() - t0) * 1000)
                overlap[name].append(len(truth & set(got.tolist())) / 10)
        floor = statistics.median(times["float32 exact (the recall matrix)"])
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
