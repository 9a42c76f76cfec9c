"""The read commands: as_of, history, why and recall. Each reads in one read transaction and,
when it names a session, then records what it served to that session."""

from __future__ import annotations

from custody_app.core import reads
from custody_app.core.ledger_core import LedgerCore
from custody_app.domain.commands import AsOf, History, Recall, Why
from custody_app.domain.models import PROV_RANK, PROVENANCES
from custody_app.domain.policy import CardinalityPolicy
from custody_app.domain.readmodels import (
    AsOfResult,
    ContestedAsOf,
    Contradiction,
    FactView,
    HistoryResult,
    RecallResult,
    WhyResult,
)
from custody_app.domain.timeutil import parse_time
from custody_app.recall.salience import salience, salience_class
from custody_app.recall.search import search


def recall(ledger: LedgerCore, cmd: Recall) -> RecallResult:
    with ledger.db.read():
        result = search(ledger.index, cmd, parse_time(ledger.now()))
    if cmd.session is not None:
        ledger.serve(cmd.session, [h.fact.fact_id for h in result.results], "recall")
    return result


def as_of(ledger: LedgerCore, cmd: AsOf) -> AsOfResult:
    with ledger.db.read():
        now = ledger.now()
        valid_at, tx_at = cmd.valid_at or now, cmd.tx_at or now
        rows = ledger.db.facts.as_of(
            valid_at=valid_at, tx_at=tx_at, min_rank=PROV_RANK[cmd.include],
            include_pending=cmd.include == "claimed", subject=cmd.subject,
            predicate=cmd.predicate, space=cmd.space, limit=cmd.limit or -1)
    facts = []
    for r in rows:
        text = ledger.values.open_subject(r.fact_id, r.subject, r.value)
        sealed = ledger.values.unreadable(r.value)
        facts.append(FactView(
            fact_id=r.fact_id, subject=r.subject, predicate=r.predicate,
            value=reads.load_value(text), space=r.space, status=r.status,
            provenance=PROVENANCES[r.prov_rank], valid_from=r.valid_from,
            valid_to=r.valid_to, actor=r.actor, erased=text is None and not sealed,
            sealed=sealed))
    if cmd.session is not None:
        ledger.serve(cmd.session, [f.fact_id for f in facts], "as_of")
    contested = contradictions(facts, ledger.policy.policy.cardinality)
    if contested:
        return ContestedAsOf(valid_at=valid_at, tx_at=tx_at, facts=facts, contradictions=contested)
    return AsOfResult(valid_at=valid_at, tx_at=tx_at, facts=facts)


def contradictions(facts: list[FactView], policy: CardinalityPolicy) -> list[Contradiction]:
    """Subjects holding more than one value at once of a predicate the policy says has one."""
    by_key: dict[tuple[str, str], list[str]] = {}
    for f in facts:
        if policy.of(f.predicate) == "one":
            by_key.setdefault((f.subject, f.predicate), []).append(f.fact_id)
    return [Contradiction(subject=s, predicate=p, fact_ids=ids)
            for (s, p), ids in by_key.items() if len(ids) > 1]


def history(ledger: LedgerCore, cmd: History) -> HistoryResult:
    with ledger.db.read():
        result = reads.history(ledger.db, ledger.values, cmd.fact_id)
    if cmd.session is not None:
        ledger.serve(cmd.session, [cmd.fact_id], "history")
    return result


def why(ledger: LedgerCore, cmd: Why) -> WhyResult:
    with ledger.db.read():
        result = reads.why(ledger.db, ledger.values, cmd.fact_id)
        fact = reads.require_fact(ledger.db, cmd.fact_id)
        b = salience(ledger.db, ledger.policy, fact, parse_time(ledger.now()))
    b = b if b > -99.0 else -99.0
    if cmd.session is not None:
        ledger.serve(cmd.session, [cmd.fact_id], "why")
    return result.model_copy(update={"salience": round(b, 4),
                                     "salience_class": salience_class(ledger.policy, b)})
