"""Peak RSS of one `custody-app --batch` ingest under the shipped default policy, by quarter of
its input, as `top` shows it (file-backed pages included), and what the embedding worker did.

    .venv/bin/python bench/bench_batch_quarters.py --events 1000000 --log FILE [--keep DIR]

N assert lines (bench_memory's corpus) are piped into a real `python -m custody_app --create
--batch - --ledger L --manual-clock` subprocess (the policy is the shipped default's: no
`--policy`). Every 0.05 s this process samples the child's /proc status: VmHWM (the kernel's own
peak RSS) and RssAnon + RssFile + RssShmem (RES). Every 15 s a progress line (lines fed, the
peaks so far, the load) is appended to `--log`, so a run stopped before its end still says how
far it got. At the end the ledger is opened read-only: its believed facts and how many have a
vector (the rest is the backlog the embedding worker fills at the next writable open), and
whether the child loaded the model (its threads' names are not visible after exit: the vectors
written tell). The ledger is kept under `--keep` if given (else removed).
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_cold_start import batch  # noqa: E402
from bench.benchenv import emit, header, machine_note  # noqa: E402

KEYS = ("VmHWM", "RssAnon", "RssFile", "RssShmem")
COUNT = """
import json, sys
from custody_app import Ledger
led = Ledger.open(sys.argv[1], readonly=True)
db = led.db
with db.read():
    print(json.dumps({"lexical": db.recall.lexical_rows_count(),
                      "vectors": db.recall.vector_count(),
                      "embedder": list(db.recall.embedder() or ())}))
led.close()
"""


def sample(pid: int) -> dict[str, float]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {k: int(v.split()[0]) / 1024 for k, _, v in
            (line.partition(":") for line in text.splitlines()) if k in KEYS}


def run(n: int, path: Path, log: Path) -> dict[str, Any]:
    fed = [0]
    quarters: list[dict[str, float]] = [{} for _ in range(4)]

    def watcher(proc: subprocess.Popen[Any]) -> threading.Thread:
        def watch() -> None:
            last_log = 0.0
            while proc.poll() is None:
                got = sample(proc.pid)
                if got:
                    q = quarters[min(3, fed[0] * 4 // n)]
                    q["hwm"] = max(q.get("hwm", 0.0), got.get("VmHWM", 0.0))
                    res = (got.get("RssAnon", 0) + got.get("RssFile", 0)
                           + got.get("RssShmem", 0))
                    if res > q.get("res", 0.0):
                        q.update(res=res, anon=got.get("RssAnon", 0), file=got.get("RssFile", 0))
                if time.monotonic() - last_log > 15:
                    last_log = time.monotonic()
                    with log.open("a") as f:
                        f.write(json.dumps({"t": time.strftime("%H:%M:%S", time.gmtime()),
                                            "fed": fed[0], "load": os.getloadavg()[0],
                                            "now": got, "quarters": quarters}) + "\n")
                time.sleep(0.05)

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        return thread

    return {**batch(path, n, fed, watcher), "quarters": quarters}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--log", required=True)
    ap.add_argument("--keep", default=None, help="a folder to keep the ledger in")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    start_note, load0 = machine_note(), os.getloadavg()[0]
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="custody-bench-bq-"))
    path = tmp / f"batch-{args.events}.db"
    try:
        got = run(args.events, path, Path(args.log))
        counted = json.loads(subprocess.run([sys.executable, "-c", COUNT, str(path)],
                                            capture_output=True, text=True, cwd=ROOT,
                                            check=True).stdout.strip().splitlines()[-1])
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    rows = ["| quarter of the input | peak VmHWM (MB) | RES at its sampled peak: anonymous / "
            "file-backed (MB) |", "|---|---:|---|"]
    for i, q in enumerate(got["quarters"], start=1):
        rows.append(f"| {i} | {q.get('hwm', 0):,.0f} | {q.get('anon', 0):,.0f} / "
                    f"{q.get('file', 0):,.0f} |")
    text = "\n".join([header([f"other load at start: {start_note}",
                              f"other load at end: {machine_note()}",
                              f"load (1 min) at start / end: {load0:.2f} / "
                              f"{os.getloadavg()[0]:.2f}"]), "",
                      f"`--batch` of {args.events:,} asserts, default policy: wall "
                      f"{got['wall_s']:,.0f} s, CPU {got['cpu_s']:,.0f} s; believed facts "
                      f"indexed {counted['lexical']:,}, with a vector {counted['vectors']:,} "
                      f"(embedder {counted['embedder']})", "", *rows])
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
