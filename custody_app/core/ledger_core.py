"""The ledger's core: opening a ledger under a policy, write transactions, and the one append
that every event goes through (the rebuild of the projection from the events: `rebuild`)."""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Self

from pydantic import ValidationError

from custody_app.core import batch, host_mark, rebuild, sessions, texts
from custody_app.core.faults import crash_point
from custody_app.core.policy_in_force import recorded_policy
from custody_app.core.projector import apply_event
from custody_app.core.rollback import check_high_water, genesis_of, note_mark
from custody_app.domain.chain import GENESIS, canonical, event_hash
from custody_app.domain.commands import refusal
from custody_app.domain.errors import LedgerError
from custody_app.domain.models import EVENT_MODELS
from custody_app.domain.policy import LoadedPolicy, load_policy
from custody_app.domain.readmodels import EmbedResult, RebuildResult
from custody_app.domain.timeutil import Clock, WallClock, format_time
from custody_app.files.output import require_regular
from custody_app.keys import writer_keys
from custody_app.keys.keyring import KeyRing, keystore_exists, keystore_path_for, master_from_env
from custody_app.keys.master import missing_keystore
from custody_app.keys.subject_ids import SubjectIdCodec
from custody_app.keys.values import ValueCodec
from custody_app.keys.writer_keys import WriterKey
from custody_app.recall.embedders import Embedder
from custody_app.recall.index import RecallIndex
from store import LedgerFile, StoreError, open_ledger
from store.address import address_of
from store.rows import EventRow, FactRow

SYSTEM_ACTOR = "system:custody"
# ledger_meta: present while `custody-app copy` fills this ledger (written before its first row,
# removed after its last); a ledger holding it is an interrupted copy and is never opened.
COPY_INCOMPLETE = "copy_incomplete"


def refuse_incomplete_copy(db: LedgerFile, path: str | Path) -> None:
    """An interrupted `custody-app copy` left this ledger part-filled: refused (`copy_incomplete`)."""
    note = db.meta(COPY_INCOMPLETE)
    if note is not None:
        shown = address_of(path).display
        raise LedgerError(
            "copy_incomplete",
            f"{shown} is an incomplete copy ({note}): `custody-app copy` did not finish, so it "
            f"is not opened; remove it (and its key store and master key file) and run "
            f"`custody-app copy SOURCE {shown}` again", path=shown)


class LedgerCore:
    """A ledger file opened under a policy: what every operation builds on."""

    def __init__(self, db: LedgerFile, policy: LoadedPolicy, clock: Clock | None = None,
                 *, keys: KeyRing | None = None, readonly: bool = False,
                 id_seed: int | None = None) -> None:
        self.db = db
        self.policy = policy
        self.clock: Clock = clock or WallClock()
        self.keys = keys
        if keys is not None:
            # A server ledger stores each subject by its ref, its id sealed (issue 34).
            db.use_subject_codec(SubjectIdCodec(keys))
        self.values = ValueCodec(keys)
        self.texts = self.values.texts
        # The recall indexes, kept equal to the believed facts by every append.
        self.index = RecallIndex(db, keys, self.values, policy)
        self.readonly = readonly
        # The key store a read-only open looked for and did not find (its values and free
        # text are sealed, unread: never to be shown as erased); None when it is open.
        self.keystore_missing: str | None = None
        self._rng = random.Random(id_seed) if id_seed is not None else None
        self._head: tuple[int, str, str] | None = None
        self._recorded_policy: str | None = None
        self._chained_id: str | None = None
        # (seq, previous hash) of a `policy` event this process wrote over another recorded
        # policy: the CLI says so on stderr (an adoption is never silent).
        self.adopted_policy: tuple[int, str] | None = None
        # Why the ledger's recorded policy could not be read (its stored text replaced or
        # missing): no policy is recorded in its place until one is named.
        self.policy_refusal: LedgerError | None = None
        # The key fence compares against when this unit of work began (see unit_of_work()).
        self.work_started = format_time(self.clock.now())
        # Re-keys whose old generations this process destroyed (subject ref -> generation):
        # their intents leave the ledger with the erasure's next write (erasure/rekey.py).
        self.rekeys_retired: dict[str, int] = {}
        # The writer keys this process holds, by the actor each is registered for (see
        # hold_writer_key): every event written as one of them is signed with it.
        self.signers: dict[str, WriterKey] = {}
        # A server ledger's address when this host keeps its own high-water mark for it
        # (core.host_mark), raised after each write that moved the head; its genesis hash.
        self.host_address: str | None = None
        # Whether this process took its policy from the ledger's record (none named): then
        # it never records its own over one another process adopted since (_policy_for_write).
        self.follows_recorded = False
        self._genesis: str | None = None
        # An agent process's one identity (`serve --agent`, `--batch --agent`), fixed when it
        # starts; None: the local operator (CLI, terminal app, operator batch, Python API).
        self.agent: str | None = None
        # The facts the latest append projected, by id, as the projection wrote them: what a
        # write reports back without reading its own rows again.
        self.projected: dict[str, FactRow] = {}

    @property
    def vouched_writers(self) -> set[str]:
        """Actors whose registered writer key this process holds."""
        return set(self.signers)

    def may_declare(self, actor: str) -> bool:
        """May a write or retraction as `actor` declare more than `claimed`? Holding the
        actor's registered writer key, or as the operator where the policy allows declared
        provenance; an agent process without its key never declares its own standing (DESIGN
        1 and 14: an agent surface, like MCP, earns standing by a key or a receipt only)."""
        if actor in self.signers:
            return True
        return self.agent is None and self.policy.policy.provenance.allow_declared

    def hold_writer_key(self, actor: str, key: WriterKey) -> bool:
        """Hold `actor`'s writer key if the policy registers its public half for `actor`;
        from then on every event written as `actor` is signed. A wrong key changes nothing."""
        accepted = writer_keys.vouches(self.policy.policy, actor, key)
        if accepted:
            self.signers[actor] = key
        return accepted

    def signer_for(self, actor: str) -> WriterKey | None:
        """The key an event written as `actor` is signed with; refused (`writer_key_required`)
        when the policy registers a key for `actor` and this process does not hold it: a name
        whose key is registered is that key, never merely claimed."""
        key = self.signers.get(actor)
        registered = writer_keys.registered(self.policy.policy, actor)
        if registered is None:
            return None
        if key is None or key.signer != registered:
            raise LedgerError("writer_key_required", writer_keys.required_message(actor),
                              actor=actor)
        return key

    @classmethod
    def open(cls, path: str | Path, *, policy: str | Path | LoadedPolicy | None = None,
             clock: Clock | None = None, readonly: bool = False, id_seed: int | None = None,
             keystore: str | Path | None = None,
             reindex_progress: Callable[[int, int], None] | None = None,
             immutable: bool = False, embed_backlog: bool = True) -> Self:
        """Open (creating if missing) a ledger and its key store (`<ledger>.keys` by default,
        beside the file a symbolic link points to). A ledger that holds events never gets a new
        key store: a read-write open without it is refused (`keystore_missing`) before any file
        is made. Read-only opens create nothing; without a key store their values read as
        sealed (`keystore_missing` names the path looked for), never as erased.
        When the policy's embedder changed, the recall indexes are rebuilt here, reporting
        (done, total) to `reindex_progress`. `embed_backlog=False` (a `--batch` run) starts no
        embedding worker: the facts it writes wait, found lexically, for the next writable open
        that does (the model's ~140 MB is not loaded for a bulk ingest)."""
        # No policy named: the one the ledger recorded last (read once the file is open), the
        # shipped default only for a ledger that never recorded one (DESIGN 14, policy in force).
        loaded = (policy if isinstance(policy, LoadedPolicy)
                  else None if policy is None else load_policy(policy))
        master_from_env()  # a malformed master key is refused before any file is created
        for own, what, code in ((address_of(path).own_file(), "ledger", "ledger_unopenable"),
                                (address_of(keystore_path_for(path, keystore)).own_file(),
                                 "key store", "keystore_unopenable")):
            if own is not None:
                require_regular(own, what, code)
        if not (readonly or immutable) and (missing := missing_keystore(path, keystore)):
            raise missing  # before any file is made: a new key store would open nothing
        try:
            db = open_ledger(path, readonly=readonly or immutable, immutable=immutable,
                             create=not (readonly or immutable))
            readonly = readonly or immutable
            if not readonly:
                db.checkpoint_in_background()  # no WAL checkpoint inside a write's COMMIT
        except StoreError as exc:
            raise LedgerError(exc.code, str(exc)) from None
        keys = None
        try:
            refuse_incomplete_copy(db, path)
            refusal = None
            if loaded is None:
                try:
                    loaded, refusal = recorded_policy(db, db.path)
                except LedgerError as exc:
                    # Reads (verify above all, to name the edit) go on under the shipped
                    # default; a write that would record a policy is refused (_record_policy).
                    loaded, refusal = load_policy(None), exc
            looked_for = keystore_path_for(path, keystore)
            if not readonly or keystore_exists(looked_for):
                keys = KeyRing.open(path, keystore, readonly=readonly)
            if not readonly and (mismatch := ledger_id_mismatch(db)) is not None:
                raise mismatch  # reads go on, so verify can name it
            if keys is not None:
                check_high_water(db, keys, db.path, readonly=readonly)
                # The newest head this host saw, kept outside a server's database: a restore
                # of the database (marks and all) is refused here.
                host_mark.check(db, keys, str(path), readonly=readonly)
            ledger = cls(db, loaded, clock, keys=keys, readonly=readonly, id_seed=id_seed)
            if host_mark.host_mark_file(str(path)) is not None:
                ledger.host_address = str(path)
            ledger.policy_refusal = refusal
            if keys is None:
                ledger.keystore_missing = address_of(looked_for).display
            # No policy named: this process follows the one the ledger records (DESIGN 14).
            ledger.follows_recorded = policy is None
        except BaseException as exc:
            if keys is not None:
                keys.close()
            damaged = as_ledger_error(db, exc)
            db.close()
            if damaged is not None:
                raise damaged from None
            raise
        # The recorded policy refused (its text replaced): reads go on under the shipped default,
        # which may name another embedder; nothing is re-embedded or embedded for it (a write
        # is refused until a policy is named, and the ledger stays as it was).
        refused = ledger.policy_refusal is not None
        if not ledger.index.is_current():
            try:
                if readonly or refused:  # no re-embedding: read with the recorded embedder
                    ledger.index.use_recorded_embedder()
                else:
                    ledger.reindex(reindex_progress)
            except BaseException:
                ledger.close()
                raise
        if not readonly and not refused and embed_backlog:
            # A model embedder's vectors are made off the write path, from here to close.
            ledger.index.start_embedding()
        return ledger

    @property
    def embedder(self) -> Embedder:
        return self.index.embedder

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Rebuild the recall indexes with the policy's embedder (done at open when the
        embedder changed); returns how many believed facts were indexed."""
        with self.transaction():
            # Only the form the vectors are stored in differs: sealed (or opened) in place.
            reformed = self.index.reform()
            indexed = self.index.rebuild(progress) if reformed is None else reformed
            crash_point("reindex.before_commit")
        return indexed

    def embed_waiting(self, progress: Callable[[int, int], None] | None = None,
                      poll: float = 1.0) -> EmbedResult:
        """Make the vectors of every believed fact still waiting for one (a model embedder's,
        left by a `--batch` or by a process that exited first), then return; `progress` gets
        (done, total) as it goes. Nothing to do under an embedder that embeds in the write."""
        index = self.index
        waiting = index.unembedded()
        if not index.deferred:
            return EmbedResult(embedder=index.embedder.name, embedded=0, waiting=0,
                               in_write=True)
        index.start_embedding()  # a no-op when the open already started it
        worker = index.embedding
        if worker is not None and waiting:
            worker.wake(0)
            while not worker.drain(poll):  # raises the worker's error, if it failed
                if not worker.running:
                    break
                if progress is not None:
                    progress(max(0, waiting - index.unembedded()), waiting)
        left = index.unembedded()
        if progress is not None and waiting:
            progress(max(0, waiting - left), waiting)
        return EmbedResult(embedder=index.embedder.name, embedded=max(0, waiting - left),
                           waiting=left, in_write=False)

    def close(self) -> None:
        self.index.close()
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- transactions -------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """A write transaction over the ledger and its key store (nested ones are savepoints, so
        each operation in a group still fails alone)."""
        if self.readonly:
            raise LedgerError("read_only", "this ledger was opened read-only")
        keys = self.keys.store.write() if self.keys is not None else nullcontext()
        outermost = self.db.depth == 0
        changes = self.keys.store.total_changes() if outermost and self.keys else 0
        start: tuple[int, str, str] | None = None
        # What a refused nested operation restores: its writes may be refused as late as its
        # savepoint's end (a server ledger sends them then), after the block below.
        outer = None if outermost else (self._head, self._recorded_policy,
                                         self.adopted_policy, self.index.pending())
        try:
            # The key store commits first (inner), so no committed value ever lacks its key.
            with self.db.write():
                with keys:
                    if self.db.depth == 1:
                        self._head = start = self.db.events.head()
                        self._recorded_policy = self.db.events.last_policy_hash()
                        if self.keys is not None:
                            # The index key fence: another process may have rotated the
                            # word index key since this one loaded it (rotate-index-key).
                            self.index.follow_key()
                    saved = (self._head, self._recorded_policy)
                    adopted = self.adopted_policy
                    pending = self.index.pending() if outer is None else outer[3]
                    try:
                        yield
                        if self.db.depth == 1:
                            # The group's recall rows go in together, inside its transaction.
                            self.index.flush()
                            if self.keys is not None and self._head != saved[0]:
                                # The key store's newest trusted mark, recorded with a write
                                # that appended events (never by a refused op): a key store
                                # that later lacks it was rolled back.
                                note_mark(self.db, self.keys.newest_trusted_mark())
                    except BaseException:
                        self._head, self._recorded_policy = saved
                        self.adopted_policy = adopted
                        self.index.restore(pending)
                        if self.keys is not None:
                            self.keys.drop_cache()
                        raise
                if self.db.depth == 1:
                    crash_point("tx.keys_committed")
            if outermost and self.keys and self.keys.store.total_changes() != changes:
                # A key changed: the key store remembers how far the ledger had come. Only if
                # the ledger moved too: a refused op's rolled-back key writes count in
                # total_changes, and a refused op writes no mark (DESIGN 14).
                # The head this transaction committed, read under the write lock: no round
                # trip before the transaction or after it (a server counts each one).
                if self._head != start:
                    self.keys.record_mark(self._head)
            if outermost and self.host_address is not None and self.keys is not None and \
                    self._head != start:
                self._raise_host_mark()
        except BaseException as exc:
            if outer is not None:
                self._head, self._recorded_policy, self.adopted_policy = outer[:3]
                self.index.restore(outer[3])
                if self.keys is not None:
                    self.keys.drop_cache()
            if isinstance(exc, StoreError):
                raise LedgerError(exc.code, str(exc)) from None
            raise
        if outermost:
            self.index.after_commit()

    def _raise_host_mark(self) -> None:
        """This host saw the head its write committed (core.host_mark)."""
        assert self.host_address is not None and self.keys is not None
        if self._genesis is None:
            self._genesis = genesis_of(self.db)  # once: the first event never changes
        host_mark.raise_to(self.host_address, self.keys, self._genesis, self._head)

    @property
    def head(self) -> tuple[int, str, str] | None:
        """(seq, hash, tx_at) of the newest event, as this write transaction sees it."""
        return self._head

    @property
    def ledger_id(self) -> str | None:
        """This ledger's stable id, what a tool receipt's `audience` names: made at creation
        and chained into its first event (that one wins over the file's meta, which anyone
        holding the file can edit); an older ledger answers the id in its meta, and one made
        before ids existed a digest of its genesis event (None while it has no event)."""
        if self._chained_id is None:
            # Cached once found: the first event never changes (a hand edit is verify's).
            self._chained_id = chained_ledger_id(self.db)
        if self._chained_id is not None:
            return self._chained_id
        made = self.db.meta("ledger_id")
        if made is not None:
            return made
        first = self.db.events.get(1)
        return None if first is None else hashlib.sha256(
            f"custody-ledger-id:{first.hash}".encode()).hexdigest()[:32]

    @property
    def id_chained(self) -> bool:
        """Is this ledger's id chained into its first event (a ledger created since issue 31)?
        False for an older ledger: its id lives only in the file's meta."""
        _ = self.ledger_id
        return self._chained_id is not None

    def tx_at(self) -> str:
        """The transaction time of the next event: now, never before the newest event."""
        now = format_time(self.clock.now())
        last = self._head[2] if self._head else ""
        return now if now > last else last

    def now(self) -> str:
        """'Now' for reads: never before the newest event, whatever the wall clock says."""
        head = self.db.events.head()
        now = format_time(self.clock.now())
        return head[2] if head and head[2] > now else now

    def new_fact_id(self, tx_at: str) -> str:
        millis = int(datetime.fromisoformat(tx_at.replace("Z", "+00:00")).timestamp() * 1000)
        tail = self._rng.getrandbits(40) if self._rng else int.from_bytes(os.urandom(5), "big")
        return f"f_{millis:012x}{tail:010x}"

    def append(self, kind: str, actor: str, tx_at: str, fields: dict[str, Any], *,
               fact_id: str | None = None, value: bytes | None = None,
               salt: str | None = None, subject: str | None = None,
               plaintext: str | None = None, sign_with: WriterKey | None = None,
               erased_at: str | None = texts.NOT_READ) -> EventRow:
        """Record one event, inside a write transaction: validate it, hash it onto the chain,
        store it, index its session, project it, and bring the recall indexes in line with
        the facts whose belief it changed (`plaintext`: the value just sealed, if any;
        `erased_at`: the subject's latest erasure, when the caller read it in this
        transaction)."""
        if kind != "policy":
            self._policy_for_write(tx_at)
        self.index.writing()
        seq = (self._head[0] if self._head else 0) + 1
        prev = self._head[1] if self._head else GENESIS
        envelope: dict[str, Any] = {"seq": seq, "kind": kind, "tx_at": tx_at, "actor": actor,
                                    "policy_hash": self.policy.hash}
        if fact_id is not None:
            envelope["fact_id"] = fact_id
        if seq == 1 and kind == "policy" and (made := self.db.meta("ledger_id")) is not None:
            # The ledger's id goes into the chain with its first event (DESIGN 14: a receipt's
            # audience is checked against an id whoever holds the file cannot change).
            envelope["ledger_id"] = made
        envelope.update({k: v for k, v in fields.items() if v is not None})
        key = sign_with or self.signer_for(actor)
        if key is not None:
            envelope["signer"] = key.signer
        try:
            EVENT_MODELS[kind].model_validate(envelope)
        except ValidationError as exc:
            # An invalid event never enters the log, and the caller gets a coded refusal.
            raise refusal(exc) from None
        # Free text about a fact is sealed like the value: the hash covers its commitment.
        hashed, sealed = texts.seal_event(self.db, self.keys, self.texts, self.work_started, kind,
                                          fact_id, envelope, subject, erased_at)
        body = canonical(hashed)
        digest = event_hash(prev, body)
        row = EventRow(seq, kind, tx_at, actor, self.policy.hash, fact_id, subject, body, value,
                       salt, prev, digest, None if key is None else key.sign(digest))
        self.db.events.append(row)
        if sealed is not None:
            self.db.texts.put(seq, *sealed)
        sessions.index_event(self.db, kind, seq, fact_id, envelope)
        changes = apply_event(self.db.facts, kind, seq, tx_at, fact_id, envelope, subject)
        self.projected = {fact.fact_id: fact for fact, _ in changes}
        if changes:
            self.index.sync(changes, {fact_id: plaintext} if fact_id and plaintext else {})
        self._head = (seq, row.hash, tx_at)
        return row

    def append_group(self, kind: str, actor: str, tx_at: str,
                     items: list[tuple[str, dict[str, Any]]],
                     known: list[FactRow] | None = None) -> list[EventRow]:
        """`append` of one `kind` for each (fact_id, fields), in order, inside a write
        transaction: the rows, chain and projection each append would leave, with each table
        written once for the group (`batch.GROUP_KINDS`: a sweep's expire events). `known`:
        the facts' rows as they stand, if the caller read them in this transaction."""
        if not items:
            return []
        self._policy_for_write(tx_at)
        self.index.writing()
        rows, self._head = batch.append_group(self.db, self.index, self.policy.hash, kind, actor,
                                              tx_at, items, self._head, known,
                                              signer=self.signer_for(actor))
        return rows

    def _policy_for_write(self, tx_at: str) -> None:
        """A write goes on under the policy in force, recorded first if it changed; refused
        while the ledger's recorded policy cannot be put to use (replaced, missing, or a
        bearer-key registration) and no other was named."""
        if self.policy_refusal is not None:
            raise self.policy_refusal
        if self._recorded_policy != self.policy.hash:
            if self.follows_recorded and self._recorded_policy is not None:
                # Another process (another host) adopted a policy since this one opened the
                # ledger under the one recorded then: writing would put the old one back.
                raise LedgerError(
                    "policy_changed",
                    f"the policy of {self.db.path} changed to {self._recorded_policy[:12]}... "
                    f"since this process opened it under {self.policy.hash[:12]}... (another "
                    "process adopted it): this process follows the ledger's policy and does not "
                    "put its older one back. Restart it to work under the new one, or name a "
                    "policy with --policy", recorded=self._recorded_policy,
                    in_force=self.policy.hash)
            self._record_policy(tx_at)

    def _record_policy(self, tx_at: str) -> None:
        p = self.policy
        previous = self._recorded_policy
        self.db.policies.put(p.hash, p.canonical, p.source, p.path)
        self._recorded_policy = p.hash
        # A policy that registers writer keys comes into force signed by the ledger's own key,
        # so a hand-appended policy cannot register a forger's key for a writer's name.
        ledger_key = None
        if self.keys is not None and any(writer_keys.registered(p.policy, actor)
                                         for actor in p.policy.provenance.writer_keys):
            ledger_key = WriterKey.from_raw(self.keys.signing_key)
        self.append("policy", SYSTEM_ACTOR, tx_at, {}, sign_with=ledger_key)
        if previous is not None and self._head is not None:
            self.adopted_policy = (self._head[0], previous)

    def serve(self, session: str, fact_ids: list[str], via: str) -> None:
        """Record which facts a read handed to a session (ids only)."""
        with self.transaction():
            self.append("served", f"system:{via}", self.tx_at(),
                         {"session": session, "fact_ids": fact_ids, "via": via})

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

    def damaged(self, exc: BaseException) -> LedgerError | None:
        """`exc` from a read, as `ledger_damaged` naming the file and seq, if it is damage."""
        return as_ledger_error(self.db, exc)

    def rebuild(self, *, repair: bool = False, deep: bool = False) -> RebuildResult:
        """Recompute the projection from the events and report where the stored one differs."""
        return rebuild.rebuild(self, repair=repair, deep=deep)


def chained_ledger_id(db: LedgerFile) -> str | None:
    """The ledger id the first event carries in its hashed body, or None (an older ledger,
    one with no event yet, or a first event that is not a policy event)."""
    first = db.events.get(1)
    if first is None or first.kind != "policy" or '"ledger_id"' not in first.body:
        return None
    try:
        made = json.loads(first.body).get("ledger_id")
    except (ValueError, AttributeError):
        return None  # a body that is not a JSON object: the chain walk names it
    return made if isinstance(made, str) else None


def ledger_id_mismatch(db: LedgerFile) -> LedgerError | None:
    """`ledger_id_mismatch` when the file's meta names another id than the chain's first event
    (the meta was edited: receipts' audiences are checked against the chained id), else None."""
    chained = chained_ledger_id(db)
    made = db.meta("ledger_id")
    if chained is None or made == chained:
        return None
    return LedgerError(
        "ledger_id_mismatch",
        f"{db.path} names ledger id {made!r} in its meta, but its first event chains ledger id "
        f"{chained!r}: the file was edited (a receipt's audience is checked against the chained "
        "id); restore the ledger from a good copy", meta_id=made, chained_id=chained)


def as_ledger_error(db: LedgerFile, exc: BaseException) -> LedgerError | None:
    """A read that failed on a damaged file, as a refusal naming the file (and the event's seq
    where it is one event): `ledger_damaged`. None when `exc` is not about the file."""
    found = db.damage(exc)
    if found is None:
        return None
    return LedgerError(found.code, str(found), path=db.path, seq=found.seq)
