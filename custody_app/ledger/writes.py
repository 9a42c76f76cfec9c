"""The write commands: asserting a fact (redaction, the provenance rule, previously forgotten
values, the checks of a supersession and of sources, sealing, the assert event), and the events
about an existing fact (affirm, hold, release; retractions and reviews: ledger.retractions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from custody_app.core import reads
from custody_app.core.ledger_core import LedgerCore
from custody_app.domain import lifecycle
from custody_app.domain.chain import canonical, commitment, new_salt
from custody_app.domain.commands import Affirm, AssertFact, Hold, Release
from custody_app.domain.errors import LedgerError
from custody_app.domain.readmodels import (
    AssertResult,
    ContradictingAssert,
    FactOpResult,
    ReceiptUnused,
)
from custody_app.domain.receipts import spend_key
from custody_app.domain.redaction import redact
from custody_app.domain.text_fields import redact_fields
from custody_app.erasure import digests
from custody_app.evidence.receipts import bounds
from custody_app.keys import receipts
from custody_app.ledger import retractions
from custody_app.ledger.corroborate import corroborate
from store.rows import FactRow


def assert_fact(ledger: LedgerCore, cmd: AssertFact) -> AssertResult:
    """Write a fact: redact, check, seal and append its assert (one transaction)."""
    pol = ledger.policy.policy
    value, findings = redact(cmd.value, pol.redaction.detectors)
    cmd, text_findings = redact_fields(cmd, pol.redaction.detectors)
    try:
        value_text = canonical(value)
    except Exception as exc:  # rfc8785 raises several types for non-JSON values
        raise LedgerError("bad_request", f"field 'value' is not JSON: {exc}",
                          field="value") from None
    provenance, spends = _standing(ledger, cmd)
    marks, unused = None, None
    # What the transaction reads of the subject first (a server reads it with its BEGIN).
    one = cmd.supersedes is None and pol.cardinality.of(cmd.predicate) == "one"
    ledger.db.expect_subject(cmd.subject, cmd.predicate if one else None,
                             ledger.keys.subject_ref(cmd.subject) if ledger.keys else None)
    with ledger.transaction():
        if spends is not None and ledger.db.events.spent_by(*spends) is not None:
            # Read inside the write transaction: two writers citing one receipt at once
            # cannot both be raised by it.
            provenance, unused = _own_standing(ledger, cmd), _spent(spends)
        if previously_forgotten(ledger, cmd.subject, cmd.predicate, value_text):
            if pol.erasure.previously_forgotten == "refuse":
                raise LedgerError(
                    "previously_forgotten",
                    f"this value of {cmd.subject} {cmd.predicate} was forgotten before and "
                    "the policy refuses it")
            provenance, marks = "claimed", ["previously_forgotten"]
        tx_at = ledger.tx_at()
        valid_from = cmd.valid_from or tx_at
        if cmd.valid_to is not None and cmd.valid_to <= valid_from:
            raise LedgerError("invalid_interval",
                              f"valid_to {cmd.valid_to} is not after valid_from {valid_from}")
        if cmd.supersedes is not None:
            retractions.close_pending_replacement(ledger, ledger.db.facts.get(cmd.supersedes),
                                                  provenance)
            replaced = ledger.db.facts.get(cmd.supersedes)
            lifecycle.check_supersede(replaced, cmd.supersedes, cmd.subject, cmd.predicate,
                                      valid_from, replacement_pending=_pending(ledger, replaced))
        for source in cmd.sources or ():
            lifecycle.check_source(ledger.db.facts.get(source), source)
        rivals = _rivals(ledger, cmd)
        fact_id = ledger.new_fact_id(tx_at)
        salt = new_salt()
        assert ledger.keys is not None  # seal() above refused a ledger without its key store
        fields = {
            "subject_ref": ledger.keys.subject_ref(cmd.subject), "predicate": cmd.predicate,
            "space": cmd.space or pol.default_space, "valid_from": valid_from,
            "valid_to": cmd.valid_to, "provenance": provenance, "marks": marks,
            "cause": cmd.cause.model_dump(exclude_none=True), "session": cmd.session,
            "supersedes": cmd.supersedes,
            "sources": list(dict.fromkeys(cmd.sources)) if cmd.sources else None,
            "llm": cmd.llm.model_dump(exclude_none=True) if cmd.llm else None,
            "commitment": commitment(salt, value_text),
            "redactions": [f.to_json() for f in findings] + text_findings or None,
        }
        erased_at = ledger.db.erasure.last_tombstone_at(str(fields["subject_ref"]))
        sealed = ledger.values.seal(fact_id, cmd.subject, value_text,
                                    work_started=ledger.work_started, now=tx_at,
                                    erased_at=erased_at)
        # The free text is sealed under the same erasure fence: read once for both.
        row = ledger.append("assert", cmd.actor, tx_at, fields, fact_id=fact_id,
                           value=sealed, salt=salt, subject=cmd.subject,
                           plaintext=value_text, erased_at=erased_at)
        fact = _projected(ledger, fact_id)
        if corroborate(ledger, fact, value_text) or ledger.head != (row.seq, row.hash, tx_at):
            fact = reads.require_fact(ledger.db, fact_id)  # a corroboration wrote after it
    result = AssertResult(fact_id=fact_id, event_id=row.hash, seq=row.seq, tx_at=tx_at,
                          status=fact.status, provenance=provenance,
                          redacted=_masked(findings, text_findings), receipt_unused=unused)
    if not rivals:
        return result
    return ContradictingAssert(
        **result.model_dump(), contradicts=rivals,
        warning=f"{cmd.subject} {cmd.predicate} has one value at a time under the policy, and "
                f"{', '.join(rivals)} is already believed: name the fact this replaces in "
                "`supersedes`, or retract one of them")


def _projected(ledger: LedgerCore, fact_id: str) -> FactRow:
    """The fact as the append just projected it (the row it wrote), else read back."""
    fact = ledger.projected.get(fact_id)
    return fact if fact is not None else reads.require_fact(ledger.db, fact_id)


def _standing(ledger: LedgerCore, cmd: AssertFact) -> tuple[str, tuple[str, str, str] | None]:
    """The provenance a write earns, and what it spends: `verified` from a receipt that covers
    the fact (its session, subject, predicate and value, within age and audience), with the
    receipt's spend key (issuer, id, pointer: the write checks in its transaction that no
    earlier fact spent it); otherwise the writer's own standing, as if it cited no receipt."""
    cause, pol = cmd.cause, ledger.policy.policy.provenance
    if cause.receipt is None and (cause.pointer is not None or cause.subject_pointer is not None
                                  or cmd.tool_output is not None
                                  or cmd.tool_arguments is not None):
        raise LedgerError("bad_request", "cause.pointer, cause.subject_pointer, tool_output and "
                          "tool_arguments need a cause.receipt", field="cause.pointer")
    if cause.receipt is not None:
        claim = receipts.Claim(subject=cmd.subject, predicate=cmd.predicate, value=cmd.value,
                               pointer=cause.pointer, output=cmd.tool_output,
                               subject_pointer=cause.subject_pointer, arguments=cmd.tool_arguments)
        earned = receipts.provenance_from(cause.receipt, pol.receipt_issuers,
                                          bounds(ledger, ledger.now()), session=cmd.session,
                                          claim=claim, declared=cmd.provenance)
        if earned is not None:
            return earned, spend_key(cause.receipt, cause.pointer)
    return _own_standing(ledger, cmd), None


def _own_standing(ledger: LedgerCore, cmd: AssertFact) -> str:
    """What the writer declares, above `claimed` only where the policy lets it declare or it
    holds a registered writer key."""
    if cmd.provenance != "claimed" and not ledger.may_declare(cmd.actor):
        raise LedgerError("provenance_not_allowed",
                          f"{cmd.actor} may not declare {cmd.provenance}: "
                          + ("an agent process earns standing by its writer key or a receipt"
                             if ledger.agent is not None
                             else "the policy in force does not let writers declare it"))
    return cmd.provenance


def _spent(key: tuple[str, str, str]) -> ReceiptUnused:
    issuer, receipt_id, pointer = key
    field = f"the field {pointer!r}" if pointer else "its whole output"
    return ReceiptUnused(check="spent", receipt_id=receipt_id, message=(
        f"receipt {receipt_id!r} of {issuer} already raised a fact for {field}: a receipt "
        "raises one fact for each field it covers, so it earns this write nothing (the "
        "write keeps its writer's own standing)"))


def _masked(findings: list[Any], text_findings: list[dict[str, Any]]
            ) -> dict[str, list[str]] | None:
    """field -> the kinds masked in it (never where in the text, nor what), or None."""
    kinds: dict[str, set[str]] = {}
    for finding in findings:
        kinds.setdefault("value", set()).add(finding.kind)
    for found in text_findings:
        kinds.setdefault(str(found["field"]), set()).add(str(found["kind"]))
    return {field: sorted(k) for field, k in sorted(kinds.items())} or None


def _rivals(ledger: LedgerCore, cmd: AssertFact) -> list[str]:
    """Active facts a `one`-valued write without `supersedes` would contradict (refused
    here when the policy says so)."""
    pol = ledger.policy.policy.cardinality
    if cmd.supersedes is not None or pol.of(cmd.predicate) != "one":
        return []
    rivals = ledger.db.facts.active_of(cmd.subject, cmd.predicate)
    if rivals and pol.contradiction == "refuse":
        raise LedgerError("contradiction", f"{cmd.subject} {cmd.predicate} already has a believed "
                          f"value ({', '.join(rivals)}) and the policy allows one at a time: name "
                          "the fact this replaces in `supersedes`", contradicts=rivals)
    return rivals


def _pending(ledger: LedgerCore, replaced: Any) -> bool:
    """Whether the fact's replacement is a claim still waiting for review (not yet believed)."""
    if replaced is None or replaced.superseded_by is None:
        return False
    replacement = ledger.db.facts.get(replaced.superseded_by)
    return (replacement is not None and replacement.ended is None
            and lifecycle.effective_rank(replacement) == 0)


def previously_forgotten(ledger: LedgerCore, subject: str, predicate: str, value_text: str) -> bool:
    """Was this value of the subject and predicate forgotten before (by its keyed digest)?"""
    return digests.is_previously_forgotten(ledger, subject, predicate, value_text)


def _fact_event(ledger: LedgerCore, kind: str, fact_id: str, actor: str, fields: dict[str, Any],
                check: Callable[[], object]) -> FactOpResult:
    """One event about an existing fact: check the move, then append it (one transaction).
    A free-text reason is redacted like a value first."""
    fields = retractions.redact_reason(ledger, fields)
    with ledger.transaction():
        check()
        tx_at = ledger.tx_at()
        row = ledger.append(kind, actor, tx_at, fields, fact_id=fact_id)
        fact = _projected(ledger, fact_id)
    return FactOpResult(fact_id=fact_id, event_id=row.hash, seq=row.seq, tx_at=tx_at,
                        status=fact.status)


def affirm(ledger: LedgerCore, cmd: Affirm) -> FactOpResult:
    return _fact_event(ledger, "affirm", cmd.fact_id, cmd.actor, {"session": cmd.session},
                       lambda: lifecycle.check_affirm(ledger.db.facts.get(cmd.fact_id),
                                                      cmd.fact_id))


def hold(ledger: LedgerCore, cmd: Hold | Release) -> FactOpResult:
    kind = "hold" if isinstance(cmd, Hold) else "release"
    check = lifecycle.check_hold if kind == "hold" else lifecycle.check_release
    return _fact_event(ledger, kind, cmd.fact_id, cmd.actor,
                       {"reason": cmd.reason, "session": cmd.session},
                       lambda: check(ledger.db.facts.get(cmd.fact_id), cmd.fact_id))
