"""The ledger's overview reads (the terminal app's and the CLI's): retention windows and the
cutoff per space, the policy history and texts, the ledger's status, and adopting the policy in
force; and the one page-size check every paged read uses."""

from __future__ import annotations

from custody_app.core.ledger_core import LedgerCore
from custody_app.domain.errors import LedgerError
from custody_app.domain.retention import cutoff_for, window_for
from custody_app.domain.timeutil import parse_time
from custody_app.ledger.readmodels import LedgerStatus, PolicyChange, RetentionSpace, RetentionView

MAX_PAGE = 500


def page_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise LedgerError("bad_request", f"field 'limit' must be between 1 and {MAX_PAGE}",
                          field="limit")
    return limit



class LedgerOverview(LedgerCore):
    """Reads of the ledger as a whole, above the facts."""

    def retention(self, *, after_space: str = "", limit: int = 50) -> RetentionView:
        """The policy's retention windows and, for one page of the ledger's spaces (in name
        order after `after_space`), the window and the cutoff a sweep would use now."""
        page_limit(limit)
        windows = dict(self.policy.policy.retention.windows)
        with self.db.read():
            now = self.now()
            spaces = self.db.browse.spaces_page(after_space, limit)
        out = []
        for space in spaces:
            found = window_for(space, windows)
            out.append(RetentionSpace(
                space=space, pattern=found[0] if found else None,
                window=found[1] if found else None,
                cutoff=cutoff_for(parse_time(now), found[1]) if found else None))
        return RetentionView(now=now, windows=windows, spaces=out,
                             cutoffs={p: cutoff_for(parse_time(now), d)
                                      for p, d in windows.items()},
                             next_after=spaces[-1] if len(spaces) == limit else None)

    def policy_history(self) -> list[PolicyChange]:
        """Every policy that came into force, oldest first (its text: `db.policies`)."""
        with self.db.read():
            rows = self.db.browse.policy_history()
        return [PolicyChange(seq=s, tx_at=t, hash=h, path=p) for s, t, h, _src, p in rows]

    def policy_text(self, policy_hash: str) -> str | None:
        """The TOML a recorded policy came from."""
        with self.db.read():
            found = self.db.policies.get(policy_hash)
        return None if found is None else found[1]

    def status(self) -> LedgerStatus:
        """Chain head, file and WAL sizes, pending scrubs, the policy in force and its history,
        and how many facts are in each status."""
        with self.db.read():
            head = self.db.events.head()
            pending = self.db.erasure.pending()
            recorded = self.db.events.last_policy_hash()
            counts = self.db.facts.counts_by_status()
        path = self.db.path
        db_bytes, wal_bytes = self.db.stored_bytes()
        return LedgerStatus(
            path=path, events=head[0] if head else 0, head_hash=head[1] if head else None,
            head_tx_at=head[2] if head else None, db_bytes=db_bytes,
            wal_bytes=wal_bytes, pending_scrubs=pending,
            policy_in_force=self.policy.hash, policy_recorded=recorded,
            policy_history=self.policy_history(), counts=counts)

    def adopt_policy(self) -> PolicyChange | None:
        """Record the policy in force as a `policy` event now if the ledger's last recorded
        policy differs (otherwise it is recorded at the next write); None when already so."""
        with self.transaction():
            if self._recorded_policy == self.policy.hash:
                return None
            tx_at = self.tx_at()
            self._policy_for_write(tx_at)
            assert self._head is not None
            seq = self._head[0]
        return PolicyChange(seq=seq, tx_at=tx_at, hash=self.policy.hash, path=self.policy.path)
