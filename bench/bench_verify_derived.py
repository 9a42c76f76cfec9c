"""verify's time per event with issue 31's derived-table checks (sessions, served reads, session
events, actions, salience presentations, pending retractions) against an older checkout's own
verify, in one run on the same file; `verify --deep` timed separately.

    git worktree add --detach OLD_TREE 5ea3298      # OLD_TREE: a folder from mktemp -d
    .venv/bin/python bench/bench_verify_derived.py 100000 \\
        --old-root OLD_TREE [--mix sessions] [--rounds 3] [--keep DIR] [--out FILE]

The ledger (SIZE events, the positional argument) is built once by this checkout's builder
running on the old code (so the old verify can open it; this checkout's code upgrades a copy for
its own runs, as a user's first open would) (`bench_verify.build`, mix `sessions` by default: reads served to sessions and actions beside
asserts, affirms and retractions) and kept under `--keep`. Each code version runs in a worker
process of its own (the same interpreter, its root first on sys.path) holding the ledger open
read-only, so only the call is timed (the worker's process CPU time, and wall time). Rounds are
interleaved: old verify, new verify, new verify --deep; best of the rounds. Writes a section into
`--out` (replacing an earlier one of this bench) and prints it. No assert on time anywhere.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_verify import kinds  # noqa: E402
from bench.bench_verify_old import Worker  # noqa: E402
from bench.benchenv import machine_note  # noqa: E402

WORKER = r'''
import json, sys, time
sys.dont_write_bytecode = True  # the checkouts are only read
sys.path.insert(0, sys.argv[1])
from custody_app.ledger.facade import Ledger
opened = {}
for line in sys.stdin:
    job = json.loads(line)
    led = opened.get(job["path"]) or opened.setdefault(job["path"],
                                                        Ledger.open(job["path"], readonly=True))
    w0, c0 = time.perf_counter(), time.process_time()
    r = led.verify(deep=True) if job["op"] == "deep" else led.verify()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    print(json.dumps({"cpu": cpu, "wall": wall, "valid": r.valid, "events": r.events,
                      "problem": r.problem}), flush=True)
'''

SECTION = "## Derived-table checks (issue 31) against the verify before them"


def verify_worker(root: str) -> Worker:
    """A verify worker of `root`'s code under this interpreter."""
    return Worker(root, sys.executable, script=WORKER)


BUILD = r'''
import sys
sys.path.insert(0, sys.argv[1])  # the old code first: the file is one the old verify reads
import importlib.util
from pathlib import Path
spec = importlib.util.spec_from_file_location("bench_verify", sys.argv[2])
bench_verify = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_verify)
path, events, built = bench_verify.ledger_for(Path(sys.argv[3]), int(sys.argv[4]), mix=sys.argv[5])
print(path, events, "" if built is None else f"{built:.0f}")
'''


def build_with_old_code(old_root: str, keep: Path, size: int, mix: str) -> tuple[Path, int]:
    """The ledger of `size` events, built (once, kept) by this checkout's builder running on
    the old code, so the old verify can open it (a newer schema it would refuse)."""
    done = subprocess.run([sys.executable, "-c", BUILD, old_root,
                           str(ROOT / "bench" / "bench_verify.py"), str(keep / "old-code"),
                           str(size), mix], cwd=old_root, capture_output=True, text=True,
                          check=True)
    where, events, built = (done.stdout.strip().splitlines()[-1].split(" ") + [""])[:3]
    if built:
        print(f"built {int(events):,} events in {built} s by the old code (load {load()})",
              flush=True)
    return Path(where), int(events)


def upgraded_copy(path: Path) -> Path:
    """A copy of the ledger and its key files opened once read-write by this checkout's code,
    which upgrades schema and key store as a user's first open would (the new runs read it)."""
    from custody_app.ledger.facade import Ledger
    copy = path.with_name(path.stem + "-upgraded.db")
    if not copy.exists():
        for suffix in ("", ".keys", ".keys.master", ".pub"):
            if Path(f"{path}{suffix}").exists():
                shutil.copyfile(f"{path}{suffix}", f"{copy}{suffix}")
        Ledger.open(copy).close()
    return copy


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def git(root: str, *cmd: str) -> str:
    return subprocess.run(["git", *cmd], cwd=root, capture_output=True, text=True).stdout.strip()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("size", type=int, help="events in the ledger (built once, kept)")
    p.add_argument("--old-root", required=True, help="a checkout of the code before (5ea3298)")
    p.add_argument("--mix", default="sessions")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keep", default="/tmp/custody-bench-verify")
    p.add_argument("--out", default=str(ROOT / "bench" / "results_verify.md"))
    a = p.parse_args()
    path, events = build_with_old_code(a.old_root, Path(a.keep), a.size, a.mix)
    upgraded = upgraded_copy(path)
    plan = [("old verify", verify_worker(a.old_root), "verify"), ("new verify", verify_worker(str(ROOT)), "verify"),
            ("new verify --deep", verify_worker(str(ROOT)), "deep")]
    paths = {"old verify": path}
    start, began = load(), time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    got: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in plan}
    for rnd in range(a.rounds):
        for name, worker, op in plan:
            r = worker.ask(op=op, path=str(paths.get(name, upgraded)))
            assert r["valid"], f"{name} failed on an untampered ledger: {r['problem']}"
            got[name].append(r)
            print(json.dumps({"round": rnd + 1, "run": name, **r, "load": load()}), flush=True)
    end, note = load(), machine_note()
    for _, w, _ in plan:
        w.close()
    base = min(r["cpu"] for r in got["old verify"])
    rows = []
    for name, rs in got.items():
        cpu, wall = min(r["cpu"] for r in rs), min(r["wall"] for r in rs)
        rows.append(f"| {name} | {rs[0]['events']:,} | {wall:.2f} | {cpu:.2f} | "
                    f"{cpu / rs[0]['events'] * 1e6:.1f} | {cpu / base:.2f} | "
                    + ", ".join(f"{r['cpu']:.2f}" for r in rs) + " |")
    text = "\n".join([
        SECTION, "",
        f"    .venv/bin/python bench/bench_verify_derived.py {a.size} "
        f"--old-root OLD_TREE --mix {a.mix} --rounds {a.rounds}", "",
        f"Old: {git(a.old_root, 'rev-parse', '--short', 'HEAD')} (a git worktree of it); new: "
        f"{git(str(ROOT), 'rev-parse', '--short', 'HEAD')}"
        + (" with uncommitted product code" if git(str(ROOT), "status", "--porcelain", "--",
                                                   "custody_app", "store") else "")
        + f". Ledger: {kinds(path)}; built by this checkout's builder running on the old code "
        f"(so the old verify can open it), then a copy upgraded by the new code for its runs. "
        f"Measured {began} UTC, "
        f"{a.rounds} rounds interleaved (old, new, new --deep), best of the rounds, worker "
        f"process CPU time. Load (1-minute average, 2 shared cores): {start} at the start, "
        f"{end} at the end; {note}.", "",
        "| run | events | best wall (s) | best CPU (s) | CPU µs/event | CPU ratio to old | "
        "CPU of each round (s) |",
        "|---|---|---|---|---|---|---|", *rows, ""])
    print(text)
    out = Path(a.out)
    old = out.read_text() if out.exists() else ""
    if SECTION in old:
        head, _, rest = old.partition(SECTION)
        tail = rest[rest.find("\n## "):] if "\n## " in rest else ""
        old = head.rstrip("\n") + "\n\n" + tail.lstrip("\n")
    out.write_text(old.rstrip("\n") + "\n\n" + text)


if __name__ == "__main__":
    main()
