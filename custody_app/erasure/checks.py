"""What `verify` checks of erasure's own tables and keys (one hook in evidence/verify.py): the
forgotten-value digests against the fold of the erasure events, and the lexical index against
the key store's word index key."""

from __future__ import annotations

from typing import TYPE_CHECKING

from custody_app.erasure.digests import check_digests
from custody_app.erasure.rotate import index_key_problem

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


def erasure_checks(ledger: LedgerCore) -> str | None:
    """The first problem found, naming the row, event or fact; None when all hold."""
    with ledger.db.read():
        return check_digests(ledger) or index_key_problem(ledger)
