"""custody-app: governed memory for AI agents, as a hash-chained bitemporal ledger."""

import gc

# Importing the package makes a few hundred thousand long-lived objects (pydantic's schemas,
# numpy, the detectors) and frees almost none: the cyclic collector ran ~140 times during it
# and found nothing, about a quarter of the import's CPU (issue 35: the start of every
# `--batch` process). It is paused for the import only, and left as the importer had it.
_collecting = gc.isenabled()
gc.disable()
try:
    from custody_app.domain.errors import LedgerError, PolicyError
    from custody_app.domain.policy import LoadedPolicy, Policy, load_policy
    from custody_app.domain.timeutil import ManualClock
    from custody_app.ledger.facade import Ledger
finally:
    if _collecting:
        gc.enable()
    del _collecting

__all__ = ["Ledger", "LedgerError", "LoadedPolicy", "ManualClock", "Policy", "PolicyError",
           "load_policy"]
