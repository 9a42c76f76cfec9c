"""Re-keying the lexical word index: every believed fact's word hashes are made again under a
fresh key and the old key is destroyed, so a copy of the ledger taken before (an erasure, say)
can no longer have candidate words tested against its index with the current key store.

All or nothing across the two files (DESIGN 14): the key store records the new key beside the
old one first (the intent); the ledger re-indexes under it and records the key's fingerprint in
one transaction; then the key store moves the new key over the old one. After a kill anywhere,
the next read-write open rolls the intent forward (`roll_forward_index_key`): the old key with
the old index, or the new key with the new index, never an index under a destroyed key."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from custody_app.core.faults import crash_point
from custody_app.domain.errors import LedgerError
from custody_app.domain.readmodels import ReadModel
from custody_app.erasure.certificate import PlaceCheck
from custody_app.keys.keyring import INDEX_KEY_ID
from custody_app.keys.keyring import index_key_id as key_id
from custody_app.keys.vectors import SEALED, VectorCipher
from custody_app.recall import text
from custody_app.recall.index import INDEXED

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore
    from custody_app.recall.index import RecallIndex

# ledger_meta: the fingerprint of the key the lexical index was last rebuilt under.
KEY_ID = INDEX_KEY_ID


class RotateResult(ReadModel):
    """What a rotation re-hashed, how long it took, and whether the WAL is empty again."""

    facts: int
    seconds: float
    checkpoint_complete: bool
    detail: str


def _reindex_under(core: LedgerCore, new: bytes) -> int:
    """One ledger transaction: the lexical index rebuilt under `new`, a server's sealed vectors
    and centroids re-sealed under the key derived from it, its fingerprint kept."""
    assert core.keys is not None
    with core.transaction():
        if core.keys.pending_index_key() != new:
            # Another process finished this rotation (and may have begun the next) since `new`
            # was read: the index is under its key already, and writing it under `new` now
            # would put it under a key the key store no longer names.
            return 0
        rows = lexical_rows(core.index, new)
        core.db.recall.recreate_lexical(rows)
        if core.db.recall.vector_form() == SEALED:
            # Under the key the index is under now (the transaction's fence followed it).
            core.db.recall.reseal(VectorCipher.fixed(core.index.key()), VectorCipher.fixed(new))
        core.db.recall.refresh_statistics()
        core.db.texts.set_meta(KEY_ID, key_id(new))
        crash_point("rotate.before_commit")
    return len(rows)


def rotate_index_key(core: LedgerCore) -> RotateResult:
    """Intent in the key store, the index in the ledger, then the key swap (see above)."""
    if core.keys is None:
        raise LedgerError("keystore_missing", "the key store is not available")
    started = time.perf_counter()
    new = core.keys.begin_index_rotation()
    crash_point("rotate.intent_committed")
    facts = _reindex_under(core, new)
    crash_point("rotate.ledger_committed")
    core.keys.finish_index_rotation(new)
    crash_point("rotate.keys_committed")
    outcome = core.db.wal_checkpoint()
    return RotateResult(
        facts=facts, seconds=round(time.perf_counter() - started, 3),
        checkpoint_complete=outcome.complete,
        detail=f"{facts} believed fact(s) re-indexed under a fresh key; the old index key "
        "is destroyed, so a copy of the ledger taken before cannot have its index words tested "
        "with this key store" + ("" if outcome.complete else
                                 f"; {outcome.detail}: the old index pages stay in the WAL "
                                 "until then"))


def roll_forward_index_key(core: LedgerCore) -> bool:
    """At a read-write open: finish a rotation a kill interrupted (re-index under the pending
    key unless the ledger already is, then swap the keys). True when there was one."""
    if core.keys is None:
        return False
    pending = core.keys.pending_index_key()
    if pending is None:
        return False
    if core.db.meta(KEY_ID) != key_id(pending):
        _reindex_under(core, pending)
    core.keys.finish_index_rotation(pending)
    return True


def index_key_problem(core: LedgerCore) -> str | None:
    """Is the lexical index under the key store's index key? By the recorded fingerprint, or
    (a ledger never rotated) by one believed fact's scope tokens hashed afresh. A rotation under way
    is no problem here (doctor names it; the next read-write open finishes it)."""
    if core.keys is None or not core.db.recall.exists() or core.keys.store.meta("index") is None:
        return None
    pending = core.keys.pending_index_key()
    keys = [core.keys.index_key] + ([pending] if pending is not None else [])
    recorded = core.db.meta(KEY_ID)
    if recorded is not None:
        if recorded in {key_id(k) for k in keys}:
            return None
        return ("recall indexes: the lexical index was built under another word index key "
                "than the key store's (a rotate-index-key cut short?): lexical recall finds "
                "nothing; `custody-app rotate-index-key` re-indexes under a fresh key")
    sample = lexical_sample(core.index)
    if sample is None:
        return None
    seq, space, subject = sample
    have = core.db.erasure.lexical_scope(seq)
    if have is None:
        return None  # a missing row is the index comparison's to report
    if any(have == core.index.scope(space, subject, k) for k in keys):
        return None
    return (f"recall indexes: the lexical row of the fact asserted at seq {seq} is not under "
            "the key store's word index key: lexical recall finds nothing; `custody-app "
            "rotate-index-key` re-indexes under a fresh key")


def lexical_sample(index: RecallIndex) -> tuple[int, str, str] | None:
    """(assert seq, space, subject) of one believed fact (among the first few of each status:
    a page, not every fact): its row's scope tokens are keyed whatever its value says."""
    for status in INDEXED:
        for fact in index.db.browse.with_status_page(status, 0, 1):
            return fact.assert_seq, fact.space, fact.subject
    return None


def lexical_rows(index: RecallIndex, key: bytes) -> list[tuple[int, str, str]]:
    """The lexical index's rows for every believed fact, hashed under `key`."""
    rows = []
    for status in INDEXED:
        for fact in index.db.facts.with_status(status):
            value_text = index.stored_text(fact)
            if value_text is None:
                continue
            body = text.fact_text(fact.subject, fact.predicate, json.loads(value_text))
            terms = " ".join(text.term(key, w) for w in text.words(body))
            rows.append((fact.assert_seq, terms, index.scope(fact.space, fact.subject, key)))
    return sorted(rows)


def index_key_place(rotated: RotateResult | None) -> PlaceCheck:
    """What a copy of the ledger taken before a subject's erasure still gives up through the
    word index, for the certificate."""
    if rotated is not None:
        return PlaceCheck(place="word index key (copies taken before)", outcome="clean",
                          detail=f"rotated after this erasure: {rotated.detail}")
    return PlaceCheck(
        place="word index key (copies taken before)", outcome="not_applicable",
        detail="not rotated: a copy of the ledger taken before this erasure, with the current "
        "key store, still lets candidate words be tested against its index rows (and, on a "
        "server, opens its sealed recall vectors, which are under the same key) until "
        "`custody-app rotate-index-key` runs (or the policy's [erasure] rotate_index_key = "
        "\"after_forget_subject\")")
