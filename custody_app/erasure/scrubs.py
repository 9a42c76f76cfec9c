"""Scrubs a reader left pending: an erasure whose truncating WAL checkpoint was blocked keeps a
pending row (written with the erasure, so a crash cannot lose it) until a later checkpoint
completes; then its certificate is issued again with the checkpoint and byte scans redone. A
file rewrite recorded as due (`rewrites.rewrite`) and not finished is done first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from custody_app.erasure import rekey
from custody_app.erasure.certificate import COPIES_PLACES, ErasureCertificate
from custody_app.erasure.completion import finished_elsewhere
from custody_app.erasure.proof import reissue
from custody_app.erasure.rewrites import REWRITE_PLACE, rewrite
from custody_app.erasure.work import ErasureWork

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


class Scrubs:
    """This process's pending erasures: certificate, erased bytes and short values of each."""

    def __init__(self) -> None:
        self._pending: dict[str, tuple[ErasureCertificate, ErasureWork]] = {}
        self.due = False
        self.finishing = False

    def settle(self, core: LedgerCore, cert: ErasureCertificate, work: ErasureWork) -> None:
        """After an erasure's proof: a complete one clears its pending rows; an incomplete one
        is kept (with what a re-issued certificate needs) until a checkpoint completes."""
        checkpointed = any(p.place.startswith("WAL checkpoint") and p.outcome == "clean"
                           for p in cert.places)
        # A file rewrite whose own checkpoint a reader blocked keeps the erasure pending; the
        # epoch's place for copies taken before does not (rotate-epoch settles it).
        if checkpointed and not any(p.outcome == "pending" and p.place not in COPIES_PLACES
                                    for p in cert.places):
            # Not pending any more, whatever the scan found: leaks are recorded as leaks.
            self.clear(core, [cert])
            return
        self._pending[cert.root or cert.subject_hash or cert.issued_at] = (cert, work)
        self.due = True

    def clear(self, core: LedgerCore, certs: list[ErasureCertificate] | None = None) -> None:
        """After a complete checkpoint: drop the pending-scrub rows (recording the erasures
        whose certificate found leaks) and leave the WAL empty."""
        self.finishing = True
        try:
            with core.transaction():
                core.db.erasure.clear_pending()
                rekey.clear_intents(core)
                for cert in certs or []:
                    leaks = [h for p in cert.places for h in p.hits if h.classification == "leak"]
                    if leaks:
                        core.db.erasure.add_leak({
                            "operation": cert.operation, "issued_at": cert.issued_at,
                            "leaks": len(leaks), "facts": [e.fact_id for e in cert.erased][:20],
                            "subject_hash": cert.subject_hash, "root": cert.root})
        finally:
            self.finishing = False
        core.db.wal_checkpoint(wait=False)

    def finish(self, core: LedgerCore, *, wait: bool = True) -> list[ErasureCertificate]:
        """Finish erasures whose WAL checkpoint a reader blocked, or whose file rewrite was due
        and not done (a kill, a busy writer); returns their certificates re-issued (empty
        while a reader still blocks it, or when nothing was pending). An erasure another
        process left pending (its pending rows are not this process's) cannot be scanned for
        here (its strings went with that process), so the file is rewritten first and its
        certificate issued from what the ledger recorded (`completion.finished_elsewhere`)."""
        with core.db.read():
            pending = core.db.erasure.pending()
            due = core.db.erasure.rewrite_due()
        if not pending and not due and not self._pending:
            self.due = False
            return []
        if not core.db.wal_checkpoint(wait=wait).complete:
            self.due = True
            return []
        mine = {e.fact_id for _cert, work in self._pending.values() for e in work.erased}
        orphans = [(f, since) for f, since in pending if f not in mine]
        rewritten = None
        if due is not None or orphans:
            why = (due or {}).get("why") or (f"{len(orphans)} erased fact(s) left pending by "
                                             "another process")
            rewritten = rewrite(core, why)
            if not rewritten.complete:
                self.due = True
                return []
        certificates = [reissue(core, cert, work, rewritten)
                        for cert, work in self._pending.values()]
        if any(p.outcome == "pending" and p.place != REWRITE_PLACE
               and p.place not in COPIES_PLACES and not p.place.startswith("WAL checkpoint")
               for cert in certificates for p in cert.places):
            # A place the store checks itself is still pending (a server: a transaction older
            # than the erasure): kept, with its certificate as re-issued, until it is not.
            self._pending = {key: (cert, work) for (key, (_old, work)), cert
                             in zip(self._pending.items(), certificates, strict=True)}
            self.due = True
            return certificates
        if orphans:
            assert rewritten is not None
            certificates += finished_elsewhere(core, orphans, rewritten)
        self.clear(core, certificates)
        self._pending.clear()
        self.due = False
        return certificates
