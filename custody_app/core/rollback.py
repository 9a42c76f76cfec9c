"""Rollback and fork detection (DESIGN 13, 14): the key store, a separate file, records the
ledger's head (seq, hash) under a MAC whenever it changes a key and at every erasure. A ledger
whose head is behind that mark was restored from an older copy (or cut short); one whose event
at the mark's seq has another hash was forked (an old copy with events appended by hand). Both
could serve values erased since, and are refused. A key store bound to another ledger (by its
genesis hash) is refused too, before its marks are compared with this one's."""

from __future__ import annotations

import os

from custody_app.domain.chain import event_hash
from custody_app.domain.errors import LedgerError
from custody_app.keys.keyring import INDEX_KEY_ID, KeyRing
from custody_app.keys.marks import describe
from store import LedgerFile
from store.rows import EventRow

# What a body rewritten by the free-text upgrade holds (domain/chain.py checks those).
UPGRADED_MARK = '"upgraded":true'
# Set to the seq a refusal names, a read-write open accepts the loss of what came after it.
ACCEPT_ENV = "CUSTODY_ACCEPT_ROLLBACK"


def genesis_of(db: LedgerFile) -> str | None:
    """The hash of the ledger's first event: its identity for the key store's binding."""
    row = db.events.get(1)
    return None if row is None else row.hash


def _hashes(row: EventRow) -> set[str]:
    """The hash an event row stores and the one its body and link give: a byte changed in
    either is tampering for verify to locate, not another ledger."""
    return {row.hash, event_hash(row.prev_hash, row.body)}


def _computed(row: EventRow, *, legacy: bool) -> str:
    """The hash the event's body and link give. A body the free-text upgrade rewrote cannot
    give it back without its sealed text; only a mark from before authenticated marks can
    name such an event (later marks name events after the upgrade), and there the stored
    column stands in."""
    if legacy and UPGRADED_MARK in row.body:
        return row.hash
    return event_hash(row.prev_hash, row.body)


def check_binding(db: LedgerFile, keys: KeyRing, path: str) -> None:
    """Refuse a key store bound to another ledger (`keystore_mismatch`); let the first mark
    bind an unbound one to this ledger."""
    bound = keys.bound_ledger()
    if bound is not None:
        first = db.events.get(1)
        # No first event in a ledger that has events is an edit for verify to locate.
        if (bound not in _hashes(first)) if first is not None else db.events.head() is None:
            raise LedgerError(
                "keystore_mismatch",
                f"the key store {keys.path} belongs to another ledger (genesis {bound[:12]}...), "
                f"not to {path}: name this ledger's own key store with --keystore (or "
                "$CUSTODY_KEYSTORE)", keystore=keys.path)
    keys.genesis = lambda: genesis_of(db)


def check_high_water(db: LedgerFile, keys: KeyRing, path: str, *, readonly: bool) -> None:
    check_binding(db, keys, path)
    keys.follow_index(db.meta(INDEX_KEY_ID))
    row, _untrusted = keys.trusted_mark()  # untrusted rows are never the bar (doctor names them)
    if row is None:
        return
    mark = (row[1], row[2], row[3])
    head = db.events.head()
    have = head[0] if head else 0
    if have >= mark[0]:
        if mark[0] <= 0:
            return
        # The hash the event's own body and link give, not only the column (which anyone
        # can set): an old copy with events appended by hand cannot match it.
        at_mark = db.events.get(mark[0])
        computed = None if at_mark is None else _computed(at_mark, legacy=row[5] is None)
        found = "no event" if computed is None else f"the hash {computed[:12]}..."
        if computed == mark[1]:
            return
        raise LedgerError(
            "ledger_forked",
            f"{path} holds at event {mark[0]} {found}, but its key "
            f"store {keys.path} recorded {mark[1][:12]}... there ({describe(row)}, {mark[2]}): "
            "this ledger is not the one the key store followed (an older copy with events "
            "appended since, or another ledger's key store), and could serve values erased "
            "since. Restore the ledger and key store from the same moment",
            ledger_seq=have, mark_seq=mark[0])
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
