"""A sweep's erasure as one group: what `forget.erase` does fact by fact (null each value and
its sealed text, record the digests, append the expire events), with each table written once."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Literal

from custody_app.domain.canonical import parse
from custody_app.erasure.certificate import ErasedFact
from custody_app.erasure.forget import digest_of, previously_forgotten_digest
from custody_app.erasure.work import ErasureWork, add_keyed_words, add_needles, add_text_needles
from custody_app.keys import crypto
from store.rows import FactRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore

# From this many facts on, the names of all facts are read in one query instead of one per string.
NAMES_READ_AT = 1000
# (fact, the root it was reached from or None, the fields its event adds to the common ones)
Member = tuple[FactRow, str | None, dict[str, Any]]


def erase_group(ledger: LedgerCore, members: list[Member], *, kind: Literal["forget", "expire"],
                reason: str, actor: str, tx_at: str, work: ErasureWork) -> None:
    """Inside a write transaction: the rows `erase` leaves for each member in turn, byte for
    byte (tests/test_sweep_group.py), read and written a statement per table for them all."""
    if not members:
        return
    policy = ledger.policy.policy.erasure
    db = ledger.db
    events = db.events.get_many([fact.assert_seq for fact, _, _ in members])
    texts = db.texts.of_facts([fact.fact_id for fact, _, _ in members])
    digests: list[tuple[str, str, str]] = []
    items: list[tuple[str, dict[str, Any]]] = []
    kinds: list[tuple[str, str | None]] = []
    # No expiry changes which names facts carry: for a big group, every name read once.
    if len(members) >= NAMES_READ_AT:
        is_name: Callable[[str], bool] = db.erasure.names().__contains__
    else:
        is_name = db.erasure.is_name

    # The keyed forms are scanned for after a forget, not after a retention sweep (a sweep of
    # thousands of facts would look up each word's hash in the index: ~0.6 ms a fact).
    index_key = (ledger.keys.index_key if kind == "forget" and ledger.keys is not None
                 and db.recall.exists() else None)
    # One cipher per key for the group, dropped with it (no key ring: nothing is opened).
    ciphers = None if ledger.keys is None else crypto.Ciphers(ledger.keys.key_for_open)
    # A big group's index rows go on another thread while the loop below opens, digests and
    # collects (it reads only the key store's connection, and the names read above).
    ahead = (ledger.index.removing_ahead([fact.assert_seq for fact, _, _ in members])
             if len(members) >= NAMES_READ_AT else nullcontext())
    with ahead:
        for fact, root, extra in members:
            event = events[fact.assert_seq]
            ref = parse(event.body)["subject_ref"]
            text = ledger.values.open(fact.fact_id, ref, event.value, ciphers)
            digest_kind, digest = digest_of(ledger, text, ref)
            if text is not None and policy.digest != "none" and digest_kind != "none":
                kept = previously_forgotten_digest(ledger, ref, fact.predicate, text)
                if kept is not None:
                    digests.append((ref, fact.predicate, kept))
            add_needles(event.value, text, work, is_name, fact.fact_id, fact.predicate)
            if index_key is not None:
                add_keyed_words(work, index_key, fact.subject, fact.predicate, text,
                                fact.fact_id)
            for seq, blob in texts[fact.fact_id]:
                try:
                    opened = ledger.texts.open(fact.fact_id, ref, blob, ciphers)
                except crypto.DecryptError:
                    opened = None  # tampered: still erased, and its bytes still scanned for
                add_text_needles(blob, opened, work, is_name, fact.fact_id, seq)
            items.append((fact.fact_id, {"reason": reason, "digest_kind": digest_kind,
                                         "digest": digest, "root": root, **extra}))
            kinds.append((digest_kind, digest))
    db.erasure.add_digests(digests)
    db.events.erase_values([fact.assert_seq for fact, _, _ in members])
    db.texts.erase_facts([fact.fact_id for fact, _, _ in members])
    db.erasure.add_pending([fact.fact_id for fact, _, _ in members], tx_at)
    # The members' rows as the cascades read them: nothing above writes the facts table.
    rows = ledger.append_group(kind, actor, tx_at, items, [fact for fact, _, _ in members])
    for (fact, root, _), row, (digest_kind, digest) in zip(members, rows, kinds, strict=True):
        work.erased.append(ErasedFact(
            fact_id=fact.fact_id, kind=kind, status_before=fact.status, seq=row.seq,
            event_id=row.hash, root=root, digest_kind=digest_kind, digest=digest))
