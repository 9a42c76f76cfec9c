"""A child process of tests/test_pg_many_writers.py: a writer or a reader on one server ledger.

    python tests/pg_many_writers_child.py writer URL SEED SECONDS RECORD
    python tests/pg_many_writers_child.py reader URL SEED SECONDS RECORD

A writer asserts, supersedes and retracts facts of its own subjects through `Ledger.open(url)`
and appends one line to RECORD for each acknowledged write, only after `Ledger` returned (so
after its COMMIT): `ack OP FACT_ID SEQ TX_AT`. A reader reads history, as_of and beliefs in a
loop and writes `read N` at the end. Both write `busy SECONDS MESSAGE` for a busy refusal (`ledger_busy`)
(with how long the call waited) and `error CODE MESSAGE` for any other refusal or exception,
then `done`. The record file is line-buffered and flushed per line: a SIGKILL loses no line
of a write that was acknowledged."""

from __future__ import annotations

import random
import sys
import time
import traceback
from typing import Any, TextIO

from custody_app.domain.errors import LedgerError
from custody_app.ledger.facade import Ledger
from store.errors import StoreBusy

BUSY = StoreBusy.code  # what a StoreBusy is called above store/ (`ledger_busy`)

PREDICATES = ("plan", "region", "note")


def line(out: TextIO, *parts: object) -> None:
    out.write(" ".join(str(p) for p in parts) + "\n")
    out.flush()


def writer(ledger: Ledger, seed: int, deadline: float, out: TextIO) -> None:
    rng = random.Random(seed)
    actor = f"agent:w{seed}"
    live: list[tuple[str, str, str]] = []  # this writer's active facts: (id, subject, predicate)
    n = 0
    while time.time() < deadline:
        n += 1
        roll = rng.random()
        started = time.monotonic()
        try:
            if roll < 0.6 or not live:
                subject, predicate = f"acct:w{seed}-{rng.randrange(30)}", rng.choice(PREDICATES)
                r: Any = ledger.assert_fact(
                    subject, predicate, {"v": f"{seed}-{n}", "pad": "x" * rng.randrange(200)},
                    actor=actor, cause={"kind": "tool", "ref": f"w{seed}-{n}"},
                    provenance="attested")
                live.append((r.fact_id, subject, predicate))
                line(out, "ack", "assert", r.fact_id, r.seq, r.tx_at)
            elif roll < 0.85:
                old, subject, predicate = live.pop(rng.randrange(len(live)))
                r = ledger.assert_fact(
                    subject, predicate, {"v": f"{seed}-{n}", "re": old},
                    actor=actor, cause={"kind": "tool", "ref": f"w{seed}-{n}"},
                    provenance="attested", supersedes=old)
                live.append((r.fact_id, subject, predicate))
                line(out, "ack", "supersede", r.fact_id, r.seq, r.tx_at)
            else:
                old = live.pop(rng.randrange(len(live)))[0]
                r = ledger.retract(old, actor=actor, reason=f"w{seed}-{n}")
                line(out, "ack", "retract", r.fact_id, r.seq, r.tx_at)
        except LedgerError as exc:
            if exc.code == BUSY:
                line(out, "busy", f"{time.monotonic() - started:.3f}", str(exc).replace("\n", " "))
            else:
                line(out, "error", exc.code, str(exc).replace("\n", " "))


def reader(ledger: Ledger, seed: int, deadline: float, out: TextIO) -> None:
    rng = random.Random(seed)
    reads = 0
    while time.time() < deadline:
        started = time.monotonic()
        try:
            subject = f"acct:w{rng.randrange(4)}-{rng.randrange(30)}"
            found = ledger.as_of(subject=subject)
            for fact in found.facts[:3]:
                ledger.history(fact.fact_id)
            ledger.beliefs(subject=subject)
            reads += 1
        except LedgerError as exc:
            if exc.code == BUSY:
                line(out, "busy", f"{time.monotonic() - started:.3f}", str(exc).replace("\n", " "))
            else:
                line(out, "error", exc.code, str(exc).replace("\n", " "))
    line(out, "read", reads)


def main() -> None:
    role, url, seed, seconds, record = sys.argv[1:6]
    with open(record, "a", buffering=1, encoding="utf-8") as out:
        try:
            ledger = Ledger.open(url, id_seed=int(seed))
            deadline = time.time() + float(seconds)
            (writer if role == "writer" else reader)(ledger, int(seed), deadline, out)
            ledger.close()
        except BaseException:
            line(out, "error", "exception", traceback.format_exc().replace("\n", " | "))
            raise
        line(out, "done")


if __name__ == "__main__":
    main()
