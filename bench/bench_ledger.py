"""Ledger benchmark: ingest through the service vs a raw APSW floor, open, as_of, history, verify.

    .venv/bin/python bench/bench_ledger.py [--sizes 10000,100000,1000000] [--out bench/results.md]

For each size N it builds a ledger of exactly N events through the real service
(`Ledger.transaction()` groups of `--tx` ops, a stepped `ManualClock`), then, in the same run,
inserts the very same event rows (read back from that ledger) into a fresh file opened by the
product's own `open_ledger()` (same pragmas, same DDL and indexes) with plain APSW `executemany`
in transactions of the same size: the floor. Reads are timed warm (one untimed pass first) with
`time.perf_counter`. Ledgers live in a temp dir that is removed at the end.

Not a timed test: it prints a markdown table (and writes it to `--out` if given).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import apsw  # noqa: E402

from custody_app.domain.errors import LedgerError  # noqa: E402
from custody_app.domain.models import PROV_RANK  # noqa: E402
from custody_app.domain.timeutil import ManualClock, format_time  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402
from custody_app.recall import recluster as _recluster  # noqa: E402
from custody_app.recall.recluster import BATCH as RECLUSTER_BATCH  # noqa: E402
from store import open_ledger  # noqa: E402
from store.rows import EVENT_COLUMNS  # noqa: E402
from store.sqlite.events import FOR_FACTS, HEAD, INSERT, LAST_POLICY  # noqa: E402
from store.sqlite.projection import (  # noqa: E402
    _FCOLS,
    _SCOLS,
    FACT_BY_ID,
    INSERT_FACT,
    INSERT_STATE,
    LATEST_STATE,
    REPLACEMENTS,
    _as_of_sql,
)
from store.sqlite.recall import FTS_INSERT, VEC_COLUMNS, VEC_INSERT  # noqa: E402

# Targets (from the brief), checked at every size and judged at the largest one.
TARGET_RATIO = 3.0  # service ingest within 3x of the raw floor
TARGET_OPEN_MS = 100.0
TARGET_ASOF_MS = 1.0
TARGET_HISTORY_MS = 1.0
TARGET_VERIFY_S = 30.0

PREDICATES = ("plan", "region", "locale", "tier", "owner", "email_pref", "seats", "renewal",
              "contact_channel", "risk", "sentiment", "notes")
WORDS = ("customer", "asked", "about", "upgrade", "billing", "invoice", "migrated", "from",
         "legacy", "tier", "prefers", "email", "over", "phone", "renewal", "due", "next",
         "quarter", "support", "ticket", "escalated", "resolved", "refund", "pending", "trial",
         "extended", "contract", "signed", "seats", "added", "removed", "region", "moved")
PLANS = ("free", "starter", "team", "business", "enterprise")


# ---- workload -------------------------------------------------------------------------------

@dataclass
class Workload:
    """A pre-generated op stream; references to earlier facts are op indexes."""

    ops: list[tuple[Any, ...]]
    times: list[datetime]
    counts: dict[str, int] = field(default_factory=dict)



def timed_inserts(conn: apsw.Connection, rows: list[tuple[Any, ...]], tx: int,
                  extras: tuple[tuple[str, dict[int, list[tuple[Any, ...]]]], ...] = (),
                  ) -> tuple[float, float]:
    """A floor: insert the event `rows` `tx` per transaction, each chunk with the rows of
    `extras` ((statement, event seq -> its rows)) of the events in it; (wall s, CPU s)."""
    t0, c0 = time.perf_counter(), time.process_time()
    for lo in range(0, len(rows), tx):
        chunk = rows[lo:lo + tx]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(INSERT, chunk)
        for sql, by_seq in extras:
            conn.executemany(sql, [x for r in chunk for x in by_seq.get(r[0], ())])
        conn.execute("COMMIT")
    return time.perf_counter() - t0, time.process_time() - c0

def _value(rng: random.Random, subject: str, predicate: str, i: int) -> dict[str, Any]:
    """A JSON value of roughly 100-300 bytes once canonicalised."""
    note = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 30)))
    return {
        "value": rng.choice(PLANS) if predicate in ("plan", "tier") else f"{predicate}-{i % 9973}",
        "confidence": round(rng.random(), 3),
        "seats": rng.randint(1, 500),
        "observed": {"channel": rng.choice(("chat", "email", "phone", "crm")),
                     "ticket": f"T-{rng.randint(10000, 99999)}"},
        "note": note,
        "about": subject,
    }


def make_workload(n_ops: int, seed: int, start: datetime) -> Workload:
    """~86% new asserts, ~5% supersessions, ~3% retractions, ~4% confirms, ~2% affirms.

    Subjects `acct:N` (about N_events/6 of them), each with 2-4 predicates of its own;
    75% of asserts declare `attested`, 5% `verified`, 20% stay `claimed` (quarantined) until
    a reviewer confirms them; 10% are written by an `llm:` actor with its llm block.
    """
    rng = random.Random(seed)
    n_subjects = max(50, n_ops // 6)
    subject_preds: dict[int, tuple[str, ...]] = {}
    current: dict[tuple[str, str], int] = {}  # (subject, predicate) -> op index of newest live fact
    live_keys: list[tuple[str, str]] = []
    key_pos: dict[tuple[str, str], int] = {}
    claimed: list[int] = []  # claimed, unconfirmed, not retracted
    retracted: set[int] = set()
    ops: list[tuple[Any, ...]] = []
    counts = {"assert": 0, "supersede": 0, "retract": 0, "confirm": 0, "affirm": 0}

    def add_key(key: tuple[str, str]) -> None:
        if key not in key_pos:
            key_pos[key] = len(live_keys)
            live_keys.append(key)

    def drop_key(key: tuple[str, str]) -> None:
        pos = key_pos.pop(key)
        last = live_keys.pop()
        if pos < len(live_keys):
            live_keys[pos] = last
            key_pos[last] = pos
        del current[key]

    def new_assert(i: int, subject: str, predicate: str, supersedes: int) -> tuple[Any, ...]:
        r = rng.random()
        provenance = "attested" if r < 0.75 else ("verified" if r < 0.80 else "claimed")
        if rng.random() < 0.10:
            actor = "llm:gpt-4o"
            llm = {"model": "gpt-4o-2024-08-06", "prompt_hash": f"{rng.getrandbits(256):064x}",
                   "tokens": rng.randint(200, 4000)}
        else:
            actor, llm = f"agent:support-bot-{rng.randint(1, 8)}", None
        cause_kind = rng.choice(("message", "message", "tool", "document"))
        cause = {"kind": cause_kind, "ref": f"{cause_kind[:3]}_{rng.getrandbits(48):012x}"}
        space = rng.choice(("org", "org", "team:support", "team:sales", f"user:{subject[5:]}"))
        if provenance == "claimed":
            claimed.append(i)
        return ("A", subject, predicate, _value(rng, subject, predicate, i), space, actor, cause,
                provenance, f"sess-{i // 40}", llm, supersedes)

    for i in range(n_ops):
        r = rng.random()
        if r < 0.05 and live_keys:
            key = live_keys[rng.randrange(len(live_keys))]
            ops.append(new_assert(i, key[0], key[1], current[key]))
            current[key] = i
            counts["supersede"] += 1
        elif r < 0.08 and live_keys:
            key = live_keys[rng.randrange(len(live_keys))]
            target = current[key]
            ops.append(("R", target, "user:ops-lead", "agent misread the ticket"))
            retracted.add(target)
            drop_key(key)
            counts["retract"] += 1
        elif r < 0.12 and claimed:
            target = claimed.pop(rng.randrange(len(claimed)))
            if target in retracted:
                ops.append(("F", _any_live(rng, live_keys, current), "agent:support-bot-1"))
                counts["affirm"] += 1
            else:
                ops.append(("C", target, f"reviewer:rev-{rng.randint(1, 4)}", "checked in CRM"))
                counts["confirm"] += 1
        elif r < 0.14 and live_keys:
            ops.append(("F", _any_live(rng, live_keys, current), "agent:support-bot-1"))
            counts["affirm"] += 1
        else:
            s = rng.randrange(n_subjects)
            if s not in subject_preds:
                subject_preds[s] = tuple(rng.sample(PREDICATES, rng.randint(2, 4)))
            subject, predicate = f"acct:{s}", rng.choice(subject_preds[s])
            ops.append(new_assert(i, subject, predicate, -1))
            current[(subject, predicate)] = i
            add_key((subject, predicate))
            counts["assert"] += 1

    times: list[datetime] = []
    t = start
    for _ in range(n_ops):
        t += timedelta(milliseconds=rng.randint(0, 2000))
        times.append(t)
    return Workload(ops, times, counts)


def _any_live(rng: random.Random, live_keys: list[tuple[str, str]],
              current: dict[tuple[str, str], int]) -> int:
    return current[live_keys[rng.randrange(len(live_keys))]]


def run_op(ledger: Ledger, op: tuple[Any, ...], ids: list[str | None]) -> None:
    kind = op[0]
    if kind == "A":
        _, subject, predicate, value, space, actor, cause, provenance, session, llm, sup = op
        optional: dict[str, Any] = {"space": space, "provenance": provenance, "session": session}
        if llm is not None:
            optional["llm"] = llm
        if sup >= 0:
            optional["supersedes"] = ids[sup]
        ids.append(ledger.assert_fact(subject, predicate, value, actor=actor, cause=cause,
                                      **optional).fact_id)
        return
    fact_id = ids[op[1]]
    ids.append(None)
    if fact_id is None:
        raise LedgerError("bench_missing_ref", "the op this one refers to failed")
    if kind == "R":
        ledger.retract(fact_id, actor=op[2], reason=op[3])
    elif kind == "C":
        ledger.confirm(fact_id, actor=op[2], reason=op[3])
    else:
        ledger.affirm(fact_id, actor=op[2])


# ---- measurements ---------------------------------------------------------------------------

def _pct(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _timed(fn: Callable[[Any], object], args: Sequence[Any]) -> list[float]:
    """Milliseconds per call, after one untimed warm pass over the same arguments."""
    for a in args:
        fn(a)
    out = []
    for a in args:
        t0 = time.perf_counter()
        fn(a)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _file_size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


@dataclass
class Result:
    size: int  # events actually in the ledger (less than `requested` when ingest hit its budget)
    requested: int = 0
    has_recall: bool = False
    ops_measured: int = 0
    ingest_s: float = 0.0
    ingest_rate: float = 0.0
    ingest_cpu_rate: float = 0.0
    failures: int = 0
    prefix_note: str = ""
    floor_s: float = 0.0
    floor_rate: float = 0.0
    floor_cpu_rate: float = 0.0
    floor_proj_rate: float = 0.0
    floor_recall_rate: float = 0.0
    floor_recall_cpu_rate: float = 0.0
    op_ms: list[float] = field(default_factory=list)
    settle_s: float = 0.0
    recluster_ms: list[float] = field(default_factory=list)
    begin_ms: list[float] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    commit_ms: list[float] = field(default_factory=list)
    open_ms: float = 0.0
    open_p95_ms: float = 0.0
    first_query_ms: float = 0.0
    asof_now: tuple[float, float] = (0.0, 0.0)
    asof_past: tuple[float, float] = (0.0, 0.0)
    asof_now_sql: tuple[float, float] = (0.0, 0.0)
    asof_past_sql: tuple[float, float] = (0.0, 0.0)
    asof_rows: float = 0.0
    history: tuple[float, float] = (0.0, 0.0)
    history_events: float = 0.0
    verify_s: float = 0.0
    verify_ok: bool = False
    file_bytes: int = 0
    keystore_bytes: int = 0
    floor_bytes: int = 0
    load: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    plans: dict[str, list[str]] = field(default_factory=dict)


def ingest(path: Path, work: Workload, tx: int, seed: int, log: Callable[[str], None],
           budget_s: float = float("inf")) -> Result:
    """Write the workload through the service; stops early (at a transaction boundary) once
    `budget_s` seconds are spent, so the ledger then holds a prefix of the workload."""
    res = Result(size=len(work.ops) + 1, requested=len(work.ops) + 1)
    clock = ManualClock(work.times[0])
    ledger = Ledger.open(path, clock=clock, id_seed=seed)
    ids: list[str | None] = []
    n = len(work.ops)
    t_start = time.perf_counter()
    c_start = time.process_time()
    next_log = t_start + 30
    clock_now = time.perf_counter
    for lo in range(0, n, tx):
        t_group = clock_now()
        with ledger.transaction():
            for i in range(lo, min(n, lo + tx)):
                clock.set(work.times[i])
                t_op = clock_now()
                if i == lo:  # the group's BEGIN IMMEDIATE: waits while another holds the lock
                    res.begin_ms.append((t_op - t_group) * 1000)
                try:
                    run_op(ledger, work.ops[i], ids)
                except LedgerError as exc:
                    if len(ids) == i:
                        ids.append(None)
                    res.failures += 1
                    if res.failures <= 5:
                        log(f"  op {i} {work.ops[i][0]} failed: {exc}")
                t_end = clock_now()
                res.op_ms.append((t_end - t_op) * 1000)
        # The group's end: its recall rows (deferred by the batching), any re-clustering and
        # COMMIT. Timed from the end of its last op.
        now = time.perf_counter()
        res.commit_ms.append((now - t_end) * 1000)
        if now - t_start > budget_s and lo + tx < n:
            n = lo + tx
            res.prefix_note = f"stopped after {budget_s:.0f} s at {n + 1:,} of {len(work.ops) + 1:,} events"
            log(f"  ingest budget spent: {res.prefix_note}")
            break
        if now > next_log:
            done = min(n, lo + tx)
            log(f"  ingest {done:,}/{n:,} ({done / (now - t_start):,.0f} ops/s)")
            next_log = now + 30
    res.ingest_s = time.perf_counter() - t_start
    # A re-clustering the ingest made due runs in the background; waited for outside the timing.
    t_settle = time.perf_counter()
    ledger.index.settle()
    res.settle_s = time.perf_counter() - t_settle
    res.recluster_ms = list(ledger.index.maintenance.held_ms)
    res.ops_measured = n
    res.ingest_rate = (n + 1) / res.ingest_s  # events written, incl. the policy event
    res.ingest_cpu_rate = (n + 1) / (time.process_time() - c_start)
    res.size = n + 1
    kinds = {"A": "assert", "R": "retract", "C": "confirm", "F": "affirm"}
    res.counts = {"assert": 0, "supersede": 0, "retract": 0, "confirm": 0, "affirm": 0}
    for op in work.ops[:n]:
        res.counts["supersede" if op[0] == "A" and op[-1] >= 0 else kinds[op[0]]] += 1
    ledger.close()
    return res


def floor(src: Path, dst: Path, tx: int, res: Result) -> None:
    """The same event rows, raw, into a fresh file opened by the product's open_ledger()."""
    db = open_ledger(src, readonly=True)
    cols = ", ".join(EVENT_COLUMNS)
    rows = db.conn.execute(f"SELECT {cols} FROM events ORDER BY seq").fetchall()
    facts = db.conn.execute(f"SELECT {_FCOLS} FROM facts ORDER BY assert_seq").fetchall()
    states = db.conn.execute(f"SELECT {_SCOLS} FROM fact_states ORDER BY fact_seq, from_seq"
                             ).fetchall()
    fts_rows = db.conn.execute("SELECT rowid, terms, scope FROM recall_fts").fetchall()
    vec_rows = db.conn.execute(f"SELECT {VEC_COLUMNS} "
                               "FROM recall_vec").fetchall()
    fts_vec_meta = db.recall.embedder() or ("hashed-ngram-v1-256", 256)
    db.close()
    gc.collect()

    out = open_ledger(dst)
    conn = out.conn
    res.floor_s, cpu = timed_inserts(conn, rows, tx)
    res.floor_rate = len(rows) / res.floor_s
    res.floor_cpu_rate = len(rows) / cpu
    out.close()
    res.floor_bytes = _file_size(dst)
    os.remove(dst)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(f"{dst}{suffix}"):
            os.remove(f"{dst}{suffix}")

    # Diagnostic: the same rows plus the final projection rows (facts, fact_states), raw, with
    # every index the schema has. Not the floor the target is measured against.
    out = open_ledger(dst)
    conn = out.conn
    by_seq_fact = {f[0]: [f] for f in facts}
    states_by_seq: dict[int, list[tuple[Any, ...]]] = {}
    for s in states:
        states_by_seq.setdefault(s[1], []).append(s)
    wall, _ = timed_inserts(conn, rows, tx, ((INSERT_FACT, by_seq_fact),
                                              (INSERT_STATE, states_by_seq)))
    res.floor_proj_rate = len(rows) / wall
    out.close()
    for p in (dst, Path(f"{dst}-wal"), Path(f"{dst}-shm")):
        if p.exists():
            p.unlink()

    # The second floor: the same event rows plus, per fact, its FTS5 row and its sqlite-vec row
    # exactly as the service stored them (keyed word hashes, scope tokens, vector, cell).
    out = open_ledger(dst)
    conn = out.conn
    with out.write():
        out.recall.create(fts_vec_meta[0], fts_vec_meta[1])
    by_seq_fts = {r[0]: [r] for r in fts_rows}
    by_seq_vec = {r[0]: [r] for r in vec_rows}
    wall, cpu = timed_inserts(conn, rows, tx, ((FTS_INSERT, by_seq_fts), (VEC_INSERT, by_seq_vec)))
    res.floor_recall_rate = len(rows) / wall
    res.floor_recall_cpu_rate = len(rows) / cpu
    out.close()
    del fts_rows, vec_rows, by_seq_fts, by_seq_vec
    del rows, facts, states, by_seq_fact, states_by_seq
    gc.collect()


def reads(path: Path, res: Result, seed: int, samples: int, opens: int) -> None:
    rng = random.Random(seed + 1)
    # open: the whole Ledger.open (policy load + connection + pragmas + sqlite-vec + schema check)
    open_times = []
    first_query = []
    for _ in range(opens):
        t0 = time.perf_counter()
        led = Ledger.open(path)
        open_times.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        led.as_of(subject="acct:1")
        first_query.append((time.perf_counter() - t0) * 1000)
        led.close()
    res.open_ms, res.open_p95_ms = statistics.median(open_times), _pct(open_times, 0.95)
    res.first_query_ms = statistics.median(first_query)

    led = Ledger.open(path)
    conn = led.db.conn
    n_events = conn.execute("SELECT max(seq) FROM events").fetchone()[0]
    res.has_recall = conn.execute(
        "SELECT count(*) FROM sqlite_schema WHERE name = 'recall_fts'").fetchone()[0] > 0
    mid = n_events // 2
    past = conn.execute("SELECT tx_at FROM events WHERE seq = ?", (mid,)).fetchone()[0]
    subjects = sorted({r[0] for r in conn.execute(
        "SELECT subject FROM facts WHERE assert_seq <= ?", (mid,))})
    chosen = rng.sample(subjects, min(samples, len(subjects)))
    fact_ids = [r[0] for r in conn.execute("SELECT fact_id FROM facts")]
    chosen_facts = rng.sample(fact_ids, min(samples, len(fact_ids)))
    del fact_ids, subjects

    now_times = _timed(lambda s: led.as_of(subject=s), chosen)
    past_times = _timed(lambda s: led.as_of(valid_at=past, tx_at=past, subject=s), chosen)
    res.asof_now = (statistics.median(now_times), _pct(now_times, 0.95))
    res.asof_past = (statistics.median(past_times), _pct(past_times, 0.95))
    res.asof_rows = statistics.mean(len(led.as_of(subject=s).facts) for s in chosen)

    # The store query alone (no command parsing, no read models): where the time goes.
    now = format_time(datetime.now(UTC))
    rank = PROV_RANK["attested"]

    def sql_now(s: str) -> object:
        return led.db.facts.as_of(valid_at=now, tx_at=now, min_rank=rank, include_pending=False,
                                  subject=s)

    def sql_past(s: str) -> object:
        return led.db.facts.as_of(valid_at=past, tx_at=past, min_rank=rank, include_pending=False,
                                  subject=s)

    t = _timed(sql_now, chosen)
    res.asof_now_sql = (statistics.median(t), _pct(t, 0.95))
    t = _timed(sql_past, chosen)
    res.asof_past_sql = (statistics.median(t), _pct(t, 0.95))

    hist = _timed(led.history, chosen_facts)
    res.history = (statistics.median(hist), _pct(hist, 0.95))
    res.history_events = statistics.mean(len(led.history(f).events) for f in chosen_facts)

    subject_now = _as_of_sql(True, False, False, False)
    params = {"v": now, "t": now, "inc": rank, "after": 0, "limit": -1, "subject": chosen[0],
              "predicate": None, "space": None}
    for name, sql, args in (
        ("as_of by subject", subject_now, params),
        ("as_of by subject, claimed", _as_of_sql(True, False, False, True), params),
        ("as_of by subject+predicate", _as_of_sql(True, True, False, False),
         {**params, "predicate": "plan"}),
        ("history: events.for_fact", FOR_FACTS, (chosen_facts[0],)),
        ("history: facts.replacements", REPLACEMENTS, (chosen_facts[0],)),
        ("facts.get", FACT_BY_ID, (chosen_facts[0],)),
        ("facts.latest_state", LATEST_STATE, (1,)),
        ("events.head", HEAD, ()),
        ("events.last_policy_hash", LAST_POLICY, ()),
    ):
        plan = conn.execute(f"EXPLAIN QUERY PLAN {sql}", args).fetchall()
        res.plans[name] = [str(p[3]) for p in plan]
    led.close()

    led = Ledger.open(path)
    t0 = time.perf_counter()
    report = led.verify()
    res.verify_s = time.perf_counter() - t0
    res.verify_ok = report.valid and report.events == n_events
    led.close()
    res.file_bytes = _file_size(path)
    res.keystore_bytes = sum(p.stat().st_size for p in path.parent.glob(f"{path.name}.keys*"))


# ---- report ---------------------------------------------------------------------------------

def _mark(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _size_label(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else (
        f"{n // 1000}k" if n % 1000 == 0 else str(n))


def _column(r: Result) -> str:
    if r.size == r.requested:
        return _size_label(r.size)
    return f"{_size_label(r.requested)} (prefix: {r.size:,} events)"


def render(results: list[Result], args: argparse.Namespace) -> str:
    head = "| metric | " + " | ".join(_column(r) for r in results) + " | target | verdict |"
    sep = "|---|" + "---:|" * len(results) + "---|---|"
    lines = [head, sep]
    last = results[-1]
    big = _column(last)

    def row(name: str, cells: list[str], target: str = "", verdict: str = "") -> None:
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {target} | {verdict} |")

    def ms(pair: tuple[float, float]) -> str:
        return f"{pair[0]:.3f} / {pair[1]:.3f}"

    ratio = [r.floor_rate / r.ingest_rate for r in results]
    cpu_ratio = [r.floor_cpu_rate / r.ingest_cpu_rate for r in results]
    row("ingest through service (events/s, wall)",
        [f"{r.ingest_rate:,.0f}" + (" (prefix)" if r.prefix_note else "") for r in results])
    row("ingest wall time (s)", [f"{r.ingest_s:,.1f}" for r in results])
    row("raw APSW floor, events table only (events/s, wall)", [f"{r.floor_rate:,.0f}" for r in results])
    row("slowdown = floor / service (wall)", [f"{x:.1f}x" for x in ratio], f"<= {TARGET_RATIO:.0f}x",
        f"{_mark(ratio[-1] <= TARGET_RATIO)} at {big}")
    row("(noise check) same, from process CPU time: service / floor (events per CPU-s)",
        [f"{r.ingest_cpu_rate:,.0f} / {r.floor_cpu_rate:,.0f} = {x:.1f}x"
         for r, x in zip(results, cpu_ratio, strict=True)])
    row("(diagnostic) raw floor incl. facts + fact_states rows (events/s, wall)",
        [f"{r.floor_proj_rate:,.0f}" for r in results])
    rec = [r.ingest_rate / r.floor_recall_rate for r in results]
    row("raw floor incl. one FTS5 + one sqlite-vec row per fact (events/s, wall)",
        [f"{r.floor_recall_rate:,.0f}" for r in results])
    row("service / that floor (wall)", [f"{x:.2f}" for x in rec], ">= 0.33",
        f"{_mark(min(rec) >= 1 / 3)} at every size" if min(rec) >= 1 / 3 else
        "NOT met at " + ", ".join(_column(r) for r, x in zip(results, rec, strict=True) if x < 1 / 3))
    row("(noise check) same from CPU time: service / floor (events per CPU-s)",
        [f"{r.ingest_cpu_rate:,.0f} / {r.floor_recall_cpu_rate:,.0f} = {r.ingest_cpu_rate / r.floor_recall_cpu_rate:.2f}"
         for r in results])
    row("single op in a group, p50 / p99 / p99.9 / max (ms)",
        [" / ".join(f"{_pct(r.op_ms, q):.2f}" for q in (0.5, 0.99, 0.999)) + f" / {max(r.op_ms):.1f}"
         for r in results])
    row("group end (deferred recall rows + COMMIT), p50 / p99 / max (ms)",
        [" / ".join(f"{_pct(r.commit_ms, q):.1f}" for q in (0.5, 0.99)) + f" / {max(r.commit_ms):,.1f}"
         for r in results])
    budget = getattr(_recluster, "BUDGET_S", None)
    row(f"background re-clustering: batches of {RECLUSTER_BATCH} moved"
        + (f" or fewer (a {budget * 1000:.0f} ms budget)" if budget else "")
        + ", write lock held (BEGIN to COMMIT) p50 / p99 / max (ms)",
        [(f"{len(r.recluster_ms)} batches: {_pct(r.recluster_ms, 0.5):.1f} / "
          f"{_pct(r.recluster_ms, 0.99):.1f} / {max(r.recluster_ms):,.1f}"
          if r.recluster_ms else "none ran") for r in results])
    row("a group's wait to begin: for the background checkpoint pass its previous commit "
        "started when that left the WAL past CAP pages, then for the write lock (behind a "
        "re-clustering batch); p50 / p99 / max (ms)",
        [" / ".join(f"{_pct(r.begin_ms, q):.1f}" for q in (0.5, 0.99)) + f" / {max(r.begin_ms):,.1f}"
         if r.begin_ms else "-" for r in results])
    row("(info) wait for the background re-clustering after ingest (s)",
        [f"{r.settle_s:.1f}" for r in results])
    row("(info) peak RSS of this process so far (MB; the benchmark holds the workload too)",
        [f"{r.peak_rss_mb:,.0f}" for r in results])
    worst = [max(max(r.op_ms), max(r.commit_ms)) for r in results]
    row("longest single write (op or group end, ms)", [f"{w:,.1f}" for w in worst], "<= 100 ms",
        _mark(max(worst) <= 100) + " at every size" if max(worst) <= 100 else
        "NOT met at " + ", ".join(_column(r) for r, w in zip(results, worst, strict=True) if w > 100))
    row("Ledger.open, median / p95 (ms)", [f"{r.open_ms:.2f} / {r.open_p95_ms:.2f}" for r in results],
        f"< {TARGET_OPEN_MS:.0f} ms", f"{_mark(last.open_ms < TARGET_OPEN_MS)} at {big}")
    row("(diagnostic) first as_of after open, median (ms)",
        [f"{r.first_query_ms:.2f}" for r in results])
    row("as_of(subject) at now, median / p95 (ms)", [ms(r.asof_now) for r in results],
        f"< {TARGET_ASOF_MS:.0f} ms median", f"{_mark(last.asof_now[0] < TARGET_ASOF_MS)} at {big}")
    row("as_of(subject) at past tx_at=valid_at, median / p95 (ms)", [ms(r.asof_past) for r in results],
        f"< {TARGET_ASOF_MS:.0f} ms median", f"{_mark(last.asof_past[0] < TARGET_ASOF_MS)} at {big}")
    row("(diagnostic) store SQL only, as_of now, median / p95 (ms)",
        [ms(r.asof_now_sql) for r in results])
    row("(diagnostic) store SQL only, as_of past, median / p95 (ms)",
        [ms(r.asof_past_sql) for r in results])
    row("(info) facts returned per as_of(subject) now", [f"{r.asof_rows:.1f}" for r in results])
    row("history(fact), median / p95 (ms)", [ms(r.history) for r in results],
        f"< {TARGET_HISTORY_MS:.0f} ms", f"{_mark(last.history[0] < TARGET_HISTORY_MS)} at {big}")
    row("(info) events per history", [f"{r.history_events:.2f}" for r in results])
    row("verify, full chain (s)",
        [f"{r.verify_s:.2f}" + ("" if r.verify_ok else " INVALID") for r in results],
        f"< {TARGET_VERIFY_S:.0f} s", f"{_mark(last.verify_s < TARGET_VERIFY_S and last.verify_ok)}"
        f" at {big}")
    row("ledger file size (MB)", [f"{r.file_bytes / 1e6:,.1f}" for r in results])
    row("(info) key store files (MB)", [f"{r.keystore_bytes / 1e6:,.1f}" for r in results])
    row("(info) floor file size, events only (MB)", [f"{r.floor_bytes / 1e6:,.1f}" for r in results])
    row("(info) ledger bytes per event", [f"{r.file_bytes / r.size:,.0f}" for r in results])
    row("(info) load average (1 min) before each size", [r.load for r in results])

    mix = ", ".join(f"{k} {v:,}" for k, v in last.counts.items())
    recall = any(r.has_recall for r in results)
    notes = [
        "",
        "Notes:",
        *[f"- {_size_label(r.requested)}: ingest {r.prefix_note} (the `--max-ingest-seconds` budget, "
          "which keeps the whole run under ~25 min); every number in that column, reads and verify "
          "included, is for the ledger of that prefix." for r in results if r.prefix_note],
        f"- Workload: N events = 1 policy event + N-1 ops; op mix at {big}: {mix} "
        f"(failures: {', '.join(str(r.failures) for r in results)}). Subjects `acct:N` (about N/6), "
        "2-4 predicates each; 75% attested, 5% verified, 20% claimed (quarantined until confirmed); "
        "10% written by an `llm:` actor; values 100-300 bytes of JSON.",
        f"- Ingest: the Python API (`Ledger.assert_fact/retract/confirm/affirm`), {args.tx} ops per "
        "`Ledger.transaction()` (each op in its own savepoint, as batch.py does with its chunks), "
        "`ManualClock` stepped 0-2 s per op, `id_seed` fixed. Op generation is done before timing; "
        "the harness's own objects are `gc.freeze()`-d so they do not tax the service's GC.",
        f"- Floor: the same event rows read back from the service's ledger, inserted with "
        f"`executemany` into a fresh file made by `store.open_ledger()` (identical pragmas, DDL, "
        f"indexes and triggers), {args.tx} rows per `BEGIN IMMEDIATE`/`COMMIT`; no validation, "
        "hashing, sealing or projection (values are the already-sealed blobs). The diagnostic row adds "
        "the final projection rows (facts, fact_states).",
        "- Service ingest includes everything a write does at this commit: command and event "
        "validation, redaction, RFC 8785 canonical JSON, salted commitment, AES-256-GCM sealing under "
        "the subject's data key (key store lookups, and a new wrapped key for each new subject, in the "
        "same transaction), the hash chain and the projection"
        + (", and the recall indexes (FTS5 + sqlite-vec, kept equal to the believed facts in the same "
           "transaction)." if recall else "."),
        f"- Reads: warm (one untimed pass over the same arguments first), {args.samples} random subjects "
        "(existing by the ledger's midpoint) / random facts; past = tx_at of the middle event, "
        "with valid_at = tx_at. 'store SQL only' calls `FactStore.as_of` directly. "
        f"Open: median of {args.opens} `Ledger.open()` + close on the existing file.",
        "- Verify: `Ledger.verify()` once, after the reads (file in the page cache: warm).",
        "- Machine is shared and noisy (2 cores; other engineers run test suites on it): treat "
        "wall-time differences under ~20-30% as noise. The CPU-time row is the noise check for "
        "the ingest ratio (process CPU time, user+sys, of this single-threaded benchmark).",
    ]
    return "\n".join(lines + notes)


def render_plans(res: Result) -> str:
    out = [f"Query plans at {_column(res)} (EXPLAIN QUERY PLAN):", ""]
    for name, plan in res.plans.items():
        out.append(f"- {name}: " + "; ".join(f"`{p}`" for p in plan))
    return "\n".join(out)


def header() -> str:
    def git(*cmd: str) -> str:
        done = subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "HEAD")
    where = "working tree"
    if not commit and (ROOT / ".bench-commit").exists():  # a `git archive` snapshot
        commit, where = (ROOT / ".bench-commit").read_text().strip(), "clean git-archive snapshot"
    dirty = git("status", "--porcelain", "--", "store", "custody_app") if where == "working tree" else ""
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    changed = ", ".join(ln.split(maxsplit=1)[-1] for ln in dirty.splitlines())
    return (f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}\n"
            f"- commit: {commit or 'unknown'} ({where}"
            + (f"; uncommitted changes in: {changed}" if changed else "") + ")\n"
            f"- machine: {os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release()}, "
            f"load average now {os.getloadavg()[0]:.2f}\n"
            f"- Python {platform.python_version()}, SQLite {apsw.sqlite_lib_version()}, "
            f"apsw {apsw.apsw_version()}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--out", default=None, help="also write the markdown here")
    ap.add_argument("--tx", type=int, default=1000, help="ops per write transaction")
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--opens", type=int, default=20)
    ap.add_argument("--seed", type=int, default=20260901)
    ap.add_argument("--tmp", default=None, help="directory for the temp ledgers")
    ap.add_argument("--keep", action="store_true", help="keep the ledgers (prints their dir)")
    ap.add_argument("--max-ingest-seconds", type=float, default=900.0,
                    help="stop a size's ingest after this long; it is then measured on a prefix")
    args = ap.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.tmp:
        Path(args.tmp).mkdir(parents=True, exist_ok=True)  # the folder it was told to use
    tmp = Path(tempfile.mkdtemp(prefix="custody-bench-", dir=args.tmp))
    results: list[Result] = []
    try:
        for size in sizes:
            log(f"[{_size_label(size)}] generating {size - 1:,} ops")
            work = make_workload(size - 1, args.seed, datetime(2025, 1, 1, tzinfo=UTC))
            gc.collect()
            gc.freeze()
            path = tmp / f"ledger-{size}.db"
            load = f"{os.getloadavg()[0]:.2f}"
            log(f"[{_size_label(size)}] ingest through the service")
            res = ingest(path, work, args.tx, args.seed, log, args.max_ingest_seconds)
            res.load = load
            res.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            log(f"[{_size_label(size)}] ingest {res.ingest_s:,.1f} s, {res.ingest_rate:,.0f} events/s")
            del work
            gc.unfreeze()
            gc.collect()
            log(f"[{_size_label(size)}] raw floor")
            floor(path, tmp / f"floor-{size}.db", args.tx, res)
            log(f"[{_size_label(size)}] floor {res.floor_rate:,.0f} events/s; reads and verify")
            reads(path, res, args.seed, args.samples, args.opens)
            log(f"[{_size_label(size)}] verify {res.verify_s:.1f} s")
            results.append(res)
            if not args.keep:
                for p in tmp.glob(f"ledger-{size}.db*"):
                    p.unlink()
    finally:
        if args.keep:
            log(f"ledgers kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    text = "\n\n".join([header(), render(results, args), render_plans(results[-1])])
    print(text)
    if args.out:
        Path(args.out).write_text("# custody-app ledger benchmark\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
