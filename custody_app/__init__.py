"""custody-app: governed memory for AI agents, as a hash-chained bitemporal ledger."""

import gc
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
