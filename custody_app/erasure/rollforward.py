"""All or nothing across the two files (DESIGN 13): a subject erasure commits in the ledger
first (its tombstone is the recorded intent), then destroys the key in the key store. A crash
between the two leaves a tombstone whose destruction the key store lacks; the next read-write
open completes it, and `doctor` names it until then."""

from __future__ import annotations

from typing import TYPE_CHECKING

from custody_app.erasure import rekey
from custody_app.erasure.rotate import roll_forward_index_key

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


def unfinished(ledger: LedgerCore) -> list[tuple[int, str, str]]:
    """(seq, subject hash, at) of every subject erasure whose key destruction the key store
    has not recorded."""
    if ledger.keys is None:
        return []
    out = []
    for seq, subject_hash, _reason, _counts, at in ledger.db.erasure.tombstones():
        destroyed = ledger.keys.store.last_destroyed(subject_hash)
        if destroyed is None or destroyed < at:
            out.append((seq, subject_hash, at))
    return out


def seal_subject_ids(ledger: LedgerCore) -> int:
    """A server ledger made before its subject ids were sealed (issue 34) has them sealed under
    each subject's data key, in one transaction (0: nothing to do, or a file ledger)."""
    if ledger.keys is None:
        return 0
    return ledger.db.seal_subject_ids()


def roll_forward(ledger: LedgerCore) -> list[int]:
    """Destroy the keys of every unfinished subject erasure (returns their seqs), and finish a
    rotation of the word index key cut short."""
    roll_forward_index_key(ledger)
    rekey.roll_forward(ledger)
    seal_subject_ids(ledger)
    with ledger.db.read():
        todo = unfinished(ledger)
    if not todo:
        return []
    assert ledger.keys is not None
    with ledger.keys.store.write():
        for _seq, subject_hash, at in todo:
            ledger.keys.destroy_ref(subject_hash, at)
        ledger.keys.record_mark(ledger.db.events.head())
    return [seq for seq, _, _ in todo]
