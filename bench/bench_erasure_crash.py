"""Erasure crash trials (issue 13): forget, forget_subject, sweep and reindex, each SIGKILLed at
every named commit boundary and at `--kills` random instants, on its own copy of a base ledger.

    .venv/bin/python bench/bench_erasure_crash.py [--kills 50] [--out bench/results_reliability.md]

After each kill the ledger is opened read-write (which rolls an unfinished erasure forward) and
checked: `verify` valid, projection == rebuild, the acknowledged write made before the erasure
present, and the erasure either whole (every fact it touches erased, tombstone and key
destruction for a subject) or absent (every fact kept with its value). The random instants
are uniform over 1.2 times the erasure's own measured duration, so some land after it ended.
Writes the table into its own section of `--out` (the rest of the file is kept).
"""

from __future__ import annotations

import argparse
import statistics
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
from tests.erasure_crash import KINDS, POINTS, build_base, copy_base, random_delays, run_child, trial  # noqa: E402

START = "<!-- erasure-crash-trials -->"
END = "<!-- /erasure-crash-trials -->"


def duration(kind: str, base: Path, work: Path) -> float:
    """Median seconds from the child's `go` to its exit, unkilled (3 runs)."""
    times = []
    for n in range(3):
        target = work / f"time-{kind}-{n}.db"
        copy_base(base, target)
        times.append(run_child(kind, target)[2])
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results_reliability.md"))
    args = parser.parse_args()
    load_start = Path("/proc/loadavg").read_text().split()[:3]
    rows = []
    began = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = work / "base.db"
        build_base(base)
        for kind in KINDS:
            t0 = time.time()
            longest = 1.2 * duration(kind, base, work)
            trials = [trial(kind, base, work, n, point=p) for n, p in enumerate(POINTS[kind])]
            trials += [trial(kind, base, work, 100 + n, delay=d) for n, d in
                       enumerate(random_delays(args.kills, longest, seed=13))]
            outcomes = Counter(t.outcome for t in trials)
            bad = [t for t in trials if t.outcome not in ("whole", "none") or not t.acked]
            killed = sum(t.killed for t in trials)
            rows.append(
                f"| {kind} | {len(trials)} ({len(POINTS[kind])} named points + {args.kills} "
                f"random within {longest * 1000:.0f} ms) | {killed} | "
                f"whole {outcomes['whole']}, none {outcomes['none']} | "
                f"{sum(t.acked for t in trials)}/{len(trials)} | "
                f"{'none' if not bad else '; '.join(t.outcome for t in bad[:3])} | "
                f"{time.time() - t0:.0f} s |")
            print(rows[-1], flush=True)
    load_end = Path("/proc/loadavg").read_text().split()[:3]
    section = "\n".join([
        START, "", "## Erasure crash trials (all or nothing across key store and ledger)", "",
        f"- run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(began))}, "
        f"`bench/bench_erasure_crash.py --kills {args.kills}`",
        f"- load average at start {' '.join(load_start)}, at end {' '.join(load_end)} "
        f"(2 cores, shared); other load at end: {machine_note()}",
        "- a trial whose random instant fell after the child exited is counted as not killed",
        "", "| erasure | trials | killed | after reopen | acknowledged write kept | problems | time |",
        "|---|---|---|---|---|---|---|", *rows, "", END])
    out = Path(args.out)
    text = out.read_text() if out.exists() else ""
    if START in text and END in text:
        text = text[:text.index(START)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    out.write_text(text)


if __name__ == "__main__":
    main()
