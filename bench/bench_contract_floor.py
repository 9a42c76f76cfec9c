"""Ingest against the contract's own SQL (issue 35): every statement the product issues for a
corpus, captured with APSW's exec and row tracers, replayed with plain APSW and the captured
bindings into a copy of the ledger as it was before, with no Python domain logic.

    .venv/bin/python bench/bench_contract_floor.py --ops 10000 --tmp DIR [--out FILE]
    .venv/bin/python bench/bench_contract_floor.py --ops 10000 --tmp DIR \
        --base /work/bench-cache/erasure/erasure-1000000-s20260901-r100000.db \
        [--policy shipped|FILE]

The corpus is bench_ledger's workload (asserts with a subject and predicate, ~5% supersessions,
~3% retractions, confirms and affirms) as JSON Lines. For one size it runs, each on its own copy
of the same starting ledger (a fresh one, or a copy of `--base`):
1. the trace: `run_batch` in this process as `--batch FILE` runs it, every statement of the
   main thread on the ledger's and the key store's connections recorded with its bindings and
   the number of rows the product fetched (transaction boundaries and savepoints included);
2. the floor: those statements replayed in order on a copy of the starting ledger opened by the
   product's own `open_ledger()` (same schema, pragmas, sqlite-vec, FTS5 secure-delete, WAL,
   background checkpoints) and its key store, fetching as many rows as the product did;
3. `custody-app --batch FILE` as a real subprocess (CPU time from /proc, by quarter of the run
   read as its results stream out);
4. the Python API in this process (`Ledger.assert_fact`/`retract`/`confirm`/`affirm`, groups of
   500 ops a `Ledger.transaction()`, as the batch groups them).
No thread variable is set: the product runs as a user runs it. Policy: a fresh ledger is made
under the shipped default (`policies/default.toml`: minilm-l6, whose vectors the background
worker makes in the pauses between writes); an existing `--base` is written under the policy it
records (as a user's own ledger is), unless `--policy` names one (`shipped`: the shipped
default), which then every run names (the trace, the CLI's `--policy`, the API's open), and
which is adopted on the starting copy first, untimed (a change of embedder re-indexes there).
The output names the embedder each figure was made under and where its vectors are made. Statements the background
threads run (WAL checkpoints, re-clustering) are not in the floor; their CPU is in the product's.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import apsw  # noqa: E402
import bench_ledger as B  # noqa: E402
import bench_ontop as O  # noqa: E402

from bench.benchenv import emit, header, machine_note  # noqa: E402
from custody_app.domain.policy import load_policy  # noqa: E402
from custody_app.domain.resources import default_policy_path  # noqa: E402
from custody_app.interfaces.batch import CHUNK, run_batch  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402
from store import open_ledger  # noqa: E402
from store.sqlite.keystore import open_keystore  # noqa: E402

CLI = [sys.executable, "-m", "custody_app"]
EVENT_INSERT = "INSERT INTO events("


def corpus(work: B.Workload) -> str:
    """bench_ledger's ops as batch lines (fact ids by alias)."""
    lines = []
    for i, op in enumerate(work.ops):
        if op[0] == "A":
            _, subject, predicate, value, space, actor, cause, provenance, session, llm, sup = op
            line: dict[str, Any] = {"op": "assert", "ref": f"f{i}", "subject": subject,
                                    "predicate": predicate, "value": value, "space": space,
                                    "actor": actor, "cause": cause, "provenance": provenance,
                                    "session": session}
            if llm is not None:
                line["llm"] = llm
            if sup >= 0:
                line["supersedes"] = f"@f{sup}"
        elif op[0] == "R":
            line = {"op": "retract", "fact_id": f"@f{op[1]}", "actor": op[2], "reason": op[3]}
        elif op[0] == "C":
            line = {"op": "confirm", "fact_id": f"@f{op[1]}", "actor": op[2], "reason": op[3]}
        else:
            line = {"op": "affirm", "fact_id": f"@f{op[1]}", "actor": op[2]}
        lines.append(json.dumps(line) + "\n")
    return "".join(lines)


class Trace:
    """Every statement the main thread runs on a ledger or key-store connection, while on."""

    def __init__(self) -> None:
        self.rows: list[list[Any]] = []  # [connection label, sql, bindings, rows fetched]
        self.on = False
        self._main = threading.get_ident()
        self._last: dict[int, list[Any]] = {}

    def hook(self, conn: apsw.Connection) -> None:
        label = "keys" if conn.filename.endswith(".keys") else "db"

        def on_exec(cursor: apsw.Cursor, sql: str, bindings: Any) -> bool:
            if self.on and threading.get_ident() == self._main:
                entry = [label, sql, bindings, 0]
                self.rows.append(entry)
                self._last[id(cursor)] = entry
            return True

        def on_row(cursor: apsw.Cursor, row: Any) -> Any:
            entry = self._last.get(id(cursor))
            if entry is not None:
                entry[3] += 1
            return row

        conn.exec_trace = on_exec
        conn.row_trace = on_row


def quarters(marks: list[float], total: int) -> list[float]:
    """CPU seconds a fact by quarter, from cumulative CPU at each quarter's end."""
    out, prev = [], 0.0
    for m in marks:
        out.append((m - prev) / (total / 4))
        prev = m
    return out


def replay(trace: list[list[Any]], start: Path, facts: int) -> tuple[float, float, list[float], int]:
    """(wall s, CPU s, CPU s a fact by quarter, errors) of the trace replayed on `start`."""
    db = open_ledger(start)
    db.checkpoint_in_background()
    keys = open_keystore(f"{start}.keys")
    cursors = {"db": db.conn.cursor(), "keys": keys.conn.cursor()}
    marks, events, errors, q = [], 0, 0, 1
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    checkpointer = db.checkpointer
    assert checkpointer is not None
    for label, sql, bindings, fetched in trace:
        cur = cursors[label]
        if label == "db" and sql.startswith("BEGIN"):
            checkpointer.before_write()  # as LedgerFile.write does: a WAL past CAP waits
        try:
            cur.execute(sql, bindings)
            for _ in range(fetched):
                if next(cur, None) is None:
                    break
        except apsw.Error:
            errors += 1
        if sql.startswith(EVENT_INSERT):
            events += 1
            if events >= q * facts / 4 and q <= 4:
                marks.append(time.process_time() - c0)
                q += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    while len(marks) < 4:
        marks.append(cpu)
    keys.close()
    db.close()
    return wall, cpu, quarters(marks, facts), errors


# The policy every run names (`--policy`), or None: the ledger's own (or the shipped default).
POLICY: Path | None = None


def open_product(path: Path) -> Ledger:
    return Ledger.open(path) if POLICY is None else Ledger.open(path, policy=load_policy(POLICY))


def traced_batch(path: Path, text: Path) -> tuple[Trace, float, float]:
    tracer = Trace()
    apsw.connection_hooks.append(tracer.hook)
    try:
        ledger = open_product(path)
    finally:
        apsw.connection_hooks.remove(tracer.hook)
    with ledger, open(text, encoding="utf-8") as stream, open(os.devnull, "w") as sink:
        tracer.on = True
        t0, c0 = time.perf_counter(), time.process_time()
        outcome = run_batch(ledger, stream, sink)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        tracer.on = False
        ledger.index.maintenance.join()
    assert outcome.failed == 0, outcome.summary()
    return tracer, wall, cpu


def _proc_cpu(pid: int, task: int | None = None) -> float:
    where = f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat"
    fields = Path(where).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads_cpu(pid: int) -> tuple[float, float]:
    """(main thread CPU s, every other live thread's CPU s) of process `pid`: a native thread
    (BLAS's workers, the checkpointer, the re-clustering) shows in the second."""
    main = other = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu = _proc_cpu(pid, int(task.name))
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(task.name) == pid:
            main = cpu
        else:
            other += cpu
    return main, other


def batch_subprocess(path: Path, text: Path, n: int) -> tuple[float, float, list[float], int]:
    """(wall s, CPU s, CPU s a fact by quarter, peak RSS MB at its last op) of `custody-app
    --batch`."""
    cmd = [*CLI, "--batch", str(text), "--ledger", str(path), "--create",
           *(["--policy", str(POLICY)] if POLICY is not None else [])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                            cwd=ROOT, text=True)
    assert proc.stdout is not None
    marks, seen, q, split, hwm = [], 0, 1, (0.0, 0.0), 0
    for line in proc.stdout:
        seen += 1
        if '"ok": false' in line[:200]:
            raise SystemExit(f"batch op failed: {line[:300]}")
        if seen >= q * n / 4 and q <= 4:
            marks.append(_proc_cpu(proc.pid))
            split = threads_cpu(proc.pid)
            # The peak RSS of the program it runs (VmHWM starts again at exec; wait4's
            # ru_maxrss would also count this process's memory, copied by the fork).
            hwm = next((int(ln.split()[1]) for ln in Path(f"/proc/{proc.pid}/status")
                        .read_text().splitlines() if ln.startswith("VmHWM:")), 0)
            q += 1
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status:
        raise SystemExit(f"custody-app --batch exited {status}")
    cpu = usage.ru_utime + usage.ru_stime
    THREADS["batch"] = split
    # What it ran after its last result (the closing signed checkpoint, a re-clustering the run
    # made due let finish, the close): in `cpu`, not in the quarters.
    TAIL["batch"] = cpu - marks[-1] if marks else 0.0
    return wall, cpu, quarters(marks[:4], n), hwm // 1024


# Run -> (main thread CPU s, other threads' CPU s), read at the end of its ops.
THREADS: dict[str, tuple[float, float]] = {}
# Run -> CPU s after its last op's result, until the process ended.
TAIL: dict[str, float] = {}


def api(path: Path, work: B.Workload) -> tuple[float, float, list[float]]:
    ledger = open_product(path)
    ids: list[str | None] = []
    n, marks = len(work.ops), []
    gc.collect()
    before = threads_cpu(os.getpid())
    t0, c0 = time.perf_counter(), time.process_time()
    for lo in range(0, n, CHUNK):
        with ledger.transaction():
            for i in range(lo, min(n, lo + CHUNK)):
                B.run_op(ledger, work.ops[i], ids)
        done = min(n, lo + CHUNK)
        while len(marks) < 4 and done >= (len(marks) + 1) * n / 4:
            marks.append(time.process_time() - c0)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    after = threads_cpu(os.getpid())
    THREADS["api"] = (after[0] - before[0], after[1] - before[1])
    ledger.index.maintenance.join()
    ledger.close()
    return wall, cpu, quarters(marks, n)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--base", default=None, help="a cached ledger to write on top of (only read)")
    ap.add_argument("--seed", type=int, default=20260907)
    ap.add_argument("--tmp", required=True, help="directory for the ledgers (removed at the end)")
    ap.add_argument("--skip", default="", help="comma list of runs to skip: batch,api")
    ap.add_argument("--policy", default=None,
                    help="a policy TOML every run names ('shipped': the shipped default); "
                         "default: the ledger's own, the shipped default for a fresh one")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    global POLICY
    if args.policy is not None:
        POLICY = default_policy_path() if args.policy == "shipped" else Path(args.policy).resolve()
    skip = set(filter(None, args.skip.split(",")))
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="contract-floor-", dir=args.tmp))
    notes = [f"load at start: {os.getloadavg()[0]:.2f} (1 min); {machine_note()}"]

    def log(msg: str) -> None:
        print(f"[{datetime.now(UTC):%H:%M:%S}] {msg}", file=sys.stderr, flush=True)

    try:
        start_path = tmp / "start.db"
        start = datetime(2026, 1, 5, tzinfo=UTC)
        if args.base:
            O._copy(Path(args.base), start_path)
            # A schema upgrade of an older base, untimed; under `--policy`, its adoption too
            # (a re-index at the open if the embedder changes; the `policy` event), so that
            # no run pays for either.
            with open_product(start_path) as first:
                if POLICY is not None:
                    first.adopt_policy()
            head_seq, head_at, _ = O._head(start_path)
            start = datetime.fromisoformat(head_at.replace("Z", "+00:00")) + timedelta(seconds=1)
            where = f"on top of a copy of {Path(args.base).name} ({head_seq:,} events)"
        else:
            open_product(start_path).close()  # created: schema, key store, no event yet
            where = "on a fresh ledger"
        with open_product(start_path) as probe:
            embedder = probe.embedder.name
            placed = ("by the background worker, in the pauses between writes"
                      if probe.index.deferred else "in the write's transaction")
            policy_note = (f"policy: {'the ledger' + chr(39) + 's own' if POLICY is None else POLICY}"
                           f" (embedder {embedder}: vectors made {placed})")
        work = B.make_workload(args.ops, args.seed, start)
        text = tmp / "corpus.jsonl"
        text.write_text(corpus(work), encoding="utf-8")
        n = len(work.ops)
        runs: dict[str, tuple[float, float, list[float]]] = {}

        log(f"trace: {n:,} ops through run_batch {where}")
        O._copy(start_path, tmp / "traced.db")
        tracer, t_wall, t_cpu = traced_batch(tmp / "traced.db", text)
        trace = tracer.rows
        events = sum(1 for r in trace if r[1].startswith(EVENT_INSERT))
        log(f"floor: replaying {len(trace):,} statements ({events:,} events)")
        O._copy(start_path, tmp / "floor.db")
        f_wall, f_cpu, f_q, errors = replay(trace, tmp / "floor.db", events)
        runs["floor"] = (f_wall, f_cpu, f_q)
        per = len(trace) / n
        del tracer, trace
        rss = 0
        if "batch" not in skip:
            log("custody-app --batch (subprocess)")
            O._copy(start_path, tmp / "batch.db")
            b_wall, b_cpu, b_q, rss = batch_subprocess(tmp / "batch.db", text, n)
            runs["batch"] = (b_wall, b_cpu, b_q)
        if "api" not in skip:
            log("Python API (in process)")
            O._copy(start_path, tmp / "api.db")
            runs["api"] = api(tmp / "api.db", work)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    notes.append(f"load at end: {os.getloadavg()[0]:.2f} (1 min); {machine_note()}")
    fw, fc, _ = runs["floor"]
    lines = [f"### {n:,} ops {where}", "", header(notes), "", policy_note, "",
             f"The trace: {per:.1f} statements an op ({events:,} events), replay errors "
             f"{errors}; the traced in-process batch ran {n / t_wall:,.0f} ops/s wall, "
             f"{n / t_cpu:,.0f} per CPU-s (tracer on).", "",
             "| run | ops/s wall | ops per CPU-s | CPU ratio to floor | wall ratio | "
             "CPU ms an op by quarter (1st / 2nd / 3rd / 4th) |",
             "|---|---:|---:|---:|---:|---|"]
    names = {"floor": "contract floor (replay)", "batch": "`custody-app --batch` (subprocess)",
             "api": "Python API (in process)"}
    for key, (wall, cpu, q) in runs.items():
        lines.append(f"| {names[key]} | {n / wall:,.0f} | {n / cpu:,.0f} | {cpu / fc:.2f} | "
                     f"{wall / fw:.2f} | " + " / ".join(f"{x * 1000:.3f}" for x in q) + " |")
    for key, (main_s, other_s) in THREADS.items():
        lines += ["", f"{names[key]}: the main thread ran {main_s:.1f} CPU-s, the other threads "
                  f"(the embedding worker, the re-clustering, the checkpointer, BLAS) "
                  f"{other_s:.1f} CPU-s "
                  f"({other_s / max(main_s + other_s, 1e-9):.0%} of the process)"
                  + (f"; after its last result it ran {TAIL[key]:.1f} CPU-s more (the closing "
                     "checkpoint, a re-clustering the run made due let finish, the exit), "
                     f"so up to its last result its CPU ratio is "
                     f"{(runs[key][1] - TAIL[key]) / fc:.2f}" if key in TAIL else "") + "."]
    if rss:
        lines += ["", f"Peak RSS of the batch subprocess: {rss:,} MB. This process's peak RSS: "
                  f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024:,} MB."]
    emit("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
