"""A test-only fault hook: $CUSTODY_FAULT names a commit boundary at which the process kills
itself (SIGKILL), so crash trials can stop an erasure exactly there."""

from __future__ import annotations

import os
import signal

FAULT_ENV = "CUSTODY_FAULT"

# The named points, in the order an erasure passes them.
POINTS = (
    "erasure.before_commit",     # every event appended, the ledger transaction not committed
    "tx.keys_committed",         # a write's key store committed, its ledger not yet
    "erasure.ledger_committed",  # the ledger committed; key store and checkpoint not done
    "erasure.keys_committed",    # forget_subject: the key store destruction committed too
    "erasure.checkpointed",      # the truncating WAL checkpoint done, before the certificate
    "reindex.before_commit",     # recall indexes rebuilt, their transaction not committed
)


def crash_point(name: str) -> None:
    """Kill this process here when $CUSTODY_FAULT names this point (never otherwise)."""
    if os.environ.get(FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
