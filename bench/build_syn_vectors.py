"""A ledger with N vectors of the shipped default embedder (minilm-l6, 384 dims), synthetic in
part, for memory and cold-start measurements at 1M (embedding 1M real facts takes hours here).

    .venv/bin/python bench/build_syn_vectors.py --source LEDGER --out NEW --rows 1000000
                                                [--real 4000]

The source ledger (with its `.keys` and `.keys.master`) is copied to NEW (the source is never
opened for write) and opened under the shipped default policy with no embedding worker: its
recall indexes are rebuilt for minilm-l6 (lexical rows; no vector yet). Then `--real` of its
believed facts are embedded for real, and the vector table is replaced by `--rows` rows: every
believed fact gets one (a real vector of one of the embedded facts, cycled, plus N(0, 0.02)
noise per component, renormalised) and the rest are rows with no fact behind them (seqs past the
last event; recall's hydrate drops them), made the same way with the filter codes of the fact
they were copied from. The rows are clustered as a rebuild clusters them (about sqrt(N) k-means
cells, trained on a sample) and written in one transaction. What is synthetic: the vectors
(noise around `--real` real ones) and the rows past the believed facts; the lexical index and
the facts are the source's (plus one fact, written to record the default policy).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from custody_app import Ledger  # noqa: E402
from custody_app.recall import text  # noqa: E402
from custody_app.recall.cells import SAMPLE, kmeans, nearest_cells  # noqa: E402
from custody_app.recall.index import INDEXED  # noqa: E402
from store.rows import vec_row  # noqa: E402

DEFAULT_POLICY = ROOT / "policies" / "default.toml"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--real", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=20261206)
    args = ap.parse_args(argv)
    out = Path(args.out)
    for suffix in ("", ".keys", ".keys.master"):
        shutil.copyfile(f"{args.source}{suffix}", f"{out}{suffix}")
    t = time.perf_counter()
    led = Ledger.open(out, policy=DEFAULT_POLICY, embed_backlog=False)
    print(f"reindexed for {led.index.embedder.name} in {time.perf_counter() - t:.0f} s",
          flush=True)
    db, index = led.db, led.index
    with db.read():
        facts = sorted((f for status in INDEXED for f in db.facts.with_status(status)),
                       key=lambda f: f.assert_seq)
        last = facts[-1].assert_seq
        bodies = [(f, index.stored_text(f)) for f in facts[:args.real * 2]]
    todo = [(f, text.fact_text(f.subject, f.predicate, json.loads(v)))
            for f, v in bodies if v is not None][:args.real]
    t = time.perf_counter()
    real = index.embedder.embed([body for _, body in todo])
    print(f"embedded {len(real)} real facts in {time.perf_counter() - t:.0f} s", flush=True)
    rng = np.random.default_rng(args.seed)
    dims = index.embedder.dimensions
    vectors = np.empty((args.rows, dims), dtype=np.float32)
    for at in range(0, args.rows, 65536):
        n = min(65536, args.rows - at)
        block = real[np.arange(at, at + n) % len(real)] + rng.normal(0, 0.02, (n, dims))
        vectors[at:at + n] = block / np.linalg.norm(block, axis=1, keepdims=True)
    cells = max(16, round(math.sqrt(args.rows)))
    sample = vectors[rng.choice(args.rows, min(SAMPLE, args.rows), replace=False)]
    t = time.perf_counter()
    centroids = kmeans(sample, cells)
    where = nearest_cells(vectors, centroids)
    print(f"{cells} cells in {time.perf_counter() - t:.0f} s", flush=True)
    refs = {f.subject: index.subject_ref(f.subject) for f in facts}
    rows = []
    # Written cell by cell: sqlite-vec keeps each cell's rows in chunks of their own, and rows in
    # seq order touch a different cell's chunk each time (the transaction's dirty pages spill
    # to the WAL again and again: 1M rows took over an hour here).
    for i in np.argsort(where, kind="stable").tolist():
        if i < len(facts):
            f, seq = facts[i], facts[i].assert_seq
        else:
            f, seq = facts[i % len(facts)], last + 1 + i
        rows.append(vec_row(seq, int(where[i]), vectors[i].tobytes(), INDEXED[f.status],
                            f.space, refs[f.subject]))
    del vectors
    t = time.perf_counter()
    db.conn.execute("PRAGMA cache_size = -3000000")  # ~3 GB: the whole table, no spill
    with db.write():
        db.recall.repartition(dims, [c.tobytes() for c in centroids], rows)
    print(f"wrote {len(rows):,} rows in {time.perf_counter() - t:.0f} s", flush=True)
    # One write under the named policy records it (a `policy` event): an open that names no
    # policy (`serve`, the terminal app) follows the recorded one, and would otherwise rebuild
    # the index for the source's embedder.
    led.assert_fact("system:bench", "built_by", "bench/build_syn_vectors.py",
                    actor="system:bench", cause={"kind": "import", "ref": "syn-vectors"},
                    provenance="attested")
    led.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
