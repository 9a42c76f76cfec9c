"""A child for the erasure crash trials: one acknowledged write, then one erasure.

    python tests/erasure_crash_child.py KIND LEDGER

KIND is forget, forget_subject, sweep or reindex. Prints `ack FACT_ID` once its write
committed, `go` just before the erasure, `done SECONDS` as soon as it returned (its own
duration); $CUSTODY_FAULT may kill it on the way, and so may $CRASH_KILL_AFTER: a timer
thread, started as the erasure begins, SIGKILLs the process that many seconds later (no second
process to schedule, so the instant lands where it was drawn). A kill with `go` printed and no
`done` landed mid-erasure."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from custody_app.ledger.facade import Ledger
from tests.erasure_crash import FORGET_ROOT, OLD_SPACE, SUBJECT, meta


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def kill_after(seconds: float) -> None:
    time.sleep(seconds)
    os.kill(os.getpid(), signal.SIGKILL)


def main(kind: str, path: str) -> None:
    ledger = Ledger.open(path)
    written = ledger.assert_fact("acct:ACKED-0001", "note", {"n": "acknowledged write"},
                                 actor="agent:crash", cause={"kind": "tool", "ref": "ack"},
                                 provenance="attested")
    say("ack", written.fact_id)
    say("go")
    began = time.perf_counter()
    if os.environ.get("CRASH_KILL_AFTER"):
        threading.Thread(target=kill_after, args=(float(os.environ["CRASH_KILL_AFTER"]),),
                         daemon=True).start()
    if kind == "forget":
        ledger.forget(meta(path)[FORGET_ROOT], actor="user:dpo", reason="error")
    elif kind == "forget_subject":
        ledger.forget_subject(SUBJECT, actor="user:dpo", reason="subject_request")
    elif kind == "sweep":
        ledger.sweep(before=written.tx_at, space=OLD_SPACE, actor="user:dpo", reason="retention")
    else:
        ledger.reindex()
    say("done", f"{time.perf_counter() - began:.6f}")
    ledger.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
