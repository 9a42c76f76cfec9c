"""`verify`: walk the whole hash chain (every event's hash, link, mirrored columns and value
commitment), check signed checkpoints, and compare the recall indexes with the believed facts."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from custody_app.core.derived import DerivedAudit
from custody_app.core.ledger_core import as_ledger_error, ledger_id_mismatch
from custody_app.domain.chain import verify_chain
from custody_app.domain.readmodels import VerifyResult
from custody_app.erasure.checks import erasure_checks
from custody_app.evidence.checkpoints import CheckpointAudit
from custody_app.evidence.integrity import INERT, EventAudit
from custody_app.evidence.receipts import CITING, ReceiptAudit
from custody_app.evidence.signatures import SignatureAudit
from custody_app.evidence.textaudit import Keyless, TextAudit, unerased_keys
from custody_app.recall.deep import content_differences
from store.rows import EventRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


def verify(ledger: LedgerCore, progress: Callable[[int], None] | None = None, *,
           public_key: str | None = None, deep: bool = False) -> VerifyResult:
    """`valid` is false with the first bad seq when the chain is broken. Signed checkpoints
    are checked under `public_key` (PEM), else the ledger's own key. `deep` also compares the
    recall indexes' content with the believed facts indexed afresh."""
    pem = public_key or (ledger.keys.public_pem() if ledger.keys is not None
                         and ledger.keys.store.meta("signing") is not None else None)
    unchecked = 0
    opened: dict[int, str | None] = {}
    # Stored values whose key generation is gone: each must be explained by a recorded erasure.
    keyless: list[Keyless] = []

    def opener(row: EventRow, body: dict[str, Any]) -> str | None:
        nonlocal unchecked
        text = ledger.values.opener(row, body, texts.ciphers)
        if text is None:
            unchecked += 1
            if row.value is not None and ledger.keys is not None:
                keyless.append((row.seq, row.fact_id, str(body.get("subject_ref", "")),
                                row.tx_at))
        opened.clear()
        opened[row.seq] = text
        return text

    events = EventAudit()
    receipts = ReceiptAudit(ledger)
    texts = TextAudit(ledger)
    signatures = SignatureAudit(ledger.db, pem)
    derived = DerivedAudit()

    def plain(row: EventRow) -> str | None:
        # An affirm whose body is its columns (chain.plain_affirm): no receipt, sealed text,
        # fold, session or retraction for the audits to see (TextAudit.check and the rest
        # would return at once); its checkpoint, policy in force and absent signature are
        # checked (its fact_id, in the fact index, by derived.finish).
        return ((audit.check(row) if row.seq in audit.wanted else None)
                or signatures.plain(row))

    def extra(row: EventRow, body: dict[str, Any]) -> str | None:
        # Calls left out where the audit would return at once, changing nothing: the
        # checkpoint audit for an event no checkpoint signed that is not one itself; receipts
        # for kinds that carry none; the fold for kinds it does not change (integrity.INERT).
        kind = row.kind
        return ((audit.check(row) if kind == "checkpoint" or row.seq in audit.wanted else None)
                or (receipts.check(row, opened.get(row.seq), body) if kind in CITING else None)
                or texts.check(row, body)
                or (events.check(row, body) if kind not in INERT else None)
                or signatures.check(row, body) or derived.check(row, body))

    # The fold keeps a row per fact alive for the whole walk: the cyclic collector would
    # rescan them all again and again (none of them forms a cycle), so it waits until the end.
    collecting = gc.isenabled()
    gc.disable()
    audit = CheckpointAudit([], pem)
    try:
        with ledger.db.read():
            audit = CheckpointAudit(ledger.db.erasure.events_of_kind("checkpoint"), pem)
            report = verify_chain(ledger.db.events.iter_all(), progress, opener,
                                  texts_of=texts.texts_of, body_check=extra,
                                  # No checkpoint signed any event: one frame less an affirm.
                                  plain_check=plain if audit.wanted else signatures.plain)
            index_problems = ledger.index.differences() if ledger.db.recall.exists() else []
            if deep and not index_problems and ledger.db.recall.exists():
                index_problems = content_differences(ledger.index)
            valid, bad, problem = report.valid, report.first_bad_seq, report.problem
            if valid:
                bad, problem = texts.finish()
                if problem is None:
                    bad, problem = events.finish(ledger)
                if problem is None:
                    bad, problem = derived.finish(ledger)
                if problem is None:
                    bad, problem = unerased_keys([*keyless, *texts.keyless],
                                                 events.subject_erasures)
                valid = problem is None
    except Exception as exc:
        damaged = as_ledger_error(ledger.db, exc)
        if damaged is None:
            raise
        # A file SQLite cannot read, or text that is not UTF-8, fails verify, named.
        return VerifyResult(valid=False, events=0, head=None,
                            first_bad_seq=damaged.details.get("seq"),
                            problem=f"{damaged.message} ({damaged.code})")
    finally:
        if collecting:
            gc.enable()
    if valid and index_problems:
        valid, problem = False, "recall indexes: " + "; ".join(index_problems)
    if valid and ledger.keys is not None and (dropped := ledger.keys.store.missing_triggers()):
        valid, problem = False, (f"the key store {ledger.keys.path} lacks its write-once "
                                 f"triggers ({', '.join(dropped)}): its marks or keys may have "
                                 "been deleted or overwritten (keystore_tampered)")
    if valid and (mismatch := ledger_id_mismatch(ledger.db)) is not None:
        valid, problem = False, f"{mismatch.message} ({mismatch.code})"
    if valid and (erasure_problem := erasure_checks(ledger)) is not None:
        valid, problem = False, erasure_problem
    if valid and public_key is not None and audit.count == 0 and report.events:
        valid, problem = False, ("no signed checkpoint in this ledger: the given public key "
                                 "cannot vouch for any of its events")
    return VerifyResult(valid=valid, events=report.events, head=report.head,
                        first_bad_seq=bad, problem=problem, checkpoints=audit.count,
                        last_checkpoint_seq=audit.last, values_unchecked=unchecked,
                        keystore_missing=ledger.keystore_missing,
                        index_problems=index_problems, ledger_id=ledger.ledger_id,
                        ledger_id_chained=ledger.id_chained)
