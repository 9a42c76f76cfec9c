"""The free-text upgrade (schema 5), run at a read-write open: the plaintext cause ref, detail
and reasons of events written before are sealed (or, for erased facts, dropped), taken out of
the bodies, and the rewritten bodies vouched for by one `seal_text` event on the chain."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from custody_app.core.faults import crash_point
from custody_app.domain.chain import canonical, new_salt
from custody_app.domain.sealed_text import BODY_KEY, block, split, upgrade_digest

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore

META_KEY = "free_text_sealed"
# Until the checkpoint and the rewrite after the upgrade complete, the old pages (plaintext) may
# still be in the database file: every read-write open tries them again until they do.
PENDING = "checkpoint pending"
PAGE = 5000


def seal_existing(core: LedgerCore) -> int:
    """Upgrade the ledger's plaintext free text in one transaction, then checkpoint the WAL so
    no copy of it stays there; returns how many events were rewritten (0 once done)."""
    if core.readonly or core.keys is None:
        return 0
    state = core.db.meta(META_KEY)
    if state == PENDING:
        _checkpoint(core)
    if state is not None:
        return 0
    with core.unit_of_work(), core.transaction():
        if core.db.meta(META_KEY) is not None:
            return 0  # another process upgraded it meanwhile
        tx_at = core.tx_at()
        rewritten, rows = _rewrite(core, tx_at)
        if rewritten:
            core.db.texts.rewrite_bodies(rewritten)
            for seq, fact_id, ref, blob, salt in rows:
                core.db.texts.put(seq, fact_id, ref, blob, salt)
            core.append("seal_text", "system:custody", tx_at,
                        {"events": len(rewritten), "digest": upgrade_digest(rewritten)})
        core.db.texts.set_meta(META_KEY, PENDING if rewritten else tx_at)
        crash_point("upgrade.before_commit")
    crash_point("upgrade.committed")
    if rewritten:
        _checkpoint(core)
    return len(rewritten)


def _checkpoint(core: LedgerCore) -> None:
    """The truncating checkpoint that copies the rewritten pages over the old ones, then a
    rewrite of the whole file (VACUUM and its checkpoint): secure_delete zeroes what is freed,
    but not the unallocated space of the pages SQLite rebuilt while the bodies shrank, where
    copies of the old bodies survive. Only once both complete is the upgrade recorded as done."""
    if core.db.wal_checkpoint().complete and core.db.rewrite().complete:
        with core.transaction():
            core.db.texts.set_meta(META_KEY, "done")
        core.db.wal_checkpoint()


def _rewrite(core: LedgerCore, tx_at: str) -> tuple[list[tuple[int, str]], list[Any]]:
    db = core.db
    assert core.keys is not None
    erased = db.texts.erased_facts()
    refs: dict[str, tuple[str, str | None]] = {}
    rewritten: list[tuple[int, str]] = []
    rows: list[tuple[int, str, str, bytes | None, str | None]] = []
    after = 0
    while page := db.texts.candidates(after, PAGE):
        after = page[-1][0]
        for seq, kind, fact_id, subject, body_text in page:
            body = json.loads(body_text)
            if fact_id is None or BODY_KEY in body:
                continue
            new, texts = split(kind, body)
            if not texts:
                continue
            if kind == "assert":
                refs[fact_id] = (str(body["subject_ref"]), subject)
            ref, plain = refs.get(fact_id) or _subject_of(core, fact_id)
            salt = new_salt()
            blob: bytes | None = None
            if fact_id not in erased and plain is not None:
                blob = core.texts.seal(fact_id, plain, texts, work_started=core.work_started,
                                       now=tx_at, erased_at=db.erasure.last_tombstone_at(ref))
            new[BODY_KEY] = block(salt, texts, upgraded=True)
            rewritten.append((seq, canonical(new)))
            # An erased fact's text is dropped: its salt goes with it, as a forget would do.
            rows.append((seq, fact_id, ref, blob, salt if blob is not None else None))
    return rewritten, rows


def _subject_of(core: LedgerCore, fact_id: str) -> tuple[str, str | None]:
    """(subject ref, plaintext subject or None once erased) of the fact an event is about."""
    fact = core.db.facts.get(fact_id)
    event = core.db.events.get(fact.assert_seq) if fact is not None else None
    if event is None:
        return "", None
    return str(json.loads(event.body)["subject_ref"]), event.subject
