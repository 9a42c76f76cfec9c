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
    "rekey.keys_retired",        # a re-key's old generations destroyed, its ledger intent kept
    "erasure.checkpointed",      # the truncating WAL checkpoint done, before the certificate
    "erasure.rewrite_due",       # residue found: "rewrite due" committed, VACUUM not started
    "erasure.vacuuming",         # inside the VACUUM (`#N`: its N-th progress call)
    "erasure.vacuumed",          # the VACUUM done, its TRUNCATE checkpoint not
    "erasure.rewritten",         # residue found: the file rewritten (VACUUM), before the re-scan
    "reindex.before_commit",     # recall indexes rebuilt, their transaction not committed
    "upgrade.before_commit",     # free text sealed and bodies rewritten, not committed
    "upgrade.committed",         # the free-text upgrade committed, its WAL checkpoint not done
    "copy.loading",              # copy: a batch of rows loaded into the destination (`#N`: the N-th)
    "copy.indexed",              # copy: every row and key loaded, indexes rebuilt, not marked done
    "epoch.next_written",        # rotate-epoch: `<master file>.next` written, key store not yet
    "epoch.before_commit",       # every key re-wrapped under the new epoch, not committed
    "epoch.keys_committed",      # the key store committed under the new epoch, `.next` not renamed
    "epoch.zeroed",              # the old master file overwritten with zeroes, `.next` not renamed
    "epoch.promoted",            # `.next` renamed over the master file
)


_passes: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Kill this process here when $CUSTODY_FAULT names this point (`NAME`: its first pass,
    `NAME#N`: its N-th), never otherwise."""
    wanted = os.environ.get(FAULT_ENV)
    if not wanted or not wanted.startswith(name):
        return
    point, _, nth = wanted.partition("#")
    if point != name:
        return
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] == (int(nth) if nth.isdigit() else 1):
        os.kill(os.getpid(), signal.SIGKILL)
