"""A child for the erasure crash trials: one acknowledged write, then one erasure.

    python tests/erasure_crash_child.py KIND LEDGER

KIND is forget, forget_subject, sweep or reindex. Prints `ack FACT_ID` once its write
committed, `go` just before the erasure, `done` after it; $CUSTODY_FAULT may kill it on the way."""

from __future__ import annotations

import sys

from custody_app.ledger.facade import Ledger
from tests.erasure_crash import FORGET_ROOT, OLD_SPACE, SUBJECT, meta


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def main(kind: str, path: str) -> None:
    ledger = Ledger.open(path)
    written = ledger.assert_fact("acct:ACKED-0001", "note", {"n": "acknowledged write"},
                                 actor="agent:crash", cause={"kind": "tool", "ref": "ack"},
                                 provenance="attested")
    say("ack", written.fact_id)
    say("go")
    if kind == "forget":
        ledger.forget(meta(path)[FORGET_ROOT], actor="user:dpo", reason="error")
    elif kind == "forget_subject":
        ledger.forget_subject(SUBJECT, actor="user:dpo", reason="subject_request")
    elif kind == "sweep":
        ledger.sweep(before=written.tx_at, space=OLD_SPACE, actor="user:dpo", reason="retention")
    else:
        ledger.reindex()
    say("done")
    ledger.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
