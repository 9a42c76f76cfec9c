"""The kill test of background embedding, at more trials than the suite runs: a real process
writing through the API under the shipped default (minilm-l6, the worker embedding beside the
writes), SIGKILLed at a random moment (fixed seed); after each kill a writable open must find
every acknowledged fact believed and lexically findable, the worker must embed every believed
fact, and verify must pass.
    .venv/bin/python bench/bench_embed_kill.py [--trials 20] [--seed 20261206] [--out FILE]
Prints one line per trial (when it was killed, facts acknowledged, backlog at the reopen, seconds
to drain it) and a markdown summary."""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.benchenv import header, machine_note  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402
from custody_app.recall.index import INDEXED  # noqa: E402
from tests.embed_kill_child import TOPICS  # noqa: E402
from tests.test_embedding_kill import FACTS, _run_and_kill  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=20261206)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    notes = [f"load at start: {Path('/proc/loadavg').read_text().split()[:3]}", machine_note()]
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="bench-embed-kill-"))
    rows = ["| trial | killed after s | acknowledged (all trials) | backlog at reopen | drain s | "
            "lost | verify |", "|---:|---:|---:|---:|---:|---:|---|"]
    failures = 0
    try:
        path = tmp / "l.db"
        acked: list[tuple[int, str]] = []
        policy = tmp / "default.toml"
        shutil.copy(ROOT / "policies" / "default.toml", policy)
        for trial in range(args.trials):
            delay = rng.uniform(0.05, 2.5)
            acked += _run_and_kill(path, trial * FACTS, delay)
            with Ledger.open(path) as ledger:
                lost = 0
                for n, fact_id in acked:
                    fact = ledger.db.facts.get(fact_id)
                    hits = ledger.recall(TOPICS[n % len(TOPICS)], k=5, subject=f"user:{n}",
                                         strategy="lexical").results
                    lost += (fact is None or fact.status != "active"
                             or fact_id not in [h.fact.fact_id for h in hits])
                backlog = ledger.index.unembedded()
                t0 = time.perf_counter()
                drained = ledger.index.settle_embedding(600)
                spent = time.perf_counter() - t0
                with ledger.db.read():
                    believed = {f.assert_seq for s in INDEXED
                                for f in ledger.db.facts.with_status(s)}
                    vectors = {seq for seq, _ in ledger.db.recall.indexed()[1]}
                ok = (drained and vectors == believed and not ledger.index.differences()
                      and ledger.verify().valid)
            failures += (not ok) + lost
            rows.append(f"| {trial} | {delay:.2f} | {len(acked)} | {backlog} | {spent:.1f} | "
                        f"{lost} | {'valid' if ok else 'FAILED'} |")
            print(rows[-1], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    notes.append(f"load at end: {Path('/proc/loadavg').read_text().split()[:3]}")
    text = header(notes) + "\n\n" + "\n".join(rows) + f"\n\nfailures: {failures}\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
