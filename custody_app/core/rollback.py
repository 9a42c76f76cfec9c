"""Rollback and fork detection (DESIGN 13, 14): the key store, a separate file, records the
ledger's head (seq, hash) under a MAC whenever it changes a key and at every erasure. A ledger
whose head is behind that mark was restored from an older copy (or cut short); one whose event
at the mark's seq has another hash was forked (an old copy with events appended by hand). Both
could serve values erased since, and are refused. A key store bound to another ledger (by its
genesis hash) is refused too, before its marks are compared with this one's. The other way
round, the ledger records the number and MAC of the newest mark row it saw the key store
commit: a key store whose newest marks were deleted, or put back alone from an older copy, is
refused (`keystore_rolled_back`), and one whose write-once triggers were dropped is refused for
writes (`keystore_tampered`)."""

from __future__ import annotations

import os

from custody_app.domain.chain import event_hash
from custody_app.domain.errors import LedgerError
from custody_app.keys.keyring import INDEX_KEY_ID, KeyRing
from custody_app.keys.marks import describe
from store import LedgerFile
from store.rows import EventRow, MarkRow

# ledger_meta: the number and MAC of the key store's newest mark row ("N:MAC"), written by the
# ledger once the key store committed that row: a key store whose newest marks were deleted,
# or that was put back from an older copy, no longer holds it.
KEYSTORE_MARK = "keystore_mark"
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


def computed_hash(row: EventRow, *, legacy: bool) -> str:
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


def recorded_mark(db: LedgerFile) -> tuple[int, str] | None:
    """(number, MAC) of the key store's mark row this ledger recorded last, if any."""
    value = db.meta(KEYSTORE_MARK)
    n, _, mac = (value or "").partition(":")
    return (int(n), mac) if n.isdigit() and mac else None


def note_mark(db: LedgerFile, row: MarkRow | None) -> None:
    """The ledger records the key store's trusted mark row `row` (its number and MAC), read
    inside a write transaction that holds both files (so the row is committed), as part of
    that write (a refused write rolls it back with the rest); never an older row
    than recorded. A mark written after a write's commit is recorded by the next write."""
    if row is None:
        return
    recorded = recorded_mark(db)
    if recorded is not None and recorded[0] >= row[0]:
        return
    if db.depth:
        # Inside the write (its one statement: a savepoint around it would cost a server
        # ledger a round trip, and a refusal of it fails the write all the same).
        db.texts.set_meta(KEYSTORE_MARK, f"{row[0]}:{_mac(row)}")
        return
    with db.write():
        db.texts.set_meta(KEYSTORE_MARK, f"{row[0]}:{_mac(row)}")


def _mac(row: MarkRow) -> str:
    """A mark row's MAC as the ledger records it ("-" for a row from before marks had one)."""
    return row[5] or "-"


def check_keystore_followed(db: LedgerFile, keys: KeyRing, path: str,
                            row: MarkRow | None) -> None:
    """Refuse a key store that lacks the newest mark row the ledger recorded
    (`keystore_rolled_back`): its newest marks were deleted (the triggers dropped, no master
    key needed) or it was put back from an older copy, either of which lowers the bar a
    restored ledger must pass."""
    recorded = recorded_mark(db)
    if recorded is None:
        return
    n, mac = recorded
    kept = keys.store.mark(n)
    if row is not None and row[0] >= n and kept is not None and _mac(kept) == mac:
        return
    has = f"its newest trusted mark is row {row[0]}" if row is not None else "it holds no trusted mark"
    if kept is not None and _mac(kept) != mac:
        has += f", and its row {n} is not the one recorded"
    raise LedgerError(
        "keystore_rolled_back",
        f"{path} recorded that its key store had reached mark row {n}, but in {keys.path} "
        f"{has}: the key store's newest marks were deleted or it was put back from an older "
        "copy, which would let an older copy of the ledger pass as current. Put back the key "
        "store that followed this ledger (or restore the ledger and its key store from the "
        "same backup)", ledger_mark=n, keystore_mark=row[0] if row is not None else 0)


def check_triggers(keys: KeyRing) -> None:
    """Refuse to write through a key store whose write-once triggers were dropped or altered
    (`keystore_tampered`): without them its marks and keys can be deleted or overwritten by
    whoever can write the file."""
    missing = keys.store.missing_triggers()
    if missing:
        raise LedgerError(
            "keystore_tampered",
            f"the key store {keys.path} lacks its write-once triggers ({', '.join(missing)}): "
            "it was changed outside custody-app, and its marks or keys may have been deleted "
            "or overwritten. Restore it from a backup taken with the ledger; `custody-app "
            "doctor` names what else differs", keystore=keys.path, triggers=missing)


def check_high_water(db: LedgerFile, keys: KeyRing, path: str, *, readonly: bool) -> None:
    check_binding(db, keys, path)
    if not readonly:
        check_triggers(keys)
    keys.follow_index(db.meta(INDEX_KEY_ID))
    row, _untrusted = keys.trusted_mark()  # untrusted rows are never the bar (doctor names them)
    check_keystore_followed(db, keys, path, row)
    _check_ledger_mark(db, keys, path, row, readonly=readonly)


def _check_ledger_mark(db: LedgerFile, keys: KeyRing, path: str, row: MarkRow | None, *,
                       readonly: bool) -> None:
    """Refuse a ledger behind the key store's trusted mark or forked from it (see above)."""
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
        computed = None if at_mark is None else computed_hash(at_mark, legacy=row[5] is None)
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
