"""The ledger service: the one façade the TUI, --batch and the Python API share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel

from custody_app.core import upgrade
from custody_app.core.ledger_core import SYSTEM_ACTOR
from custody_app.domain.commands import (
    Act,
    Actions,
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
from custody_app.domain.readmodels import (
    AsOfResult,
    AssertResult,
    CheckpointResult,
    ClockResult,
    FactOpResult,
    HistoryResult,
    RecallResult,
    RetractResult,
    VerifyResult,
    WhyResult,
)
from custody_app.domain.timeutil import ManualClock, format_time
from custody_app.erasure import epoch, receipts, rotate
from custody_app.erasure.certificate import (
    ErasureCertificate,
    ForgetResult,
    SubjectForgetResult,
    SweepResult,
)
from custody_app.erasure.epoch import EpochResult
from custody_app.erasure.forget import forget, forget_subject
from custody_app.erasure.receipts import ErasuresResult
from custody_app.erasure.rollforward import roll_forward
from custody_app.erasure.rotate import RotateResult
from custody_app.erasure.scrubs import Scrubs
from custody_app.erasure.sweep import sweep
from custody_app.evidence import blast
from custody_app.evidence.actions import search_actions
from custody_app.evidence.checkpoints import sign_checkpoint
from custody_app.evidence.readmodels import ActResult
from custody_app.evidence.verify import verify as verify_ledger
from custody_app.keys import writer_keys
from custody_app.keys.writer_keys import WriterKey
from custody_app.ledger import queries, retractions, writes
from custody_app.ledger.evidence_views import EvidenceViews
from custody_app.ledger.identity import check_identity
from custody_app.ledger.timeline import TimelineReads
from custody_app.recall import threads


class Ledger(EvidenceViews, TimelineReads):
    """A ledger file opened under a policy. Methods take plain values and return read models."""

    # ---- commands ----------------------------------------------------------------------
    def execute(self, command: Command) -> BaseModel:
        """Run one validated command (what --batch calls), as this process's identity."""
        check_identity(self, command)
        return _HANDLERS[type(command)](self, command)

    def assert_fact(self, subject: str, predicate: str, value: Any, *, actor: str,
                    cause: dict[str, Any], **optional: Any) -> AssertResult:
        """Write a fact. Optional: space, provenance, valid_from, valid_to, session,
        supersedes, sources, llm."""
        return self._do(AssertFact, AssertResult, subject=subject, predicate=predicate,
                        value=value, actor=actor, cause=cause, **optional)

    def retract(self, fact_id: str, *, actor: str, reason: str, session: str | None = None,
                provenance: str | None = None) -> RetractResult:
        """Retract a fact. Another writer's fact, retracted by a writer whose writes would be
        claimed, waits in the review queue (`pending`) and stays believed meanwhile."""
        return self._do(Retract, RetractResult, fact_id=fact_id, actor=actor, reason=reason,
                        session=session, provenance=provenance)

    def confirm(self, fact_id: str, *, actor: str, reason: str | None = None,
                session: str | None = None, retraction: bool = False,
                retraction_event: str | None = None) -> FactOpResult:
        """Lift a quarantined fact; with `retraction` (or `retraction_event`, the event id of
        the pending retraction reviewed), confirm its pending retraction."""
        return self._do(Confirm, FactOpResult, fact_id=fact_id, actor=actor, reason=reason,
                        session=session, retraction=retraction, retraction_event=retraction_event)

    def reject(self, fact_id: str, *, actor: str, reason: str,
               session: str | None = None, retraction: bool = False,
               retraction_event: str | None = None) -> FactOpResult:
        """Turn a quarantined fact down; with `retraction` (or `retraction_event`), discard
        its pending retraction."""
        return self._do(Reject, FactOpResult, fact_id=fact_id, actor=actor, reason=reason,
                        session=session, retraction=retraction, retraction_event=retraction_event)

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
        """Sign the chain head with the ledger key, as a `checkpoint` event (the Python API's,
        and the closing one of every batch run, an agent's included: not an agent's op)."""
        checked = parse_command(Checkpoint, {"actor": actor})
        assert isinstance(checked, Checkpoint)
        return sign_checkpoint(self, checked.actor)

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

    def present_writer_key(self, actor: str, key: bytes | WriterKey) -> bool:
        """Hold `actor`'s writer key (the private key file's bytes, what `writer-key` wrote) if
        the policy registers its public half for `actor`: from then on every event written as
        `actor` is signed with it, and its writes may declare provenance above `claimed` even
        where the policy refuses declared provenance. Returns whether the key was accepted (a
        wrong key, or a public key, changes nothing)."""
        if not isinstance(key, WriterKey):
            try:
                key = writer_keys.parse_key(key)
            except LedgerError:
                return False
        return self.hold_writer_key(actor, key)

    def act(self, session: str, tool: str, ref: str, outcome: str, *, actor: str,
            args_digest: str | None = None, subject: str | None = None,
            receipt: dict[str, Any] | None = None,
            cause: dict[str, Any] | None = None) -> ActResult:
        """Record an action an agent took in a session (tool, a reference such as a
        transaction id, its outcome, optionally a digest of its arguments, the subject it
        concerned and the tool gateway's signed receipt, checked like a write's)."""
        return self._do(Act, ActResult, session=session, tool=tool, ref=ref, outcome=outcome,
                        actor=actor, args_digest=args_digest, subject=subject, receipt=receipt,
                        cause=cause)

    def rotate_index_key(self) -> RotateResult:
        """Re-key the word index under a fresh key and destroy the old key."""
        return rotate.rotate_index_key(self)

    def rotate_epoch(self) -> EpochResult:
        """Re-key the word index, re-wrap every key under a new epoch key and destroy the old
        one (its key file replaced): copies taken before no longer yield what was erased."""
        return epoch.rotate_epoch(self)

    def erasures(self, subject: str | None = None) -> ErasuresResult:
        """The erasure receipts; with `subject`, whether it was erased (by peppered hash)."""
        return receipts.erasures(self, subject)

    # ---- what the façade adds to the core ------------------------------------------------
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scrubs = Scrubs()
        # Certificates of erasures another process left pending, finished by this open.
        self.finished_at_open: list[ErasureCertificate] = []
        self.blas_hold: threads.Hold | None = None  # taken by `open`, given back by `close`

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.blas_hold is not None:
                self.blas_hold.release()

    @classmethod
    def open(cls, path: str | Path, **options: Any) -> Self:
        """Open (creating if missing) a ledger and its key store (`<ledger>.keys` by default;
        never a new key store for a ledger that holds events: `keystore_missing`), and finish
        any scrub an earlier process left pending. Options: policy, clock, readonly, id_seed,
        keystore, reindex_progress (see `LedgerCore.open`). numpy's BLAS runs on one thread
        while the ledger is open (`recall.threads`: its spinning workers doubled ingest CPU)."""
        blas = threads.hold()  # before the open: a reindex at open runs BLAS work
        try:
            ledger = super().open(path, **options)
        except BaseException:
            blas.release()
            raise
        ledger.blas_hold = blas
        try:
            if not ledger.readonly:
                roll_forward(ledger)
                # After the roll-forward: no text is sealed under a key about to be destroyed.
                upgrade.seal_existing(ledger)
            if not ledger.readonly and (ledger.db.erasure.pending()
                                        or ledger.db.erasure.rewrite_due()):
                ledger.finished_at_open = ledger.finish_scrubs()
        except BaseException:
            ledger.close()
            raise
        return ledger

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group several operations in one write transaction; each still fails alone. After
        the outermost one commits, a scrub a reader blocked earlier is tried again."""
        with super().transaction():
            yield
        if self.scrubs.due and self.db.depth == 0 and not self.scrubs.finishing:
            self.scrubs.finish(self, wait=False)

    def finish_scrubs(self, *, wait: bool = True) -> list[ErasureCertificate]:
        """Finish erasures whose WAL checkpoint a reader blocked; returns their certificates
        re-issued (empty while a reader still blocks it, or when nothing was pending)."""
        return self.scrubs.finish(self, wait=wait)

    def verify(self, progress: Callable[[int], None] | None = None, *,
               public_key: str | None = None, deep: bool = False) -> VerifyResult:
        """Walk the whole chain; `valid` is false with the first bad seq when it is broken.
        Signed checkpoints are checked under `public_key` (PEM), else the ledger's own key;
        `deep` compares the recall indexes' content too."""
        return verify_ledger(self, progress, public_key=public_key, deep=deep)


def _set_clock(ledger: Ledger, cmd: SetClock) -> ClockResult:
    """Set the manual clock (replays only): never before the ledger's newest event."""
    if not isinstance(ledger.clock, ManualClock):
        raise LedgerError("manual_clock_disabled",
                          "the clock can only be set when started with --manual-clock")
    head = ledger.db.events.head()
    if head is not None and cmd.set < head[2]:
        raise LedgerError("clock_backwards",
                          f"cannot set the clock to {cmd.set}, before the ledger's last "
                          f"transaction time {head[2]}")
    if ledger.clock.is_set and cmd.set < format_time(ledger.clock.now()):
        raise LedgerError("clock_backwards",
                          f"cannot set the clock to {cmd.set}, before the time it was set "
                          f"to last, {format_time(ledger.clock.now())}")
    ledger.clock.set(datetime.fromisoformat(cmd.set.replace("Z", "+00:00")))
    return ClockResult(now=cmd.set)


# Each command's handler, in the subpackage that owns it; the façade only dispatches.
_HANDLERS: dict[type[Command], Callable[[Ledger, Any], BaseModel]] = {
    AssertFact: writes.assert_fact, Retract: retractions.retract, Confirm: retractions.review,
    Reject: retractions.review, Affirm: writes.affirm, Hold: writes.hold, Release: writes.hold,
    AsOf: queries.as_of, History: queries.history, Why: queries.why, Recall: queries.recall,
    Verify: lambda ledger, cmd: ledger.verify(), SetClock: _set_clock,
    Forget: lambda ledger, cmd: forget(ledger, ledger.scrubs, cmd),
    ForgetSubject: lambda ledger, cmd: forget_subject(ledger, ledger.scrubs, cmd),
    Sweep: lambda ledger, cmd: sweep(ledger, ledger.scrubs, cmd),
    Checkpoint: lambda ledger, cmd: sign_checkpoint(ledger, cmd.actor),
    Act: blast.act, Blast: lambda ledger, cmd: blast.blast(ledger, cmd.fact_id),
    Explain: lambda ledger, cmd: blast.explain(ledger, cmd.action_ref),
    Actions: search_actions,
}
