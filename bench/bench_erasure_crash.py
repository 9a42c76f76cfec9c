"""Erasure crash trials (issue 13): forget, forget_subject, sweep and reindex, each SIGKILLed at
every named commit boundary and at random instants inside the erasure, on its own copy of a
base ledger.

    .venv/bin/python bench/bench_erasure_crash.py [--kills 50] [--out bench/results_reliability.md]

Each kind's window is measured first on copies of the same base: the median of the erasure's
own duration (the child times the call, from its `go` line to its return) over 3 unkilled runs.
Random delays are drawn uniformly inside that window; a timer thread the child starts as the
erasure begins SIGKILLs it after the delay (kills sent by this process after reading `go`
arrived late: in a trial run 7 of 12 landed after the erasure had returned). A kill lands mid-erasure when the child had printed `go` and not yet `done`. Random
trials continue until `--kills` of them landed mid-erasure (at most `--max-trials`); those that
landed after are reported and not counted. After each kill the ledger is opened read-write
(which rolls an unfinished erasure forward) and checked: `verify` valid, projection ==
rebuild, the acknowledged write made before the erasure present, and the erasure either whole
(every fact it touches erased, tombstone and key destruction for a subject) or absent (every
fact kept with its value). Writes the table into its own section of `--out` (the rest of the
file is kept).
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench.benchenv import machine_note  # noqa: E402
from tests.erasure_crash import (  # noqa: E402
    KINDS,
    POINTS,
    Trial,
    build_base,
    copy_base,
    erasure_seconds,
    run_child,
    trial,
)

START = "<!-- erasure-crash-trials -->"
END = "<!-- /erasure-crash-trials -->"


def window(kind: str, base: Path, work: Path) -> float:
    """Median seconds the erasure itself takes, unkilled, as the child timed it (3 runs)."""
    times = []
    for n in range(3):
        target = work / f"time-{kind}-{n}.db"
        copy_base(base, target)
        seconds = erasure_seconds(run_child(kind, target)[1])
        assert seconds is not None, f"{kind} did not finish when nobody killed it"
        times.append(seconds)
    return statistics.median(times)


def row(kind: str, span: float, named: list[Trial], randoms: list[Trial], took: float) -> str:
    where = Counter(t.landed for t in randoms)
    mid = [t for t in named + randoms if t.landed == "mid"]
    outcomes = Counter(t.outcome for t in mid)
    trials = named + randoms
    bad = [t for t in trials if t.outcome not in ("whole", "none") or not t.acked
           or (t.landed == "after" and t.outcome != "whole")]
    return (f"| {kind} | {span * 1000:.0f} ms | {sum(t.landed == 'mid' for t in named)}/"
            f"{len(named)} | {len(randoms)} | {where['mid']} | {where['before']} | "
            f"{where['after']} | whole {outcomes['whole']}, none {outcomes['none']} | "
            f"{sum(t.acked for t in trials)}/{len(trials)} | "
            f"{'none' if not bad else '; '.join(t.outcome for t in bad[:3])} | {took:.0f} s |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--max-trials", type=int, default=100,
                        help="random trials per kind at most, whatever landed")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results_reliability.md"))
    args = parser.parse_args()
    load_start = Path("/proc/loadavg").read_text().split()[:3]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    rows = []
    began = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = work / "base.db"
        build_base(base)
        for number, kind in enumerate(KINDS):
            t0 = time.time()
            span = window(kind, base, work)
            named = [trial(kind, base, work, n, point=p) for n, p in enumerate(POINTS[kind])]
            rng = random.Random(13 + number)
            randoms: list[Trial] = []
            while (sum(t.landed == "mid" for t in randoms) < args.kills
                   and len(randoms) < args.max_trials):
                randoms.append(trial(kind, base, work, 100 + len(randoms),
                                     inside=rng.uniform(0, span)))
            rows.append(row(kind, span, named, randoms, time.time() - t0))
            print(rows[-1], flush=True)
    load_end = Path("/proc/loadavg").read_text().split()[:3]
    section = "\n".join([
        START, "", "## Erasure crash trials (all or nothing across key store and ledger)", "",
        f"- run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(began))}, "
        f"`bench/bench_erasure_crash.py --kills {args.kills} --max-trials {args.max_trials}`",
        f"- commit: {commit}",
        f"- load average at start {' '.join(load_start)}, at end {' '.join(load_end)} "
        f"(2 cores, shared); other load at end: {machine_note()}",
        "- window: the median of the erasure's own duration over 3 unkilled runs on the same "
        "base; random delays uniform in [0, window], counted by a timer thread the child starts "
        "as the erasure begins, which then SIGKILLs its own process",
        "- landed mid: killed after the child printed `go` and before it printed `done` (the "
        "erasure call begun, not returned); after: `done` printed first, not counted toward "
        f"the {args.kills}; before: killed before `go`",
        "- after reopen: the state the next read-write open showed for the mid-erasure kills "
        "(whole: rolled forward or already complete; none: nothing of it); every trial, "
        "whatever it landed, also had verify valid and projection equal to the fold",
        "", "| erasure | window | named points: mid / points | random trials | landed mid | "
        "before | after | mid kills after reopen | acknowledged write kept | problems | time |",
        "|---|---|---|---|---|---|---|---|---|---|---|", *rows, "", END])
    out = Path(args.out)
    text = out.read_text() if out.exists() else ""
    if START in text and END in text:
        text = text[:text.index(START)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    out.write_text(text)


if __name__ == "__main__":
    main()
