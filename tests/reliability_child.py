"""A child process for the reliability suite: a writer appending through the Python API (it
prints each acknowledgement only after its transaction committed) or a reader.

    python tests/reliability_child.py writer LEDGER SEED [DEADLINE]
    python tests/reliability_child.py reader LEDGER SEED DEADLINE

Output lines: `ready`; `ack KIND FACT_ID EVENT_ID` per committed op; `grp REF ID ID ID` per
committed group of three asserts; `error CODE MESSAGE` per refusal; `seen EVENTS HEAD_SEQ` and
`verify VALID` from the reader; `done` at the deadline. Anything else is a crash (traceback)."""

from __future__ import annotations

import os
import random
import sys
import time

from custody_app.domain.errors import LedgerError
from custody_app.ledger.facade import Ledger

SUBJECTS = [f"acct:{n}" for n in range(40)]
PREDICATES = ("plan", "region", "note")
# Share of ops that are forgets (each waits for a truncating WAL checkpoint).
FORGET_RATE = float(os.environ.get("RELIABILITY_FORGET_RATE", "0.05"))


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def writer(path: str, seed: int, deadline: float) -> None:
    rng = random.Random(seed)
    ledger = Ledger.open(path)
    say("ready")
    live: dict[tuple[str, str], str] = {}
    n = 0
    while time.time() < deadline:
        n += 1
        subject, predicate = rng.choice(SUBJECTS), rng.choice(PREDICATES)
        value = {"v": f"{seed}-{n}", "pad": "x" * rng.randrange(0, 3000)}
        cause = {"kind": "tool", "ref": f"w{seed}-{n}"}
        roll = rng.random()
        try:
            if roll < 0.45:
                extra = {"supersedes": live[(subject, predicate)]} if (
                    subject, predicate) in live and rng.random() < 0.5 else {}
                r = ledger.assert_fact(subject, predicate, value, actor=f"agent:w{seed}",
                                       cause=cause, provenance="attested", **extra)
                live[(subject, predicate)] = r.fact_id
                say("ack", "assert", r.fact_id, r.event_id)
            elif roll < 0.75:
                ref = f"grp-{seed}-{n}"
                with ledger.transaction():
                    ids = [ledger.assert_fact(rng.choice(SUBJECTS), "note", {"g": ref, "i": i},
                                              actor=f"agent:w{seed}",
                                              cause={"kind": "tool", "ref": ref},
                                              provenance="attested").fact_id for i in range(3)]
                say("grp", ref, *ids)
            elif roll < 0.87 and live:
                key = rng.choice(sorted(live))
                r2 = ledger.retract(live.pop(key), actor="user:ops", reason="crash test")
                say("ack", "retract", r2.fact_id, r2.event_id)
            elif roll < 0.87 + FORGET_RATE and live:
                key = rng.choice(sorted(live))
                f = ledger.forget(live.pop(key), actor="user:dpo", reason="error")
                say("ack", "forget", f.fact_id, f.event_id)
            elif roll < 0.95 and roll >= 0.92:
                c = ledger.checkpoint()
                say("ack", "checkpoint", "-", c.event_id)
            else:
                a = ledger.as_of(subject=subject)
                say("read", len(a.facts))
        except LedgerError as exc:
            # Another writer may have superseded or retracted the fact meanwhile.
            live.pop((subject, predicate), None)
            say("error", exc.code, exc.message)
    ledger.close()
    say("done")


def reader(path: str, seed: int, deadline: float) -> None:
    ledger = Ledger.open(path, readonly=True)
    say("ready")
    rng = random.Random(seed)
    n = 0
    while time.time() < deadline:
        n += 1
        try:
            with ledger.db.read():
                count = ledger.db.events.count()
                head = ledger.db.events.head()
            ledger.as_of(subject=rng.choice(SUBJECTS))
            say("seen", count, head[0] if head else 0)
            if n % 25 == 0:
                report = ledger.verify()
                say("verify", report.valid, report.events, report.problem or "")
        except LedgerError as exc:
            say("error", exc.code, exc.message)
    ledger.close()
    say("done")


if __name__ == "__main__":
    mode, ledger_path, seed_text = sys.argv[1:4]
    until = float(sys.argv[4]) if len(sys.argv) > 4 else float("inf")
    (writer if mode == "writer" else reader)(ledger_path, int(seed_text), until)
