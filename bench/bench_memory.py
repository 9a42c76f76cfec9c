"""Memory of a `custody-app --batch` ingest and of open + recall, from /proc smaps_rollup.

    .venv/bin/python bench/bench_memory.py [--sizes 10000,100000] [--out FILE]

For each size N, N assert lines (values 100-300 bytes, ~N/6 subjects) are piped into a real
`python -m custody_app --batch - --ledger L --manual-clock` subprocess; its smaps_rollup is
sampled every 0.2 s and the peak RSS is reported per quarter of the input (flat = RSS does not
grow with the ledger), split into anonymous memory and file-backed pages (RSS - anonymous:
mapped library and database pages), with USS (private clean + dirty). Then a second subprocess
opens the finished ledger, runs 100 hybrid recalls (k=10) and reports the same at its end.
Ledgers live in a temp dir removed at the end. Prints markdown (and writes it to `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.benchenv import header, machine_note  # noqa: E402

WORDS = ("customer asked about upgrade billing invoice migrated from legacy tier prefers email "
         "over phone renewal due next quarter support ticket escalated resolved refund").split()

RECALL = """
import json, random, sys
from custody_app import Ledger
led = Ledger.open(sys.argv[1], readonly=len(sys.argv) > 3)
rng = random.Random(3)
words = sys.argv[2].split()
for _ in range(100):
    led.recall(" ".join(rng.sample(words, 3)), k=10)
print(open("/proc/self/smaps_rollup").read())
print(f"Matrix: {led.index.matrix.nbytes // 1024} kB")
led.close()
"""


def rollup(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[-1] == "kB":
            out[parts[0].rstrip(":")] = int(parts[1])
    return out


def figures(r: dict[str, int]) -> dict[str, float]:
    return {"rss": r.get("Rss", 0) / 1024, "anon": r.get("Anonymous", 0) / 1024,
            "file": (r.get("Rss", 0) - r.get("Anonymous", 0)) / 1024,
            "uss": (r.get("Private_Clean", 0) + r.get("Private_Dirty", 0)) / 1024}


def lines(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        note = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 30)))
        out.append(json.dumps({"op": "assert", "subject": f"acct:{rng.randrange(max(50, n // 6))}",
                               "predicate": rng.choice(("plan", "note", "region", "owner")),
                               "value": {"note": note, "seats": rng.randint(1, 500)},
                               "actor": "agent:bench", "provenance": "attested",
                               "cause": {"kind": "tool", "ref": f"crm-{i}"}}) + "\n")
    return out


def ingest(path: Path, feed: list[str]) -> tuple[list[dict[str, float]], float]:
    proc = subprocess.Popen([sys.executable, "-m", "custody_app", "--create", "--batch", "-", "--ledger",
                             str(path), "--manual-clock"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, text=True)
    fed = [0]
    peaks: list[dict[str, float]] = [{"rss": 0.0} for _ in range(4)]

    def sample() -> None:
        while proc.poll() is None:
            try:
                r = figures(rollup(Path(f"/proc/{proc.pid}/smaps_rollup").read_text()))
            except OSError:
                break
            q = min(3, fed[0] * 4 // max(len(feed), 1))
            if r["rss"] > peaks[q]["rss"]:
                peaks[q] = r
            time.sleep(0.2)

    watcher = threading.Thread(target=sample)
    t0 = time.perf_counter()
    watcher.start()
    assert proc.stdin is not None
    for i, line in enumerate(feed):
        proc.stdin.write(line)
        fed[0] = i
    proc.stdin.close()
    proc.wait()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"batch failed: {proc.stderr.read() if proc.stderr else ''}")
    return peaks, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--out", default=None)
    ap.add_argument("--existing", default="",
                    help="comma list of ledgers already built: open read-only + 100 recalls only")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    existing = []
    for ledger in [p for p in args.existing.split(",") if p.strip()]:
        load = os.getloadavg()[0]
        done = subprocess.run([sys.executable, "-c", RECALL, ledger, " ".join(WORDS), "ro"],
                              capture_output=True, text=True, cwd=ROOT, check=True)
        existing.append((ledger, load, figures(rollup(done.stdout)),
                         rollup(done.stdout).get("Matrix", 0) / 1024))
    tmp = Path(tempfile.mkdtemp(prefix="custody-bench-mem-"))
    rows = []
    try:
        for n in sizes:
            load = os.getloadavg()[0]
            path = tmp / f"mem-{n}.db"
            peaks, secs = ingest(path, lines(n, n))
            done = subprocess.run([sys.executable, "-c", RECALL, str(path), " ".join(WORDS)],
                                  capture_output=True, text=True, cwd=ROOT, check=True)
            rec = figures(rollup(done.stdout))
            size = sum(p.stat().st_size for p in tmp.glob(f"mem-{n}.db*"))
            rows.append((n, load, peaks, secs, rec, size))
            for p in tmp.glob(f"mem-{n}.db*"):
                p.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def mb(d: dict[str, float]) -> str:
        return f"{d.get('rss', 0):,.0f} ({d.get('anon', 0):,.0f} / {d.get('file', 0):,.0f} / {d.get('uss', 0):,.0f})"

    out = [header([f"other load at end: {machine_note()}"]), "",
           "MB: RSS (anonymous / file-backed / USS)", "",
           "| facts | load (1 min) at start | `--batch` peak RSS, 1st quarter | 2nd | 3rd | 4th "
           "| batch wall (s) | open + 100 recalls, at end | files (MB) |",
           "|---:|---:|---|---|---|---|---:|---|---:|"]
    for n, load, peaks, secs, rec, size in rows:
        out.append(f"| {n:,} | {load:.2f} | " + " | ".join(mb(p) for p in peaks)
                   + f" | {secs:,.0f} | {mb(rec)} | {size / 1e6:,.0f} |")
    if existing:
        out += ["", "Open read-only + 100 hybrid recalls (k=10) of a ledger built before; the "
                "in-process vector matrix is part of the anonymous memory:", "",
                "| ledger | load (1 min) at start | RSS (anonymous / file-backed / USS) | "
                "of which the vector matrix (MB) |", "|---|---:|---|---:|"]
        out += [f"| {Path(p).name} | {load:.2f} | {mb(rec)} | {mat:,.0f} |"
                for p, load, rec, mat in existing]
    text = "\n".join(out)
    print(text)
    if args.out:
        Path(args.out).write_text("# custody-app memory benchmark\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
