"""Memory and cold start (issue 35): peak RSS of open + 100 recalls and of a `--batch` ingest,
and the time to the first recall after an open, through the API and over the MCP server's stdio,
each beside its floor measured in the same run.

    .venv/bin/python bench/bench_cold_start.py [--sizes 10000,100000] [--existing L1,L2]
                                               [--out FILE]

For each size N a real `custody-app --batch -` subprocess ingests N assert lines (bench_memory's
corpus; under a model embedder such as the shipped default's, `--batch` leaves the vectors to the
next writable open, so the built ledger's recalls are lexical and its floor has no vectors); this process samples its /proc status every 0.05 s: VmHWM (the kernel's own peak RSS)
and RssAnon + RssFile (what `top` shows as RES, split). `--existing` ledgers (built before, e.g.
a 1M one) skip the ingest. On each ledger, in fresh subprocesses:
- floor, import: a process that imports custody_app and nothing more (its RSS and wall time);
- floor, exact KNN: numpy over every vector of the ledger held as float32 (loaded before the
  clock starts): the first query and the median of 100, and that process's peak RSS;
- product, API: `Ledger.open` read-only, then 100 hybrid recalls (k=10): open time, first
  recall, median of the rest, the recall at which the in-process copy was adopted, peak RSS;
- product, MCP: `custody-app serve --ledger L` over stdio (the SDK's client): spawn to
  initialized, then the first `memory_recall` answered, and the second.
Wall times on a shared 2-core machine are noisy: the load is printed at start and end.
Ledgers built here live in a temp dir removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_memory import WORDS, lines  # noqa: E402
from bench.benchenv import header, machine_note  # noqa: E402

STATUS = """
def status():
    out = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(value.split()[0]) / 1024
    return out
"""
IMPORT = STATUS + """
import json, time
t = time.perf_counter()
import custody_app.ledger.facade
print(json.dumps({"import_s": time.perf_counter() - t, **status()}))
"""
KNN = STATUS + """
import json, random, sys, time
import numpy as np
from custody_app import Ledger
from custody_app.recall.cells import unit
led = Ledger.open(sys.argv[1], readonly=True)
dims = led.index.embedder.dimensions
blocks = [(s, b.copy()) for s, b, st, *_ in led.db.recall.iter_vector_blocks(dims)]
if not blocks:  # none yet (a --batch under a model embedder leaves them to the next open)
    blocks = [(np.zeros(0, dtype=np.int64), np.zeros((0, dims), dtype=np.float32))]
matrix = np.concatenate([b for _, b in blocks]); seqs = np.concatenate([s for s, _ in blocks])
del blocks
rng = random.Random(3)
words = sys.argv[2].split()
times = []
for _ in range(100):
    t = time.perf_counter()
    q = unit(led.index.embedder.embed_query(" ".join(rng.sample(words, 3))))
    scores = matrix @ q
    top = seqs[np.argsort(-scores)[:10]] if len(seqs) <= 10 else seqs[np.argpartition(-scores, 10)[:10]]
    times.append(time.perf_counter() - t)
print(json.dumps({"first_s": times[0], "median_s": sorted(times[1:])[49], "vectors": len(seqs),
                  **status()}))
"""
API = STATUS + """
import json, random, sys, time
t0 = time.perf_counter()
from custody_app import Ledger
t1 = time.perf_counter()
led = Ledger.open(sys.argv[1], readonly=True)
t2 = time.perf_counter()
rng = random.Random(3)
words = sys.argv[2].split()
times, adopted = [], None
for i in range(100):
    t, c = time.perf_counter(), time.thread_time()
    result = led.recall(" ".join(rng.sample(words, 3)), k=10)
    times.append(time.perf_counter() - t)
    if i == 0:
        first_cpu = time.thread_time() - c  # this thread's CPU: not the loading thread's
    if adopted is None and "in an in-process copy" in result.note:
        adopted = i
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "first_s": times[0],
                  "first_cpu_s": first_cpu,
                  "median_s": sorted(times[1:])[49], "adopted_at": adopted,
                  "cpu_s": time.process_time(), "kept": len(led.index.matrix),
                  "mode": ("sign bits" if led.index.matrix.bits else "int8"
                           if led.index.matrix.quantized else "float32"), **status()}))
led.close()
"""


def watch(proc: subprocess.Popen[Any], peak: dict[str, float]) -> threading.Thread:
    """Sample a process's RSS until it exits: the peak of VmHWM and of RssAnon + RssFile."""
    def run() -> None:
        while proc.poll() is None:
            try:
                text = Path(f"/proc/{proc.pid}/status").read_text()
            except OSError:
                break
            got = {k: int(v.split()[0]) / 1024 for k, _, v in
                   (line.partition(":") for line in text.splitlines())
                   if k in ("VmHWM", "RssAnon", "RssFile", "RssShmem")}
            if got:
                peak["hwm"] = max(peak.get("hwm", 0), got.get("VmHWM", 0))
                res = got.get("RssAnon", 0) + got.get("RssFile", 0) + got.get("RssShmem", 0)
                if res > peak.get("res", 0):
                    peak.update(res=res, anon=got.get("RssAnon", 0), file=got.get("RssFile", 0))
            time.sleep(0.05)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def child(code: str, *args: str) -> dict[str, Any]:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    peak: dict[str, float] = {}
    watcher = watch(proc, peak)
    out, err = proc.communicate()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"child failed: {err[-2000:]}")
    return {**json.loads(out.strip().splitlines()[-1]), **{f"peak_{k}": v for k, v in peak.items()}}


def batch(path: Path, n: int, fed: list[int] | None = None,
          watcher: Callable[[subprocess.Popen[Any]], threading.Thread] | None = None
          ) -> dict[str, Any]:
    """A real `--batch -` of n asserts under the policy in force (the shipped default's for a
    new ledger), its RSS watched by `watcher` (default: the peaks, returned as peak_*); the
    lines written so far in `fed[0]`."""
    proc = subprocess.Popen([sys.executable, "-m", "custody_app", "--create", "--batch", "-",
                             "--ledger", str(path), "--manual-clock"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, text=True)
    peak: dict[str, float] = {}
    thread = watch(proc, peak) if watcher is None else watcher(proc)
    t, cpu0 = time.perf_counter(), os.times()
    assert proc.stdin is not None
    for i, line in enumerate(lines(n, n), start=1):
        proc.stdin.write(line)
        if fed is not None:
            fed[0] = i
    proc.stdin.close()
    proc.wait()
    thread.join()
    if proc.returncode != 0:
        raise SystemExit(f"batch failed: {proc.stderr.read() if proc.stderr else ''}")
    cpu = os.times()
    return {"wall_s": time.perf_counter() - t,
            "cpu_s": cpu.children_user + cpu.children_system - cpu0.children_user
            - cpu0.children_system, **{f"peak_{k}": v for k, v in peak.items()}}


async def mcp_first(path: Path) -> dict[str, float]:
    from mcp import Client, StdioServerParameters

    cli = str(Path(sys.executable).parent / "custody-app")
    # The SDK hands the server only a few environment variables: PYTHONPATH is passed on so
    # it runs this checkout's code, not whichever the console script's install points at.
    params = StdioServerParameters(command=cli, args=["serve", "--ledger", str(path),
                                                      "--agent", "agent:bench"],
                                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    t0 = time.perf_counter()
    async with Client(params) as client:
        t1 = time.perf_counter()
        await client.call_tool("memory_recall", {"query": "customer billing upgrade", "k": 10})
        t2 = time.perf_counter()
        await client.call_tool("memory_recall", {"query": "refund ticket escalated", "k": 10})
        t3 = time.perf_counter()
    return {"init_s": t1 - t0, "first_s": t2 - t1, "second_s": t3 - t2}


def measure(path: Path) -> dict[str, Any]:
    words = " ".join(WORDS)
    return {"import": child(IMPORT), "knn": child(KNN, str(path), words),
            "api": child(API, str(path), words), "mcp": anyio.run(mcp_first, path)}


def table(rows: list[tuple[str, dict[str, Any] | None, dict[str, Any], float, float]]) -> list[str]:
    def mb(d: dict[str, Any]) -> str:
        return (f"{d.get('peak_hwm', 0):,.0f} ({d.get('peak_anon', 0):,.0f} / "
                f"{d.get('peak_file', 0):,.0f})")

    out = ["Peak RSS in MB: VmHWM (RssAnon / RssFile at the sampled peak of their sum, what "
           "`top` shows as RES). Times in ms (s where marked).", "",
           "| ledger | load at start / end | `--batch` peak RSS, wall / CPU (s) | floor: bare "
           "import, peak RSS / import (s) | open + 100 recalls, peak RSS | floor: numpy exact "
           "KNN over float32, peak RSS | first recall after open (API; its thread's CPU; the open "
           "before it) | floor: numpy exact KNN, "
           "first / median | API recalls 2-100, median | copy adopted at recall | MCP stdio: "
           "spawn to initialized (s) / first recall / second |",
           "|---|---|---|---|---|---|---|---|---:|---:|---|"]
    for name, b, m, load0, load1 in rows:
        imp, knn, api, mcp = m["import"], m["knn"], m["api"], m["mcp"]
        batch_cell = ("(built before)" if b is None else
                      f"{mb(b)}, {b['wall_s']:,.0f} / {b['cpu_s']:,.0f}")
        out.append(
            f"| {name} | {load0:.2f} / {load1:.2f} | {batch_cell} | {mb(imp)} / "
            f"{imp['import_s']:.2f} | {mb(api)} | {mb(knn)} | {api['first_s'] * 1000:,.0f} "
            f"({api['first_cpu_s'] * 1000:,.0f} CPU; open {api['open_s'] * 1000:,.0f}) | "
            f"{knn['first_s'] * 1000:,.1f} / {knn['median_s'] * 1000:,.1f} | "
            f"{api['median_s'] * 1000:,.1f} | {api['adopted_at']} (kept {api['kept']:,}: "
            f"{api['mode']}) | "
            f"{mcp['init_s']:.2f} / {mcp['first_s'] * 1000:,.0f} / {mcp['second_s'] * 1000:,.0f} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--existing", default="", help="comma list of ledgers built before")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    start_note = machine_note()
    rows: list[tuple[str, dict[str, Any] | None, dict[str, Any], float, float]] = []
    tmp = Path(tempfile.mkdtemp(prefix="custody-bench-cold-"))
    try:
        for n in [int(s) for s in args.sizes.split(",") if s.strip()]:
            load0 = os.getloadavg()[0]
            path = tmp / f"cold-{n}.db"
            built = batch(path, n)
            rows.append((f"{n:,} facts (built here)", built, measure(path), load0,
                         os.getloadavg()[0]))
            for p in tmp.glob(f"cold-{n}.db*"):
                p.unlink()
        for ledger in [p for p in args.existing.split(",") if p.strip()]:
            load0 = os.getloadavg()[0]
            rows.append((Path(ledger).name, None, measure(Path(ledger)), load0,
                         os.getloadavg()[0]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = "\n".join([header([f"other load at start: {start_note}",
                              f"other load at end: {machine_note()}"]), "", *table(rows)])
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
