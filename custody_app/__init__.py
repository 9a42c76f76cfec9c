"""custody-app: governed memory for AI agents, as a hash-chained bitemporal ledger."""

from custody_app.domain.errors import LedgerError, PolicyError
from custody_app.domain.policy import LoadedPolicy, Policy, load_policy
from custody_app.domain.timeutil import ManualClock
from custody_app.ledger.facade import Ledger

__all__ = ["Ledger", "LedgerError", "LoadedPolicy", "ManualClock", "Policy", "PolicyError",
           "load_policy"]
