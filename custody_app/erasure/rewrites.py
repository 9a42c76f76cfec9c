"""The file rewrite after residue, made durable before it starts: the erasure records "rewrite
due" in the ledger (committed), then VACUUMs and checkpoints. A process killed before, during or
after the VACUUM leaves that record (and the erasure's pending rows), so the next read-write open
or pending-erasure retry rewrites the file and clears both once the checkpoint completed."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from custody_app.core.faults import FAULT_ENV, crash_point
from store import file_size
from store.errors import StoreError
from store.rows import RewriteOutcome

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore

REWRITE_PLACE = "file rewrite (VACUUM, then a TRUNCATE checkpoint)"


def rewrite(ledger: LedgerCore, why: str) -> RewriteOutcome:
    """Record the rewrite as due (its own committed transaction), then rewrite the file. The
    record is cleared with the pending rows, once the erasure is complete (`Scrubs.clear`)."""
    try:
        with ledger.db.write():
            ledger.db.erasure.set_rewrite_due(ledger.now(), why)
    except StoreError as exc:
        # Another writer holds the ledger, or the disk is full: not started; the erasure's
        # pending rows stay, so it is tried again (and another process would rewrite).
        size = file_size(ledger.db.path)
        return RewriteOutcome(False, size, size, f"not done ({exc}); it is tried again when the "
                              "pending erasure is finished")
    crash_point("erasure.rewrite_due")
    # The crash trials' hooks: a kill while the VACUUM runs, and between it and the checkpoint.
    trial = bool(os.environ.get(FAULT_ENV))
    done = ledger.db.rewrite(
        during=(lambda: crash_point("erasure.vacuuming")) if trial else None,
        vacuumed=(lambda: crash_point("erasure.vacuumed")) if trial else None)
    crash_point("erasure.rewritten")
    return done
