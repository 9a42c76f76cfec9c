"""verify's cost per event with the checks of DESIGN 13, against the verify of the release before
(the floor, measured in the same run on the same file: the chain walk with its value
commitments and signed checkpoints, and the recall index comparison).

    .venv/bin/python bench/bench_verify.py [--sizes 100000] [--out bench/results_verify.md]

Builds each ledger through the Python API (asserts in transactions of 1,000, with
supersessions, retractions, forgets and a forget_subject), then times the floor and the full
verify alternately, `--rounds` times each, and reports the best and the ratio. No assert on
time anywhere; the machine's load is printed beside the figures.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.benchenv import machine_note  # noqa: E402
from custody_app.domain.chain import verify_chain  # noqa: E402
from custody_app.evidence.checkpoints import CheckpointAudit  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402

CAUSE = {"kind": "tool", "ref": "bench"}


def build(path: Path, events: int, seed: int = 5) -> int:
    rng = random.Random(seed)
    live: list[str] = []
    with Ledger.open(path) as led:
        while led.db.events.count() < events:
            with led.transaction():
                for i in range(1000):
                    subject = f"acct:{rng.randrange(5000)}"
                    roll = rng.random()
                    if roll < 0.1 and live:
                        led.retract(live.pop(rng.randrange(len(live))), actor="agent:b",
                                    reason="bench")
                        continue
                    r = led.assert_fact(subject, "note", {"n": i, "text": "x" * rng.randrange(200)},
                                        actor="agent:b", cause=CAUSE, provenance="attested")
                    live.append(r.fact_id)
            if rng.random() < 0.05 and live:
                led.forget(live.pop(), actor="user:dpo", reason="error")
        led.forget_subject("acct:1", actor="user:dpo", reason="subject_request")
        led.checkpoint()
        return led.db.events.count()


def floor(led: Ledger) -> bool:
    """The verify of the release before this one, step for step."""
    pem = led.keys.public_pem() if led.keys is not None else None
    with led.db.read():
        audit = CheckpointAudit(led.db.erasure.events_of_kind("checkpoint"), pem)
        report = verify_chain(led.db.events.iter_all(), None, led.values.opener, audit.check)
        problems = led.index.differences()
    return report.valid and not problems


def timed(fn: object) -> float:
    began = time.perf_counter()
    assert callable(fn)
    ok = fn()
    assert ok, "verify failed on an untampered ledger"
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results_verify.md"))
    args = parser.parse_args()
    rows = []
    loads = [Path("/proc/loadavg").read_text().split()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for size in [int(s) for s in args.sizes.split(",")]:
            path = Path(tmp) / f"v{size}.db"
            t0 = time.perf_counter()
            events = build(path, size)
            built = time.perf_counter() - t0
            with Ledger.open(path, readonly=True) as led:
                old, new = [], []
                for _ in range(args.rounds):
                    old.append(timed(lambda: floor(led)))  # noqa: B023
                    new.append(timed(lambda: led.verify().valid))  # noqa: B023
            loads.append(Path("/proc/loadavg").read_text().split()[0])
            rows.append(f"| {events:,} | {min(old):.2f} | {min(new):.2f} | "
                        f"{min(old) / events * 1e6:.1f} | {min(new) / events * 1e6:.1f} | "
                        f"{min(new) / min(old):.2f} | {built:.0f} s |")
            print(rows[-1], flush=True)
    text = "\n".join([
        "# verify with the checks of DESIGN 13, against the verify before them", "",
        f"- run: {time.strftime('%Y-%m-%d %H:%M UTC')}, `bench/bench_verify.py --sizes "
        f"{args.sizes} --rounds {args.rounds}` (best of the rounds, floor and full alternating)",
        f"- load average (1 min) at start and after each size: {', '.join(loads)} on 2 shared "
        f"cores; other load at end: {machine_note()}",
        "- floor: the chain walk (hashes, links, mirrored columns, value commitments under the "
        "subject keys, signed checkpoints) and the recall index comparison, as verify did before",
        "- full: the floor plus unknown kinds, valueless asserts, policy texts, the projection "
        "folded from the events and compared row by row, tombstones",
        "- target: full at most 2x the floor per event", "",
        "| events | floor (s) | full (s) | floor µs/event | full µs/event | full / floor | "
        "build |", "|---|---|---|---|---|---|---|", *rows, ""])
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
