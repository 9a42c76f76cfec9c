"""Rollback detection (DESIGN 13): the key store, a separate file, records the ledger's head
(seq, hash) whenever it changes a key and at every erasure; a ledger whose head is behind that
mark was restored from an older copy (or cut short) and is refused, since it could serve
values erased since."""

from __future__ import annotations

import os

from custody_app.domain.errors import LedgerError
from custody_app.keys.keyring import KeyRing
from store import LedgerFile

# Set to the seq a refusal names, a read-write open accepts the loss of what came after it.
ACCEPT_ENV = "CUSTODY_ACCEPT_ROLLBACK"


def check_high_water(db: LedgerFile, keys: KeyRing, path: str, *, readonly: bool) -> None:
    mark = keys.store.high_water()
    if mark is None:
        return
    head = db.events.head()
    have = head[0] if head else 0
    if have >= mark[0]:
        return
    if not readonly and os.environ.get(ACCEPT_ENV) == str(mark[0]):
        keys.record_mark(head or (0, "", ""), accepted=True)
        return
    raise LedgerError(
        "ledger_rolled_back",
        f"{path} ends at event {have}, but its key store {keys.path} recorded that this "
        f"ledger had reached event {mark[0]} ({mark[1][:12]}...) at {mark[2]}: the ledger was "
        "restored from an older copy or cut short, and could serve values erased since. "
        "Restore the key store from the same moment as the ledger, or accept the loss of "
        f"what came after by opening it read-write once with {ACCEPT_ENV}={mark[0]}",
        ledger_seq=have, mark_seq=mark[0])
