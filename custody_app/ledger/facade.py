"""The ledger service: the one façade the TUI, --batch and the Python API share."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from custody_app.core import reads
from custody_app.core.ledger_core import SYSTEM_ACTOR
from custody_app.domain import lifecycle
from custody_app.domain.commands import (
    Act,
    Affirm,
    AsOf,
    AssertFact,
    Blast,
    Checkpoint,
    Command,
    Confirm,
    Explain,
    Forget,
    ForgetSubject,
    History,
    Hold,
    Recall,
    Reject,
    Release,
    Retract,
    SetClock,
    Sweep,
    Verify,
    Why,
    parse_command,
)
from custody_app.domain.errors import LedgerError
from custody_app.domain.models import PROV_RANK, PROVENANCES
from custody_app.domain.readmodels import (
    ActResult,
    AsOfResult,
    AssertResult,
    BlastResult,
    CheckpointResult,
    ClockResult,
    ExplainResult,
    FactOpResult,
    FactView,
    HistoryResult,
    RecallResult,
    VerifyResult,
    WhyResult,
)
from custody_app.domain.timeutil import ManualClock, format_time, parse_time
from custody_app.erasure import forget as erasure
from custody_app.erasure.certificate import (
    ForgetResult,
    SubjectForgetResult,
    SweepResult,
)
from custody_app.evidence import blast
from custody_app.evidence import packs as evidence
from custody_app.evidence.checkpoints import sign_checkpoint
from custody_app.evidence.export import ExportResult
from custody_app.evidence.export import export as export_events
from custody_app.evidence.packs import EvidencePack
from custody_app.keys import writer_keys
from custody_app.ledger import writes
from custody_app.ledger.browse import BrowseReads
from custody_app.recall import index as recall

R = TypeVar("R", bound=BaseModel)



class Ledger(BrowseReads):
    """A ledger file opened under a policy. Methods take plain values and return read models."""

    # ---- commands ----------------------------------------------------------------------
    def execute(self, command: Command) -> BaseModel:
        """Run one validated command (what --batch calls)."""
        handler: Callable[[Any], BaseModel] = getattr(self, _HANDLERS[type(command)])
        return handler(command)

    def _do(self, kind: type[Command], result: type[R], **fields: Any) -> R:
        out = self.execute(parse_command(kind, fields))
        assert isinstance(out, result)
        return out

    def assert_fact(self, subject: str, predicate: str, value: Any, *, actor: str,
                    cause: dict[str, Any], **optional: Any) -> AssertResult:
        """Write a fact. Optional: space, provenance, valid_from, valid_to, session,
        supersedes, sources, llm."""
        return self._do(AssertFact, AssertResult, subject=subject, predicate=predicate,
                        value=value, actor=actor, cause=cause, **optional)

    def retract(self, fact_id: str, *, actor: str, reason: str,
                session: str | None = None) -> FactOpResult:
        return self._do(Retract, FactOpResult, fact_id=fact_id, actor=actor, reason=reason,
                        session=session)

    def confirm(self, fact_id: str, *, actor: str, reason: str | None = None,
                session: str | None = None) -> FactOpResult:
        return self._do(Confirm, FactOpResult, fact_id=fact_id, actor=actor, reason=reason,
                        session=session)

    def reject(self, fact_id: str, *, actor: str, reason: str,
               session: str | None = None) -> FactOpResult:
        return self._do(Reject, FactOpResult, fact_id=fact_id, actor=actor, reason=reason,
                        session=session)

    def affirm(self, fact_id: str, *, actor: str, session: str | None = None) -> FactOpResult:
        return self._do(Affirm, FactOpResult, fact_id=fact_id, actor=actor, session=session)

    def recall(self, query: str, k: int = 10, **options: Any) -> RecallResult:
        """Facts believed now that match `query` (hybrid lexical + vector). Options: space,
        subject, session (records a `served` event), include_claimed."""
        return self._do(Recall, RecallResult, query=query, k=k, **options)

    def hold(self, fact_id: str, *, actor: str, reason: str,
             session: str | None = None) -> FactOpResult:
        """Legal hold: the fact cannot be forgotten or swept (it can still be retracted)."""
        return self._do(Hold, FactOpResult, fact_id=fact_id, actor=actor, reason=reason,
                        session=session)

    def release(self, fact_id: str, *, actor: str, reason: str,
                session: str | None = None) -> FactOpResult:
        return self._do(Release, FactOpResult, fact_id=fact_id, actor=actor, reason=reason,
                        session=session)

    def forget(self, fact_id: str, *, actor: str, reason: str) -> ForgetResult:
        """Erase a fact's value and every fact derived from it; returns the certificate."""
        return self._do(Forget, ForgetResult, fact_id=fact_id, actor=actor, reason=reason)

    def forget_subject(self, subject: str, *, actor: str, reason: str) -> SubjectForgetResult:
        """Erase every fact of a data principal, what derives from them, and its data key."""
        return self._do(ForgetSubject, SubjectForgetResult, subject=subject, actor=actor,
                        reason=reason)

    def sweep(self, **options: Any) -> SweepResult:
        """Expire what retention allows. Options: before, space, dry_run, actor, reason."""
        return self._do(Sweep, SweepResult, **options)

    def checkpoint(self, *, actor: str = SYSTEM_ACTOR) -> CheckpointResult:
        """Sign the chain head with the ledger key, as a `checkpoint` event."""
        return self._do(Checkpoint, CheckpointResult, actor=actor)

    def as_of(self, valid_at: str | None = None, tx_at: str | None = None,
              **filters: Any) -> AsOfResult:
        """Facts believed at valid time `valid_at` as the ledger knew them at `tx_at`.
        Filters: space, subject, predicate, include ('claimed'|'attested'|'verified'), limit."""
        return self._do(AsOf, AsOfResult, valid_at=valid_at, tx_at=tx_at, **filters)

    def history(self, fact_id: str, session: str | None = None) -> HistoryResult:
        """Every event that touched the fact; with `session`, recorded as served to it."""
        return self._do(History, HistoryResult, fact_id=fact_id, session=session)

    def why(self, fact_id: str, session: str | None = None) -> WhyResult:
        """Why the fact is (or was) believed; with `session`, recorded as served to it."""
        return self._do(Why, WhyResult, fact_id=fact_id, session=session)

    def set_clock(self, moment: str) -> ClockResult:
        return self._do(SetClock, ClockResult, set=moment)

    def present_writer_key(self, actor: str, key: bytes) -> bool:
        """Prove that `actor` holds a writer key the policy registers; from then on its writes
        may declare provenance above `claimed` even where the policy refuses declared
        provenance. Returns whether the key was accepted (a wrong key changes nothing)."""
        accepted = writer_keys.vouches(self.policy.policy, actor, key)
        if accepted:
            self.vouched_writers.add(actor)
        return accepted

    def act(self, session: str, tool: str, ref: str, outcome: str, *, actor: str,
            args_digest: str | None = None) -> ActResult:
        """Record an action an agent took in a session (tool, a reference such as a
        transaction id, its outcome, optionally a digest of its arguments)."""
        return self._do(Act, ActResult, session=session, tool=tool, ref=ref, outcome=outcome,
                        actor=actor, args_digest=args_digest)

    def blast(self, fact_id: str) -> BlastResult:
        """Everything that could have relied on a fact: sessions served it, their later writes
        and actions, derived facts, to a fixpoint. An upper bound."""
        return self._do(Blast, BlastResult, fact_id=fact_id)

    def pack(self, fact_id: str) -> EvidencePack:
        """One fact's whole story (events with their chain links, holds, blast radius, policy
        texts, forget certificate), signed with the ledger's Ed25519 key."""
        return evidence.build_pack(self, fact_id)

    def export(self, path: str | Path) -> ExportResult:
        """The whole event log as JSON Lines at `path` (erased values null), with a trailer
        signed by the ledger key; `offline.verify_export` checks it from the file alone."""
        return export_events(self, path)

    def explain(self, action_ref: str) -> ExplainResult:
        """What had been served to an action's session before it, and which of those facts
        were since retracted or erased."""
        return self._do(Explain, ExplainResult, action_ref=action_ref)

    # ---- handlers ----------------------------------------------------------------------
    def _assert(self, cmd: AssertFact) -> AssertResult:
        return writes.assert_fact(self, cmd)

    def _fact_event(self, kind: str, fact_id: str, actor: str, fields: dict[str, Any],
                    check: Callable[[], object]) -> FactOpResult:
        with self._writing():
            check()
            tx_at = self._tx_at()
            row = self._append(kind, actor, tx_at, fields, fact_id=fact_id)
            fact = reads.require_fact(self.db, fact_id)
        return FactOpResult(fact_id=fact_id, event_id=row.hash, seq=row.seq, tx_at=tx_at,
                            status=fact.status)

    def _retract(self, cmd: Retract) -> FactOpResult:
        return self._fact_event("retract", cmd.fact_id, cmd.actor,
                                {"reason": cmd.reason, "session": cmd.session},
                                lambda: lifecycle.check_retract(self.db.facts.get(cmd.fact_id),
                                                                cmd.fact_id))

    def _review(self, cmd: Confirm | Reject) -> FactOpResult:
        kind = "confirm" if isinstance(cmd, Confirm) else "reject"
        return self._fact_event(
            kind, cmd.fact_id, cmd.actor, {"reason": cmd.reason, "session": cmd.session},
            lambda: lifecycle.check_review(self.db.facts.get(cmd.fact_id), cmd.fact_id,
                                           cmd.actor, self.policy.policy))

    def _affirm(self, cmd: Affirm) -> FactOpResult:
        return self._fact_event("affirm", cmd.fact_id, cmd.actor, {"session": cmd.session},
                                lambda: lifecycle.check_affirm(self.db.facts.get(cmd.fact_id),
                                                               cmd.fact_id))

    def _hold(self, cmd: Hold | Release) -> FactOpResult:
        kind = "hold" if isinstance(cmd, Hold) else "release"
        check = lifecycle.check_hold if kind == "hold" else lifecycle.check_release
        return self._fact_event(kind, cmd.fact_id, cmd.actor,
                                {"reason": cmd.reason, "session": cmd.session},
                                lambda: check(self.db.facts.get(cmd.fact_id), cmd.fact_id))

    def _forget(self, cmd: Forget) -> ForgetResult:
        return erasure.forget(self, cmd)

    def _forget_subject(self, cmd: ForgetSubject) -> SubjectForgetResult:
        return erasure.forget_subject(self, cmd)

    def _sweep(self, cmd: Sweep) -> SweepResult:
        return erasure.sweep(self, cmd)

    def _checkpoint(self, cmd: Checkpoint) -> CheckpointResult:
        return sign_checkpoint(self, cmd.actor)

    def _recall(self, cmd: Recall) -> RecallResult:
        with self.db.read():
            result = recall.recall(self, cmd)
        if cmd.session is not None:
            self._serve(cmd.session, [h.fact.fact_id for h in result.results], "recall")
        return result

    def _as_of(self, cmd: AsOf) -> AsOfResult:
        with self.db.read():
            now = self._now()
            valid_at, tx_at = cmd.valid_at or now, cmd.tx_at or now
            rows = self.db.facts.as_of(
                valid_at=valid_at, tx_at=tx_at, min_rank=PROV_RANK[cmd.include],
                include_pending=cmd.include == "claimed", subject=cmd.subject,
                predicate=cmd.predicate, space=cmd.space, limit=cmd.limit or -1)
        facts = []
        for r in rows:
            text = self.values.open_subject(r.fact_id, r.subject, r.value)
            facts.append(FactView(
                fact_id=r.fact_id, subject=r.subject, predicate=r.predicate,
                value=reads.load_value(text), space=r.space, status=r.status,
                provenance=PROVENANCES[r.prov_rank], valid_from=r.valid_from,
                valid_to=r.valid_to, actor=r.actor, erased=text is None))
        if cmd.session is not None:
            self._serve(cmd.session, [f.fact_id for f in facts], "as_of")
        return AsOfResult(valid_at=valid_at, tx_at=tx_at, facts=facts)

    def _history(self, cmd: History) -> HistoryResult:
        with self.db.read():
            result = reads.history(self.db, self.values, cmd.fact_id)
        if cmd.session is not None:
            self._serve(cmd.session, [cmd.fact_id], "history")
        return result

    def _why(self, cmd: Why) -> WhyResult:
        with self.db.read():
            result = reads.why(self.db, self.values, cmd.fact_id)
            fact = reads.require_fact(self.db, cmd.fact_id)
            b = recall.salience(self, fact, parse_time(self._now()))
        b = b if b > -99.0 else -99.0
        if cmd.session is not None:
            self._serve(cmd.session, [cmd.fact_id], "why")
        return result.model_copy(update={"salience": round(b, 4),
                                         "salience_class": recall.salience_class(self, b)})

    def _verify(self, cmd: Verify) -> VerifyResult:
        return self.verify()

    def _act(self, cmd: Act) -> ActResult:
        return blast.act(self, cmd)

    def _blast(self, cmd: Blast) -> BlastResult:
        return blast.blast(self, cmd.fact_id)

    def _explain(self, cmd: Explain) -> ExplainResult:
        return blast.explain(self, cmd.action_ref)

    def _set_clock(self, cmd: SetClock) -> ClockResult:
        if not isinstance(self.clock, ManualClock):
            raise LedgerError("manual_clock_disabled",
                              "the clock can only be set when started with --manual-clock")
        head = self.db.events.head()
        if head is not None and cmd.set < head[2]:
            raise LedgerError("clock_backwards",
                              f"cannot set the clock to {cmd.set}, before the ledger's last "
                              f"transaction time {head[2]}")
        if self.clock.is_set and cmd.set < format_time(self.clock.now()):
            raise LedgerError("clock_backwards",
                              f"cannot set the clock to {cmd.set}, before the time it was set "
                              f"to last, {format_time(self.clock.now())}")
        self.clock.set(datetime.fromisoformat(cmd.set.replace("Z", "+00:00")))
        return ClockResult(now=cmd.set)


_HANDLERS: dict[type[Command], str] = {
    AssertFact: "_assert", Retract: "_retract", Confirm: "_review", Reject: "_review",
    Affirm: "_affirm", AsOf: "_as_of", History: "_history", Why: "_why", Verify: "_verify",
    SetClock: "_set_clock", Hold: "_hold", Release: "_hold", Forget: "_forget",
    ForgetSubject: "_forget_subject", Sweep: "_sweep", Checkpoint: "_checkpoint",
    Recall: "_recall", Act: "_act", Blast: "_blast", Explain: "_explain",
}
