"""The product's own ingest CPU for two or more trees of the code, paired (issue 35): the
corpus of `bench_contract_floor.py` through `run_batch` in process, no floor. The contract
floor follows the code (a statement the code stops issuing leaves it too), so a change that
removes statements moves both sides of that bench's ratio; this one compares the product alone.

    .venv/bin/python bench/ingest_pair.py --tree OLD_TREE --tree NEW_TREE --tmp DIR [--ops 10000] [--rounds 6]

Each run is a subprocess with the tree first on its import path (its modules compiled first,
as an installed package's are), on a new ledger in DIR; CPU is that process's
`time.process_time()` around `run_batch` only (every thread of it; the ledger's open, the
corpus and the final wait for background work are outside). Trees are taken in turn, their
order reversed every other round; the table gives the median and minimum over the rounds, and
the ratio of each tree's median to the first tree's. No thread variable is set.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.benchenv import emit, header, machine_note  # noqa: E402

CHILD = r"""
import os, shutil, sys, tempfile, time
from datetime import UTC, datetime
from pathlib import Path
tree, tmp, ops, bench = sys.argv[1:5]
sys.path[:0] = [tree, bench]
import bench_contract_floor as F
import bench_ledger as B
from custody_app.interfaces.batch import run_batch
from custody_app.ledger.facade import Ledger
import custody_app
assert Path(custody_app.__file__).resolve().is_relative_to(Path(tree).resolve()), custody_app.__file__
work = Path(tempfile.mkdtemp(dir=tmp))
try:
    corpus = work / "corpus.jsonl"
    corpus.write_text(F.corpus(B.make_workload(int(ops), 20260907, datetime(2026, 1, 5, tzinfo=UTC))),
                      encoding="utf-8")
    ledger = Ledger.open(work / "ledger.db")
    with ledger, open(corpus, encoding="utf-8") as stream, open(os.devnull, "w") as sink:
        start = time.process_time()
        run_batch(ledger, stream, sink)
        print(time.process_time() - start)
        ledger.index.maintenance.join()
finally:
    shutil.rmtree(work)
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in args.tree]
    for tree in trees:
        compileall.compile_dir(tree, quiet=1, rx=__import__("re").compile(r"/(\.|tests)"))
    notes = [f"load at start: {os.getloadavg()[0]:.2f}; {machine_note()}"]
    cpu: dict[str, list[float]] = {t: [] for t in trees}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for n in range(args.rounds):
        for tree in trees if n % 2 == 0 else trees[::-1]:
            done = subprocess.run([sys.executable, "-c", CHILD, tree, args.tmp, str(args.ops),
                                   str(ROOT / "bench")], capture_output=True, text=True,
                                  cwd=args.tmp, env=env, check=False)
            if done.returncode != 0:
                sys.stderr.write(done.stderr)
                return 1
            cpu[tree].append(float(done.stdout.split()[-1]))
    notes.append(f"load at end: {os.getloadavg()[0]:.2f}; {machine_note()}")
    first = statistics.median(cpu[trees[0]])
    lines = [f"### {args.ops:,} ops through run_batch in process, {args.rounds} rounds", "",
             header(notes), "",
             "| tree | CPU s, median | min | each round | median against the first tree |",
             "|---|---:|---:|---|---:|"]
    for tree in trees:
        runs = cpu[tree]
        commit = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=False).stdout.strip()
        lines.append(f"| {tree} ({commit or 'no git'}) | {statistics.median(runs):.3f} | {min(runs):.3f} | "
                     f"{', '.join(f'{r:.2f}' for r in runs)} | "
                     f"{statistics.median(runs) / first:.3f} |")
    emit("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
