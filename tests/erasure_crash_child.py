"""A child for the erasure crash trials: one acknowledged write, then one erasure.

    python tests/erasure_crash_child.py KIND LEDGER

KIND is forget, forget_subject, sweep or reindex. Prints `ack FACT_ID` once its write
committed, `go` just before the erasure, `done SECONDS` as soon as it returned (its own
duration); $CUSTODY_FAULT may kill it on the way, and so may $CRASH_KILL_AFTER: a timer
thread, started as the erasure begins, SIGKILLs the process that many seconds later (no second
process to schedule, so the instant lands where it was drawn). A kill with `go` printed and no
`done` landed mid-erasure.

    python tests/erasure_crash_child.py serve

forks a child per trial instead (the server kill trials: dozens of trials, and each child
otherwise spends most of its second importing): it reads one JSON request a line on stdin
({kind, path, fault, inside}), forks a child that sets the request's $CUSTODY_FAULT and
$CRASH_KILL_AFTER and runs KIND on PATH as above (its stdout and stderr into a pipe), waits for
it and answers one JSON line: {rc (negative: the signal that ended it), lines}. This process
itself opens no ledger and starts no thread, so each child starts clean."""

from __future__ import annotations

import json
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


def serve() -> None:
    for request in sys.stdin:
        asked = json.loads(request)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the trial's child
            os.close(read)
            os.dup2(write, 1)
            os.dup2(write, 2)
            os.environ.pop("CUSTODY_FAULT", None)
            os.environ.pop("CRASH_KILL_AFTER", None)
            if asked.get("fault"):
                os.environ["CUSTODY_FAULT"] = asked["fault"]
            if asked.get("inside") is not None:
                os.environ["CRASH_KILL_AFTER"] = f"{asked['inside']:.6f}"
            code = 0
            try:
                main(asked["kind"], asked["path"])
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        os.close(write)
        with os.fdopen(read, "r", encoding="utf-8", errors="replace") as out:
            text = out.read()
        _, status = os.waitpid(pid, 0)
        rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        sys.stdout.write(json.dumps({"rc": rc, "lines": text.splitlines()}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        main(sys.argv[1], sys.argv[2])
