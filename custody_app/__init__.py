"""custody-app: governed memory for AI agents, as a hash-chained bitemporal ledger."""

import gc
import os
import sys
from pathlib import PurePath

# Importing the package makes a few hundred thousand long-lived objects (pydantic's schemas,
# numpy, the detectors) and frees almost none: the cyclic collector ran ~140 times during it
# and found nothing, about a quarter of the import's CPU (issue 35: the start of every
# `--batch` process). It is paused for the import only, and left as the importer had it.
# Re-enabled, it would then scan every one of those objects once, all still in its youngest
# generation (~0.09 CPU-s): a process launched as the command line freezes them instead
# (gc.freeze: never scanned again). A program that imports the package keeps its own heap as
# it was: nothing of it is frozen.
_LAUNCHED = PurePath(sys.argv[0]).name == "custody-app" or any(
    (a, b) == ("-m", "custody_app") or a == "-mcustody_app"
    for a, b in zip(sys.orig_argv, [*sys.orig_argv[1:], ""], strict=True))
_collecting = gc.isenabled()
gc.disable()
try:
    if _LAUNCHED:
        # The process is the command line's, and it runs BLAS on one thread for good
        # (recall/threads.limit_process). OpenBLAS reads its count once, as numpy loads it:
        # told then, it starts no worker at all, where a worker started and limited later
        # cost ~0.1 CPU-s of every command's start (more on more cores). The variable is
        # the process's for that moment only: what the user's environment said is put back
        # at once, so nothing this process starts inherits it.
        _told = os.environ.get("OPENBLAS_NUM_THREADS")
        os.environ["OPENBLAS_NUM_THREADS"] = "1"  # recall/threads.THREADS
        try:
            import numpy  # noqa: F401
        finally:
            if _told is None:
                del os.environ["OPENBLAS_NUM_THREADS"]
            else:
                os.environ["OPENBLAS_NUM_THREADS"] = _told
            del _told
    from custody_app.domain.errors import LedgerError, PolicyError
    from custody_app.domain.policy import LoadedPolicy, Policy, load_policy
    from custody_app.domain.timeutil import ManualClock
    from custody_app.ledger.facade import Ledger
finally:
    if _collecting:
        if _LAUNCHED:
            gc.freeze()
        gc.enable()
    del _collecting

__all__ = ["Ledger", "LedgerError", "LoadedPolicy", "ManualClock", "Policy", "PolicyError",
           "load_policy"]
