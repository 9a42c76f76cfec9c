"""Where an ingest's time goes above the SQL (issue 35): cProfile of `run_batch` in this process
over bench_contract_floor's corpus, by function, in microseconds a fact, and by stage of the
append path (validation, canonical JSON, sealing, redaction, the recall indexes, ...).

    .venv/bin/python bench/bench_contract_profile.py --ops 10000 --tmp DIR [--base LEDGER] [--out FILE]
    .venv/bin/python bench/bench_contract_profile.py --stubs --ops 3000 --tmp DIR [--rounds 3]

`--stubs` measures instead what a stage costs without a profiler: the API ingest of the corpus
(500 ops a transaction) in a fresh process for each variant, the variant replacing one stage by
a no-op (measurement only: the ledger it writes is thrown away), rounds alternating, medians of
CPU time an op compared with the unchanged run.

Times are this process's CPU time (every thread of it), not wall time. Cumulative times overlap (a function's callees are inside it); `own` is time in the function
itself. The stage table sums the cumulative time of the named entry points, each counted once.
No thread variable is set.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import bench_contract_floor as F  # noqa: E402
import bench_ledger as B  # noqa: E402
import bench_ontop as O  # noqa: E402

from bench.benchenv import emit, header, machine_note  # noqa: E402
from custody_app.interfaces.batch import run_batch  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402

TOP = 30
# (label, file suffix, function name): the append path's stages, by their entry points.
STAGES = [
    ("one batch line, all of it (parse, command model, handler, result)", "ledger/ops.py",
     "run_op"),
    ("the line's command model (strict pydantic)", "domain/commands.py", "parse_command"),
    ("the assert handler, all of it", "ledger/writes.py", "assert_fact"),
    ("redaction of the value", "domain/redaction.py", "redact"),
    ("redaction of the free-text fields", "domain/text_fields.py", "redact_fields"),
    ("previously forgotten? (keyed digest + lookup)", "erasure/digests.py",
     "is_previously_forgotten"),
    ("sealing the value (AES-GCM)", "keys/values.py", "seal"),
    ("append: all of it", "core/ledger_core.py", "append"),
    ("pydantic model_validate (the command and the event)", "pydantic/main.py", "model_validate"),
    ("append: free text sealed", "core/texts.py", "seal_event"),
    ("canonical JSON (value and event)", "domain/canonical.py", "canonical"),
    ("append: session index", "core/sessions.py", "index_event"),
    ("append: projection", "core/projector.py", "apply_event"),
    ("append: recall sync (the group's flush included)", "recall/index.py", "sync"),
    ("recall flush (embedding, cells, FTS5/vec rows)", "recall/index.py", "flush"),
    ("embedding (hashed n-gram)", "recall/embedders.py", "embed"),
    ("nearest cell of each new vector (BLAS)", "recall/cells.py", "nearest_cells"),
    ("SQL: every execute/executemany (own time)", "~", "<method 'execute"),
]


def stage_rows(stats: pstats.Stats, n: int) -> list[str]:
    raw = stats.stats  # type: ignore[attr-defined]
    rows = []
    for label, suffix, name in STAGES:
        if suffix == "~":  # C methods: their own time (execute and executemany)
            cum = sum(v[2] for (file, _, func), v in raw.items()
                      if file == "~" and func.startswith(name))
        else:
            cum = sum(v[3] for (file, _, func), v in raw.items()
                      if func == name and file.endswith(suffix))
        rows.append(f"| {label} | `{suffix}:{name}` | {cum / n * 1e6:,.0f} |")
    return rows


STUBS = ("none", "embedding", "redaction", "event validation")


def stub(variant: str) -> None:
    """Replace one stage by a no-op in this process (a measurement child only)."""
    if variant == "embedding":
        import numpy as np

        from custody_app.recall import embedders

        def zeros(self: Any, texts: Any) -> Any:
            return np.zeros((len(texts), self.dimensions), dtype=np.float32)
        embedders.HashedNgramEmbedder.embed = zeros  # type: ignore[method-assign]
    elif variant == "redaction":
        from custody_app.ledger import writes
        writes.redact = lambda value, detectors: (value, [])  # type: ignore[assignment]
        writes.redact_fields = lambda cmd, detectors: (cmd, [])  # type: ignore[assignment]
    elif variant == "event validation":
        from custody_app.core import ledger_core

        class Anything:
            @staticmethod
            def model_validate(envelope: Any) -> None:
                return None
        ledger_core.EVENT_MODELS = {k: Anything for k in ledger_core.EVENT_MODELS}  # type: ignore


def stub_child(variant: str, ops: int, seed: int, tmp: str) -> float:
    """CPU s an op of the API ingest with `variant` stubbed."""
    import gc as _gc

    from custody_app.interfaces.batch import CHUNK
    stub(variant)
    work = B.make_workload(ops, seed, datetime(2026, 1, 5, tzinfo=UTC))
    where = Path(tempfile.mkdtemp(dir=tmp))
    try:
        ledger = Ledger.open(where / "l.db")
        ids: list[str | None] = []
        _gc.collect()
        c0 = time.process_time()
        for lo in range(0, ops, CHUNK):
            with ledger.transaction():
                for i in range(lo, min(ops, lo + CHUNK)):
                    B.run_op(ledger, work.ops[i], ids)
        cpu = time.process_time() - c0
        ledger.close()
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return cpu / ops


def stubs(args: argparse.Namespace) -> str:
    import statistics
    import subprocess
    runs: dict[str, list[float]] = {v: [] for v in STUBS}
    for _ in range(args.rounds):
        for variant in STUBS:
            out = subprocess.run([sys.executable, __file__, "--stub-child", variant, "--ops",
                                  str(args.ops), "--tmp", args.tmp], capture_output=True,
                                 text=True, check=True, env={**os.environ,
                                                             "PYTHONPATH": str(ROOT)})
            runs[variant].append(float(out.stdout.strip().splitlines()[-1]))
    base = statistics.median(runs["none"])
    lines = [f"### What a stage costs: {args.ops:,} ops through the API, a stage stubbed", "",
             header([f"load at end: {os.getloadavg()[0]:.2f}; {machine_note()}"]), "",
             f"Medians of {args.rounds} alternating rounds, CPU µs an op.", "",
             "| stubbed | µs an op | the stage's cost | share |", "|---|---:|---:|---:|"]
    for variant in STUBS:
        med = statistics.median(runs[variant])
        cost = base - med
        lines.append(f"| {variant} | {med * 1e6:,.0f} | "
                     + ("" if variant == "none" else f"{cost * 1e6:,.0f}") + " | "
                     + ("" if variant == "none" else f"{cost / base:.0%}") + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--base", default=None)
    ap.add_argument("--seed", type=int, default=20260907)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--stubs", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stub-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.stub_child:
        print(stub_child(args.stub_child, args.ops, args.seed, args.tmp))
        return 0
    if args.stubs:
        text = stubs(args)
        print(text)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as fh:
                fh.write("\n" + text)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="contract-profile-", dir=args.tmp))
    notes = [f"load at start: {os.getloadavg()[0]:.2f}; {machine_note()}"]
    try:
        path = tmp / "ledger.db"
        start = datetime(2026, 1, 5, tzinfo=UTC)
        where = "a fresh ledger"
        if args.base:
            O._copy(Path(args.base), path)
            Ledger.open(path).close()
            head_seq, head_at, _ = O._head(path)
            start = datetime.fromisoformat(head_at.replace("Z", "+00:00")) + timedelta(seconds=1)
            where = f"a copy of {Path(args.base).name} ({head_seq:,} events)"
        work = B.make_workload(args.ops, args.seed, start)
        text = tmp / "corpus.jsonl"
        text.write_text(F.corpus(work), encoding="utf-8")
        n = len(work.ops)
        ledger = Ledger.open(path)
        # CPU time, not wall: the machine is shared, and every thread of the process counts.
        prof = cProfile.Profile(time.process_time)
        with ledger, open(text, encoding="utf-8") as stream, open(os.devnull, "w") as sink:
            prof.enable()
            run_batch(ledger, stream, sink)
            prof.disable()
            ledger.index.maintenance.join()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    notes.append(f"load at end: {os.getloadavg()[0]:.2f}; {machine_note()}")
    stats = pstats.Stats(prof)
    total = stats.total_tt  # type: ignore[attr-defined]
    lines = [f"### cProfile of {n:,} ops through run_batch on {where}", "", header(notes), "",
             f"Profiled total {total:.1f} s, {total / n * 1e6:,.0f} µs an op (the profiler "
             "itself roughly doubles Python-heavy code: read the shares, not the absolutes).",
             "", "| stage | entry point | µs an op (cumulative) |", "|---|---|---:|",
             *stage_rows(stats, n), "",
             "| function | calls an op | own µs an op | cumulative µs an op |",
             "|---|---:|---:|---:|"]
    raw = stats.stats  # type: ignore[attr-defined]
    for (file, line, func), (_, calls, own, cum, _) in sorted(
            raw.items(), key=lambda kv: -kv[1][2])[:TOP]:
        where_ = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
        lines.append(f"| `{func}` ({where_}) | {calls / n:.1f} | {own / n * 1e6:,.1f} | "
                     f"{cum / n * 1e6:,.1f} |")
    emit("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
