"""The BLAS thread count custody-app runs numpy under: one (issue 35).

numpy's OpenBLAS starts a worker per core and, after each matrix product large enough to split,
those workers spin waiting for the next one. Beside a writer that does a little BLAS work per
write (the cells of each index flush, k-means in the re-clustering, an embedder's products) the
spinning worker burned about as much CPU as the main thread from ~20k facts on, doubling ingest
CPU, while our products are too small to gain from a second thread. So custody-app sets the
limit itself rather than asking its users to export OPENBLAS_NUM_THREADS.

Scope, chosen: the console script (CLI, `--batch`, the terminal app, the MCP server) owns its
process and limits it for good (`limit_process`). A library user's process is not ours, so
there the limit is held while a `Ledger` is open (`hold`, taken by `Ledger.open`, given back at
its `close`; counted, so several open ledgers hold it once and the last close restores the
count the process had before). Not per call: OpenBLAS's count is one setting for the whole
process (there is no per-thread count), and the re-clustering and embedding threads run BLAS
work at moments the caller never sees, so a per-call limit would still change the user's
concurrent numpy, only at unpredictable moments, and any path left unwrapped would bring the
spinning back. A library user who wants BLAS threads for their own work while a ledger is open
wraps it in `threadpoolctl.threadpool_limits(n)`.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy  # noqa: F401 - loaded first, so its BLAS library is the one threadpoolctl finds
import threadpoolctl
from threadpoolctl import ThreadpoolController

THREADS = 1

_lock = threading.Lock()
_holders = 0
_limiter: Any = None  # threadpoolctl's limiter (its class is private)
_controller: ThreadpoolController | None = None
_process: Hold | None = None


class Hold:
    """One holder of the limit; `release` gives it back (once; later calls do nothing)."""

    def __init__(self) -> None:
        self._held = True

    def release(self) -> None:
        global _holders, _limiter
        with _lock:
            if not self._held:
                return
            self._held = False
            _holders -= 1
            if _holders == 0 and _limiter is not None:
                _limiter.restore_original_limits()
                _limiter = None
                _let_go()


def hold() -> Hold:
    """Limit BLAS to THREADS until the returned hold (and every other) is released."""
    global _holders, _limiter, _controller
    with _lock:
        if _holders == 0:
            if _controller is None:  # scans the loaded libraries once (about a millisecond)
                _controller = ThreadpoolController()
            _limiter = _controller.limit(limits=THREADS, user_api="blas")
            _let_go()
        _holders += 1
        return Hold()


def limit_process() -> None:
    """Limit BLAS to THREADS for the rest of the process (an entry point that owns it)."""
    global _process
    if _process is None:
        _process = hold()


def _let_go() -> None:
    """threadpoolctl 3.8 lets one thread at a time set OpenBLAS's count (the first to set it,
    until it lets go; the others are silently ignored): let go after each change, so the thread
    that closes the ledger (or a user's own `threadpool_limits`) is not ignored later."""
    controller = getattr(threadpoolctl, "OpenBLASController", None)
    clear = getattr(controller, "clear_controlling_thread", None)
    if clear is not None:
        clear()  # only when this thread holds it
