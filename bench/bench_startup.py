"""A command's start (issue 35): the CPU and wall time of a process launched as the command
line that does almost nothing, for one or more trees of the code, in alternating rounds.

    .venv/bin/python bench/bench_startup.py --tree OLD_TREE --tree . [--runs 15] [--out FILE]

Two commands, each a real subprocess (`python -m custody_app`, with PYTHONPATH set to the tree,
as the console script runs: the package sees itself launched as the command line):
- `--help`: the import and the argument parser, nothing opened;
- `--batch EMPTY --create`: a new ledger and key store made, an empty batch run, closed.
Each tree's modules are compiled first, as an installed package's are (this machine sets
PYTHONDONTWRITEBYTECODE, so without that every run would compile them again). CPU is user +
system time of the finished child (every thread of it, from wait4); the table gives the
minimum, median and maximum over `--runs` rounds, trees taken in turn within each round. Also
printed: the native threads the process had right after the import (OpenBLAS's workers are
the ones the launch avoids starting). No thread variable is set.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.benchenv import header, machine_note  # noqa: E402

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "GOTO_NUM_THREADS", "BLIS_NUM_THREADS")
# Right after the import, in a process launched as `python -m custody_app` would be.
THREADS_PROBE = ("import os, sys\n"
                 "sys.orig_argv[:] = [sys.executable, '-m', 'custody_app']\n"
                 "import custody_app\n"
                 "print(len(os.listdir('/proc/self/task')))\n")


def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env["PYTHONPATH"] = str(tree)
    return env


def run_once(tree: Path, args: list[str], where: Path) -> tuple[float, float]:
    """(CPU s, wall s) of one `python -m custody_app ARGS` run from `tree`, in the folder
    `where` (not a checkout: `-m` and `-c` put the working folder first on the import path)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "custody_app", *args], env=_env(tree),
                            cwd=where, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: custody-app {' '.join(args)} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, wall


def threads_after_import(tree: Path, where: Path) -> int:
    out = subprocess.run([sys.executable, "-c", THREADS_PROBE], env=_env(tree), cwd=where,
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, help="a checkout (repeatable)")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    trees = [Path(t).resolve() for t in args.tree]
    for tree in trees:
        for part in ("custody_app", "store"):
            compileall.compile_dir(tree / part, quiet=1)
    tmp = Path(tempfile.mkdtemp(prefix="custody-startup-"))
    try:
        empty = tmp / "empty.jsonl"
        empty.write_text("")
        commands = {"--help": lambda n: ["--help"],
                    "--batch EMPTY --create": lambda n: [str(tmp / f"l{n}.db"), "--batch",
                                                         str(empty), "--create"]}
        cpu: dict[tuple[str, Path], list[float]] = {}
        wall: dict[tuple[str, Path], list[float]] = {}
        load0, note0 = os.getloadavg()[0], machine_note()
        n = 0
        for tree in trees:  # a warm-up of each, not counted
            for make in commands.values():
                n += 1
                run_once(tree, make(n), tmp)
        for _ in range(args.runs):
            for name, make in commands.items():
                for tree in trees:
                    n += 1
                    c, w = run_once(tree, make(n), tmp)
                    cpu.setdefault((name, tree), []).append(c)
                    wall.setdefault((name, tree), []).append(w)
        threads = {tree: threads_after_import(tree, tmp) for tree in trees}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def trio(xs: list[float]) -> str:
        return f"{min(xs):.3f} / {statistics.median(xs):.3f} / {max(xs):.3f}"

    def label(tree: Path) -> str:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree,
                             capture_output=True, text=True).stdout.strip()
        return f"`{tree.name}` ({sha or '?'})"

    lines = [f"### A command's start: {args.runs} rounds, trees in turn", "",
             header([f"load at start: {load0:.2f}; {note0}",
                     f"load at end: {os.getloadavg()[0]:.2f}; {machine_note()}"]), "",
             "| command | tree | CPU s (min / median / max) | wall s (min / median / max) "
             "| native threads after the import |", "|---|---|---|---|---:|"]
    for name in commands:
        for tree in trees:
            lines.append(f"| `custody-app {name}` | {label(tree)} | {trio(cpu[(name, tree)])} "
                         f"| {trio(wall[(name, tree)])} | {threads[tree]} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write("\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
