"""A child for the rotate-epoch kill trials: opens the ledger, rotates the epoch key, prints
`done SECONDS`.

    python -m tests.epoch_crash_child LEDGER [FAULT] [KILL_AFTER]

FAULT (a named crash point, `NAME#N`) is armed only after the open, so its count starts at the
rotation; KILL_AFTER: a timer thread started as the rotation begins SIGKILLs the process that
many seconds later."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from custody_app.core.faults import FAULT_ENV
from custody_app.ledger.facade import Ledger


def kill_after(seconds: float) -> None:
    time.sleep(seconds)
    os.kill(os.getpid(), signal.SIGKILL)


def main(path: str, fault: str, kill: str) -> None:
    ledger = Ledger.open(path)
    if fault:
        os.environ[FAULT_ENV] = fault
    began = time.perf_counter()
    if kill:
        threading.Thread(target=kill_after, args=(float(kill),), daemon=True).start()
    ledger.rotate_epoch()
    sys.stdout.write(f"done {time.perf_counter() - began:.6f}\n")
    sys.stdout.flush()
    ledger.close()


if __name__ == "__main__":
    args = sys.argv[1:] + ["", ""]
    main(args[0], args[1], args[2])
