"""verify's CPU time per event: the real verify of commit 1734f62 (issue 13's "today") against a
newer checkout's full verify and its bench floor, rounds interleaved across processes.

    git archive 1734f62 | tar -x -C /tmp/old1734 && cd /tmp/old1734 && python3 -m venv .venv \
        && .venv/bin/pip install -q -e '.[dev]'
    # the old ledger, by the old code's own builder (100,017 events at schema 4, ~4 min):
    /tmp/old1734/.venv/bin/python -c "import sys; sys.path.insert(0, '/tmp/old1734'); \
        from pathlib import Path; from bench.bench_verify import build; \
        build(Path('/tmp/oldv/old100k.db'), 100000)"
    # copies of it (.db, .keys, .keys.master, .pub) as OLD.db and UPG.db, and a copy of a ledger
    # created at schema 5 by `bench/bench_verify.py --sizes 100000 --mix asserts --keep DIR`:
    python bench/bench_verify_old.py --old-root /tmp/old1734 --new-root . \
        --old-ledger OLD.db --upgraded UPG.db --native NATIVE.db [--rounds 4]

Each code version runs in worker processes of its own venv (`ROOT/.venv/bin/python`), one per
run and file (old verify, new full verify on each file, new floor on each file, old floor), each
keeping its one ledger open read-only so only the call is timed (time.process_time of the
worker, which does nothing else meanwhile). The driver sends the jobs of one round in turn
(old, new, new, floor, floor, old floor), then the next round. The files given must be copies:
`--upgraded` (a schema-4 file) is opened read-write once by the new code first, which upgrades
it to schema 5. Prints a JSON line per measurement and a summary.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WORKER = r'''
import json, sys, time, importlib.util, sqlite3
sys.dont_write_bytecode = True  # the checkouts are only read
root = sys.argv[1]
sys.path.insert(0, root)
from custody_app.ledger.facade import Ledger
spec = importlib.util.spec_from_file_location("bench_verify_floor", root + "/bench/bench_verify.py")
floor_mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(floor_mod)
open_ = {}
for line in sys.stdin:
    job = json.loads(line)
    path, op = job["path"], job["op"]
    if op == "upgrade":
        with Ledger.open(path) as led:
            pass
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        v = con.execute("PRAGMA user_version").fetchone()[0]; con.close()
        print(json.dumps({"schema": v}), flush=True)
        continue
    if path not in open_:
        open_[path] = Ledger.open(path, readonly=True)
    led = open_[path]
    w0, c0 = time.perf_counter(), time.process_time()
    if op == "verify":
        r = led.verify(); ok, events = r.valid, r.events
    else:
        ok, events = floor_mod.floor(led), led.db.events.count()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    print(json.dumps({"cpu": cpu, "wall": wall, "valid": bool(ok), "events": events}), flush=True)
'''


class Worker:
    """A process of `root`'s code running `script` (a JSON job a line in, a JSON reply out)."""

    def __init__(self, root: str, python: str | None = None, script: str = WORKER) -> None:
        self.proc = subprocess.Popen([python or f"{root}/.venv/bin/python", "-c", script, root],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     cwd=root)

    def ask(self, **job: str) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        reply: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return reply

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait()


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old-root", required=True)
    p.add_argument("--new-root", required=True)
    p.add_argument("--old-ledger", required=True, help="schema-4 copy for the old verify")
    p.add_argument("--upgraded", required=True, help="schema-4 copy, upgraded here by the new code")
    p.add_argument("--native", help="copy of a ledger created at schema 5 (optional)")
    p.add_argument("--no-floor", action="store_true", help="verify only, no bench floors")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--python", help="interpreter for both trees' workers (default: each "
                   "root's .venv/bin/python); the worker puts its root first on sys.path")
    a = p.parse_args()
    up = Worker(a.new_root, a.python)
    print(json.dumps({"upgrade": a.upgraded, **up.ask(op="upgrade", path=a.upgraded)}), flush=True)
    up.close()
    plan = [("a old verify", a.old_root, "verify", a.old_ledger),
            ("b new verify upgraded", a.new_root, "verify", a.upgraded),
            ("c new verify native", a.new_root, "verify", a.native),
            ("d floor upgraded", a.new_root, "floor", a.upgraded),
            ("d floor native", a.new_root, "floor", a.native),
            ("e old bench floor (1734f62) on the old file", a.old_root, "floor", a.old_ledger)]
    plan = [(name, Worker(root, a.python), op, path) for name, root, op, path in plan
            if path is not None and not (a.no_floor and op == "floor")]
    start = load()
    print(json.dumps({"load_start": start, "utc": time.strftime("%H:%M:%S", time.gmtime())}), flush=True)
    got: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in plan}
    for rnd in range(a.rounds):
        for name, worker, op, path in plan:
            r = worker.ask(op=op, path=path)
            got[name].append(r)
            print(json.dumps({"round": rnd + 1, "run": name, **r, "load": load()}), flush=True)
    end = load()
    for _, w, _, _ in plan:
        w.close()
    base = min(r["cpu"] for r in got["a old verify"]) / got["a old verify"][0]["events"]
    print(f"load {start}-{end} ({time.strftime('%H:%M:%S', time.gmtime())} UTC)")
    for name, rs in got.items():
        cpus = [r["cpu"] for r in rs]
        per = min(cpus) / rs[0]["events"]
        print(f"{name}: events {rs[0]['events']:,} valid {all(r['valid'] for r in rs)} "
              f"best {min(cpus):.2f} all {', '.join(f'{c:.2f}' for c in cpus)} "
              f"{per * 1e6:.1f} us/event ratio-to-old {per / base:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
