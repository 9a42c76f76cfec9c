"""The ledger service: the one façade the TUI, --batch and the Python API share."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from custody_app import erasure, lifecycle, reads, recall
from custody_app.certificate import (
    ErasureCertificate,
    ForgetResult,
    SubjectForgetResult,
    SweepResult,
)
from custody_app.chain import GENESIS, canonical, commitment, event_hash, new_salt, verify_chain
from custody_app.checkpoints import CheckpointAudit, sign_checkpoint
from custody_app.commands import (
    Affirm,
    AsOf,
    AssertFact,
    Checkpoint,
    Command,
    Confirm,
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
    refusal,
)
from custody_app.embedders import Embedder, make_embedder
from custody_app.errors import LedgerError
from custody_app.keys import KeyRing, keystore_path_for, master_from_env
from custody_app.models import EVENT_MODELS, PROV_RANK, PROVENANCES
from custody_app.policy import LoadedPolicy, load_policy
from custody_app.projector import MemoryProjection, apply_event
from custody_app.readmodels import (
    AsOfResult,
    AssertResult,
    CheckpointResult,
    ClockResult,
    FactOpResult,
    FactView,
    HistoryResult,
    RebuildResult,
    RecallResult,
    VerifyResult,
    WhyResult,
)
from custody_app.redaction import redact
from custody_app.timeutil import Clock, ManualClock, WallClock, format_time, parse_time
from custody_app.values import ValueCodec
from store import LedgerFile, StoreError, open_ledger
from store.rows import EventRow

SYSTEM_ACTOR = "system:custody"
R = TypeVar("R", bound=BaseModel)


class Ledger:
    """A ledger file opened under a policy. Methods take plain values and return read models."""

    def __init__(self, db: LedgerFile, policy: LoadedPolicy, clock: Clock | None = None,
                 *, keys: KeyRing | None = None, readonly: bool = False,
                 id_seed: int | None = None) -> None:
        self.db = db
        self.policy = policy
        self.clock: Clock = clock or WallClock()
        self.keys = keys
        self.values = ValueCodec(keys)
        self.embedder: Embedder = make_embedder(policy.policy.recall.embedder)
        self.readonly = readonly
        self._rng = random.Random(id_seed) if id_seed is not None else None
        self._head: tuple[int, str, str] | None = None
        self._recorded_policy: str | None = None
        # The key fence compares against when this unit of work began (see unit_of_work()).
        self.work_started = format_time(self.clock.now())
        # Erasures whose checkpoint a reader blocked: certificate, erased bytes, short values.
        self._pending: dict[str, tuple[ErasureCertificate, list[bytes], int]] = {}
        self._scrub_due = False
        self._finishing = False

    @classmethod
    def open(cls, path: str | Path, *, policy: str | Path | LoadedPolicy | None = None,
             clock: Clock | None = None, readonly: bool = False, id_seed: int | None = None,
             keystore: str | Path | None = None) -> Ledger:
        """Open (creating if missing) a ledger and its key store (`<ledger>.keys` by default).
        Read-only opens create nothing; without a key store their values read as erased."""
        loaded = policy if isinstance(policy, LoadedPolicy) else load_policy(policy)
        master_from_env()  # a malformed master key is refused before any file is created
        try:
            db = open_ledger(path, readonly=readonly)
        except StoreError as exc:
            raise LedgerError(exc.code, str(exc)) from None
        try:
            keys = None
            if not readonly or keystore_path_for(path, keystore).exists():
                keys = KeyRing.open(path, keystore)
        except BaseException:
            db.close()
            raise
        ledger = cls(db, loaded, clock, keys=keys, readonly=readonly, id_seed=id_seed)
        if not readonly:
            if db.recall.embedder() != (ledger.embedder.name, ledger.embedder.dimensions):
                ledger.reindex()
            if db.erasure.pending():
                ledger.finish_scrubs()
        return ledger

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Rebuild the recall indexes with the policy's embedder (done at open when the
        embedder changed); returns how many believed facts were indexed."""
        with self._writing():
            return recall.rebuild_index(self, progress)

    def _index_key(self) -> bytes:
        if self.keys is None:
            raise LedgerError("keystore_missing", "the key store is not available")
        return self.keys.index_key

    def close(self) -> None:
        if self.keys is not None:
            self.keys.close()
        self.db.close()

    @contextmanager
    def unit_of_work(self) -> Iterator[None]:
        """Begin new work now: writes inside may re-key a subject erased before this instant."""
        before = self.work_started
        self.work_started = format_time(self.clock.now())
        try:
            yield
        finally:
            self.work_started = before

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- transactions -------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group several operations in one write transaction; each still fails alone."""
        with self._writing():
            yield

    @contextmanager
    def _writing(self) -> Iterator[None]:
        if self.readonly:
            raise LedgerError("read_only", "this ledger was opened read-only")
        keys = self.keys.store.write() if self.keys is not None else nullcontext()
        try:
            # The key store commits first (inner), so no committed value ever lacks its key.
            with self.db.write(), keys:
                if self.db.depth == 1:
                    self._head = self.db.events.head()
                    self._recorded_policy = self.db.events.last_policy_hash()
                saved = (self._head, self._recorded_policy)
                try:
                    yield
                except BaseException:
                    self._head, self._recorded_policy = saved
                    if self.keys is not None:
                        self.keys.drop_cache()
                    raise
        except StoreError as exc:
            raise LedgerError(exc.code, str(exc)) from None
        if self._scrub_due and self.db.depth == 0 and not self._finishing:
            self.finish_scrubs(wait=False)

    def _tx_at(self) -> str:
        now = format_time(self.clock.now())
        last = self._head[2] if self._head else ""
        return now if now > last else last

    def _now(self) -> str:
        """'Now' for reads: never before the newest event, whatever the wall clock says."""
        head = self.db.events.head()
        now = format_time(self.clock.now())
        return head[2] if head and head[2] > now else now

    def _new_fact_id(self, tx_at: str) -> str:
        millis = int(datetime.fromisoformat(tx_at.replace("Z", "+00:00")).timestamp() * 1000)
        tail = self._rng.getrandbits(40) if self._rng else int.from_bytes(os.urandom(5), "big")
        return f"f_{millis:012x}{tail:010x}"

    def _append(self, kind: str, actor: str, tx_at: str, fields: dict[str, Any], *,
                fact_id: str | None = None, value: bytes | None = None,
                salt: str | None = None, subject: str | None = None,
                plaintext: str | None = None) -> EventRow:
        """Validate, hash, store and project one event (inside a write transaction)."""
        if kind != "policy" and self._recorded_policy != self.policy.hash:
            self._record_policy(tx_at)
        seq = (self._head[0] if self._head else 0) + 1
        prev = self._head[1] if self._head else GENESIS
        envelope: dict[str, Any] = {"seq": seq, "kind": kind, "tx_at": tx_at, "actor": actor,
                                    "policy_hash": self.policy.hash}
        if fact_id is not None:
            envelope["fact_id"] = fact_id
        envelope.update({k: v for k, v in fields.items() if v is not None})
        try:
            EVENT_MODELS[kind].model_validate(envelope)
        except ValidationError as exc:
            # An invalid event never enters the log, and the caller gets a coded refusal.
            raise refusal(exc) from None
        body = canonical(envelope)
        row = EventRow(seq, kind, tx_at, actor, self.policy.hash, fact_id, subject, body, value,
                       salt, prev, event_hash(prev, body))
        self.db.events.append(row)
        changes = apply_event(self.db.facts, kind, seq, tx_at, fact_id, envelope, subject)
        if changes:
            recall.sync(self, changes, {fact_id: plaintext} if fact_id and plaintext else {})
        self._head = (seq, row.hash, tx_at)
        return row

    def _record_policy(self, tx_at: str) -> None:
        p = self.policy
        self.db.policies.put(p.hash, p.canonical, p.source, p.path)
        self._recorded_policy = p.hash
        self._append("policy", SYSTEM_ACTOR, tx_at, {})

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

    def retract(self, fact_id: str, *, actor: str, reason: str) -> FactOpResult:
        return self._do(Retract, FactOpResult, fact_id=fact_id, actor=actor, reason=reason)

    def confirm(self, fact_id: str, *, actor: str, reason: str | None = None) -> FactOpResult:
        return self._do(Confirm, FactOpResult, fact_id=fact_id, actor=actor, reason=reason)

    def reject(self, fact_id: str, *, actor: str, reason: str) -> FactOpResult:
        return self._do(Reject, FactOpResult, fact_id=fact_id, actor=actor, reason=reason)

    def affirm(self, fact_id: str, *, actor: str) -> FactOpResult:
        return self._do(Affirm, FactOpResult, fact_id=fact_id, actor=actor)

    def recall(self, query: str, k: int = 10, **options: Any) -> RecallResult:
        """Facts believed now that match `query` (hybrid lexical + vector). Options: space,
        subject, session (records a `served` event), include_claimed."""
        return self._do(Recall, RecallResult, query=query, k=k, **options)

    def hold(self, fact_id: str, *, actor: str, reason: str) -> FactOpResult:
        """Legal hold: the fact cannot be forgotten or swept (it can still be retracted)."""
        return self._do(Hold, FactOpResult, fact_id=fact_id, actor=actor, reason=reason)

    def release(self, fact_id: str, *, actor: str, reason: str) -> FactOpResult:
        return self._do(Release, FactOpResult, fact_id=fact_id, actor=actor, reason=reason)

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

    def finish_scrubs(self, *, wait: bool = True) -> list[ErasureCertificate]:
        """Finish erasures whose WAL checkpoint a reader blocked; returns their certificates
        re-issued (empty while a reader still blocks it, or when nothing was pending, or when
        the certificates were issued by another process: then only the checkpoint is done)."""
        with self.db.read():
            pending = self.db.erasure.pending()
        if not pending and not self._pending:
            self._scrub_due = False
            return []
        if not self.db.wal_checkpoint(wait=wait).complete:
            self._scrub_due = True
            return []
        self._clear_pending()
        certificates = [erasure.reissue(self, cert, needles, short)
                        for cert, needles, short in self._pending.values()]
        self._pending.clear()
        self._scrub_due = False
        return certificates

    def _clear_pending(self) -> None:
        """After a complete checkpoint: drop the pending-scrub rows (written with each erasure,
        so a crash cannot lose them) and leave the WAL empty again."""
        self._finishing = True
        try:
            with self._writing():
                self.db.erasure.clear_pending()
        finally:
            self._finishing = False
        self.db.wal_checkpoint(wait=False)

    def _remember_pending(self, cert: ErasureCertificate, needles: list[bytes],
                          short_values: int) -> None:
        """Keep what a re-issued certificate needs; the rows were written with the erasure."""
        self._pending[cert.root or cert.subject_hash or cert.issued_at] = (cert, needles,
                                                                          short_values)
        self._scrub_due = True

    def as_of(self, valid_at: str | None = None, tx_at: str | None = None,
              **filters: Any) -> AsOfResult:
        """Facts believed at valid time `valid_at` as the ledger knew them at `tx_at`.
        Filters: space, subject, predicate, include ('claimed'|'attested'|'verified'), limit."""
        return self._do(AsOf, AsOfResult, valid_at=valid_at, tx_at=tx_at, **filters)

    def history(self, fact_id: str) -> HistoryResult:
        return self._do(History, HistoryResult, fact_id=fact_id)

    def why(self, fact_id: str) -> WhyResult:
        return self._do(Why, WhyResult, fact_id=fact_id)

    def verify(self, progress: Callable[[int], None] | None = None, *,
               public_key: str | None = None) -> VerifyResult:
        """Walk the whole chain; `valid` is false with the first bad seq when it is broken.
        Signed checkpoints are checked under `public_key` (PEM), else the ledger's own key."""
        pem = public_key or (self.keys.public_pem() if self.keys is not None
                             and self.keys.store.meta("signing") is not None else None)
        unchecked = 0

        def opener(row: EventRow, body: dict[str, Any]) -> str | None:
            nonlocal unchecked
            text = self.values.opener(row, body)
            unchecked += text is None
            return text

        with self.db.read():
            audit = CheckpointAudit(self.db.erasure.events_of_kind("checkpoint"), pem)
            report = verify_chain(self.db.events.iter_all(), progress, opener, audit.check)
            index_problems = recall.index_differences(self) if self.db.recall.exists() else []
        valid, bad, problem = report.valid, report.first_bad_seq, report.problem
        if valid and index_problems:
            valid, problem = False, "recall indexes: " + "; ".join(index_problems)
        if valid and public_key is not None and audit.count == 0 and report.events:
            valid, problem = False, ("no signed checkpoint in this ledger: the given public key "
                                     "cannot vouch for any of its events")
        return VerifyResult(valid=valid, events=report.events, head=report.head,
                            first_bad_seq=bad, problem=problem, checkpoints=audit.count,
                            last_checkpoint_seq=audit.last, values_unchecked=unchecked,
                            index_problems=index_problems)

    def set_clock(self, moment: str) -> ClockResult:
        return self._do(SetClock, ClockResult, set=moment)

    # ---- handlers ----------------------------------------------------------------------
    def _assert(self, cmd: AssertFact) -> AssertResult:
        pol = self.policy.policy
        value, findings = redact(cmd.value, pol.redaction.detectors)
        try:
            value_text = canonical(value)
        except Exception as exc:  # rfc8785 raises several types for non-JSON values
            raise LedgerError("bad_request", f"field 'value' is not JSON: {exc}",
                              field="value") from None
        if cmd.provenance != "claimed" and not pol.provenance.allow_declared:
            raise LedgerError("provenance_not_allowed",
                              f"the policy in force does not let writers declare {cmd.provenance}")
        provenance, marks = cmd.provenance, None
        with self._writing():
            if self._previously_forgotten(cmd.subject, cmd.predicate, value_text):
                if pol.erasure.previously_forgotten == "refuse":
                    raise LedgerError(
                        "previously_forgotten",
                        f"this value of {cmd.subject} {cmd.predicate} was forgotten before and "
                        "the policy refuses it")
                provenance, marks = "claimed", ["previously_forgotten"]
            tx_at = self._tx_at()
            valid_from = cmd.valid_from or tx_at
            if cmd.valid_to is not None and cmd.valid_to <= valid_from:
                raise LedgerError("invalid_interval",
                                  f"valid_to {cmd.valid_to} is not after valid_from {valid_from}")
            if cmd.supersedes is not None:
                lifecycle.check_supersede(self.db.facts.get(cmd.supersedes), cmd.supersedes,
                                          cmd.subject, cmd.predicate, valid_from)
            for source in cmd.sources or ():
                lifecycle.check_source(self.db.facts.get(source), source)
            fact_id = self._new_fact_id(tx_at)
            salt = new_salt()
            assert self.keys is not None  # seal() above refused a ledger without its key store
            fields = {
                "subject_ref": self.keys.subject_ref(cmd.subject), "predicate": cmd.predicate,
                "space": cmd.space or pol.default_space, "valid_from": valid_from,
                "valid_to": cmd.valid_to, "provenance": provenance, "marks": marks,
                "cause": cmd.cause.model_dump(exclude_none=True), "session": cmd.session,
                "supersedes": cmd.supersedes,
                "sources": list(dict.fromkeys(cmd.sources)) if cmd.sources else None,
                "llm": cmd.llm.model_dump(exclude_none=True) if cmd.llm else None,
                "commitment": commitment(salt, value_text),
                "redactions": [f.to_json() for f in findings] or None,
            }
            sealed = self.values.seal(fact_id, cmd.subject, value_text,
                                      work_started=self.work_started, now=tx_at)
            row = self._append("assert", cmd.actor, tx_at, fields, fact_id=fact_id,
                               value=sealed, salt=salt, subject=cmd.subject,
                               plaintext=value_text)
            fact = reads.require_fact(self.db, fact_id)
        return AssertResult(fact_id=fact_id, event_id=row.hash, seq=row.seq, tx_at=tx_at,
                            status=fact.status, provenance=provenance)

    def _previously_forgotten(self, subject: str, predicate: str, value_text: str) -> bool:
        if self.keys is None or self.policy.policy.erasure.digest == "none":
            return False
        ref = self.keys.subject_ref(subject)
        digest = erasure.previously_forgotten_digest(self, ref, predicate, value_text)
        return self.db.erasure.has_digest(ref, predicate, digest)

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
        return self._fact_event("retract", cmd.fact_id, cmd.actor, {"reason": cmd.reason},
                                lambda: lifecycle.check_retract(self.db.facts.get(cmd.fact_id),
                                                                cmd.fact_id))

    def _review(self, cmd: Confirm | Reject) -> FactOpResult:
        kind = "confirm" if isinstance(cmd, Confirm) else "reject"
        return self._fact_event(
            kind, cmd.fact_id, cmd.actor, {"reason": cmd.reason},
            lambda: lifecycle.check_review(self.db.facts.get(cmd.fact_id), cmd.fact_id,
                                           cmd.actor, self.policy.policy))

    def _affirm(self, cmd: Affirm) -> FactOpResult:
        return self._fact_event("affirm", cmd.fact_id, cmd.actor, {},
                                lambda: lifecycle.check_affirm(self.db.facts.get(cmd.fact_id),
                                                               cmd.fact_id))

    def _hold(self, cmd: Hold | Release) -> FactOpResult:
        kind = "hold" if isinstance(cmd, Hold) else "release"
        check = lifecycle.check_hold if kind == "hold" else lifecycle.check_release
        return self._fact_event(kind, cmd.fact_id, cmd.actor, {"reason": cmd.reason},
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

    def _serve(self, session: str, fact_ids: list[str], via: str) -> None:
        """Record which facts a read handed to a session (ids only)."""
        with self._writing():
            self._append("served", f"system:{via}", self._tx_at(),
                         {"session": session, "fact_ids": fact_ids, "via": via})

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
            return reads.history(self.db, self.values, cmd.fact_id)

    def _why(self, cmd: Why) -> WhyResult:
        with self.db.read():
            result = reads.why(self.db, self.values, cmd.fact_id)
            fact = reads.require_fact(self.db, cmd.fact_id)
            b = recall.salience(self, fact, parse_time(self._now()))
        b = b if b > -99.0 else -99.0
        return result.model_copy(update={"salience": round(b, 4),
                                         "salience_class": recall.salience_class(self, b)})

    def _verify(self, cmd: Verify) -> VerifyResult:
        return self.verify()

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

    # ---- maintenance -------------------------------------------------------------------
    def events(self, *, plaintext: bool = False) -> list[EventRow]:
        """Every event, oldest first; with `plaintext`, values as canonical JSON text (for the
        fold and exports) instead of sealed bytes, None where erased or its key is gone."""
        with self.db.read():
            rows = list(self.db.events.iter_all())
        if not plaintext:
            return rows
        out = []
        for row in rows:
            if row.kind == "assert" and row.value is not None:
                text = self.values.opener(row, json.loads(row.body))
                row = replace(row, value=None if text is None else text.encode("utf-8"))
            out.append(row)
        return out

    def rebuild(self, *, repair: bool = False) -> RebuildResult:
        """Recompute the projection from the events and report where the stored one differs."""
        memory = MemoryProjection()
        with self.db.read():
            for e in self.db.events.iter_all():
                apply_event(memory, e.kind, e.seq, e.tx_at, e.fact_id, json.loads(e.body),
                            e.subject)
            stored = self.db.facts.dump()
        rebuilt = memory.dump()
        differences = _compare(stored, rebuilt)
        if repair and differences:
            with self._writing():
                self.db.facts.replace_all(*rebuilt)
        return RebuildResult(facts=len(rebuilt[0]), states=len(rebuilt[1]),
                             differences=differences, repaired=repair and bool(differences))


def _compare(stored: tuple[list[Any], list[Any], list[Any]],
             rebuilt: tuple[list[Any], list[Any], list[Any]], limit: int = 50) -> list[str]:
    out: list[str] = []
    for name, mine, theirs in zip(("fact", "state", "source link"), stored, rebuilt, strict=True):
        have, want = set(map(repr, mine)), set(map(repr, theirs))
        out += [f"{name} only in the stored projection: {r}" for r in sorted(have - want)]
        out += [f"{name} missing from the stored projection: {r}" for r in sorted(want - have)]
    return out[:limit]


_HANDLERS: dict[type[Command], str] = {
    AssertFact: "_assert", Retract: "_retract", Confirm: "_review", Reject: "_review",
    Affirm: "_affirm", AsOf: "_as_of", History: "_history", Why: "_why", Verify: "_verify",
    SetClock: "_set_clock", Hold: "_hold", Release: "_hold", Forget: "_forget",
    ForgetSubject: "_forget_subject", Sweep: "_sweep", Checkpoint: "_checkpoint",
    Recall: "_recall",
}
