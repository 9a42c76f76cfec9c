"""Re-keying the lexical word index: every believed fact's word hashes are made again under a
fresh key and the old key is destroyed, so a copy of the ledger taken before (an erasure, say)
can no longer have candidate words tested against its index with the current key store."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from custody_app.domain.errors import LedgerError
from custody_app.domain.readmodels import ReadModel
from custody_app.erasure.certificate import PlaceCheck
from custody_app.keys import crypto
from custody_app.recall import text
from custody_app.recall.index import INDEXED

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore
    from custody_app.recall.index import RecallIndex


class RotateResult(ReadModel):
    """What a rotation re-hashed, how long it took, and whether the WAL is empty again."""

    facts: int
    seconds: float
    checkpoint_complete: bool
    detail: str


def rotate_index_key(core: LedgerCore) -> RotateResult:
    """One ledger transaction rebuilds the lexical index under a fresh key; the key store
    replaces the old key inside it (it commits first, as a subject erasure's key destruction
    does). A crash between the two leaves the index under the destroyed key: `rebuild
    --repair` then re-indexes under the current one."""
    if core.keys is None:
        raise LedgerError("keystore_missing", "the key store is not available")
    started = time.perf_counter()
    with core.transaction():
        new = crypto.new_key()
        rows = lexical_rows(core.index, new)
        core.db.recall.recreate_lexical(rows)
        core.keys.rotate_index_key_to(new)
    outcome = core.db.wal_checkpoint()
    return RotateResult(
        facts=len(rows), seconds=round(time.perf_counter() - started, 3),
        checkpoint_complete=outcome.complete,
        detail=f"{len(rows)} believed fact(s) re-indexed under a fresh key; the old index key "
        "is destroyed, so a copy of the ledger taken before cannot have its index words tested "
        "with this key store" + ("" if outcome.complete else
                                 f"; {outcome.detail}: the old index pages stay in the WAL "
                                 "until then"))


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
        "key store, still lets candidate words be tested against its index rows until "
        "`custody-app rotate-index-key` runs (or the policy's [erasure] rotate_index_key = "
        "\"after_forget_subject\")")
