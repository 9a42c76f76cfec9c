"""rotate-epoch: how long a rotation takes as the key store grows, on a SQLite file and on a
PostgreSQL server (the project's test server, tests/pgserver.py), and the kill trials' counts.

    .venv/bin/python bench/bench_epoch.py [--subjects 500 2000] [--kills 30]

For each size: a ledger with one fact (and its data key) per subject, then `rotate-epoch`
three times; the median wall time of a rotation (its word index re-keying included) is
reported. Then, on the server, the kill trials of tests/epoch_crash.py (each crash point once,
then `--kills` SIGKILLs after random delays, seed 34) with their outcome counts. Seconds are
reported for context; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from custody_app.ledger.facade import Ledger  # noqa: E402
from tests import pgserver  # noqa: E402
from tests.epoch_crash import build_base, key_in, master_of, server_copier, trials  # noqa: E402

CAUSE = {"kind": "tool", "ref": "bench"}


def fill(address: str, subjects: int) -> None:
    with Ledger.open(address) as led:
        for n in range(subjects):
            led.assert_fact(f"acct:B-{n:06d}", "note", f"value {n}", actor="agent:bench",
                            cause=CAUSE, provenance="attested")


def rotations(address: str, runs: int = 3) -> float:
    took = []
    for _ in range(runs):
        with Ledger.open(address) as led:
            started = time.perf_counter()
            led.rotate_epoch()
            took.append(time.perf_counter() - started)
    return statistics.median(took)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subjects", type=int, nargs="+", default=[500, 2000])
    parser.add_argument("--kills", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        os.environ["XDG_DATA_HOME"] = str(Path(work) / "xdg")
        server = pgserver.start()
        made: list[str] = []
        try:
            for subjects in args.subjects:
                path = str(Path(work) / f"b{subjects}.db")
                fill(path, subjects)
                url = server.fresh_database()
                made.append(url)
                fill(url, subjects)
                print(f"{subjects} subjects: rotate-epoch median {rotations(path):.3f} s on "
                      f"SQLite, {rotations(url):.3f} s on the server", flush=True)
            base = server.fresh_database()
            made.append(base)
            values = build_base(base)
            old = key_in(master_of(base))
            assert old is not None
            copier = server_copier(server, base)
            result = trials(lambda name: made.append(copier(name)) or made[-1], values, old,
                            kills=args.kills, seed=34)
            print(f"server kill trials: {result}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
