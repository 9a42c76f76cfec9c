"""custody-app: governed memory for AI agents, as a hash-chained bitemporal ledger."""

from custody_app.errors import LedgerError, PolicyError
from custody_app.ledger import Ledger
from custody_app.policy import LoadedPolicy, Policy, load_policy
from custody_app.timeutil import ManualClock

__all__ = ["Ledger", "LedgerError", "LoadedPolicy", "ManualClock", "Policy", "PolicyError",
           "load_policy"]
