"""Many events of one kind appended as a group (a sweep's expire events): the same rows, chain
and fold as `LedgerCore.append` one at a time, with each table written by one statement."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from custody_app.core import sessions
from custody_app.core.projector import Changes, apply_event
from custody_app.domain.chain import GENESIS, canonical, event_hash
from custody_app.domain.commands import refusal
from custody_app.domain.models import EVENT_MODELS
from custody_app.domain.sealed_text import SEALED_FIELDS
from store.rows import EventRow, FactRow, StateRow

if TYPE_CHECKING:
    from custody_app.keys.writer_keys import WriterKey
    from custody_app.recall.index import RecallIndex
    from store import FactStore, LedgerFile

# Kinds a group may hold: events about an existing fact that carry no value and no sealed
# text, whose fold reads only that fact and its latest state (and writes only those).
GROUP_KINDS = ("forget", "expire")


class BufferedProjection:
    """The projection port of a group: reads see the group's own writes first, writes wait for
    `flush`, which runs one statement per table in the order the single appends would have."""

    def __init__(self, facts: FactStore, known: list[FactRow]) -> None:
        self.facts = facts
        # The group's facts as they stand (read in one query), then the rows it changed.
        self.known = {f.fact_id: f for f in known}
        self.rows: dict[str, FactRow] = {}
        seqs = [f.assert_seq for f in known]
        self.latest: dict[int, StateRow | None] = dict.fromkeys(seqs)
        self.latest.update(facts.latest_states(seqs))
        self.states: list[StateRow] = []

    def get(self, fact_id: str) -> FactRow | None:
        if fact_id in self.rows:
            return self.rows[fact_id]
        return self.known[fact_id] if fact_id in self.known else self.facts.get(fact_id)

    def superseded_by(self, fact_id: str) -> list[FactRow]:
        raise NotImplementedError("a group's kinds never recompute what a fact supersedes")

    def insert(self, fact: FactRow) -> None:
        raise NotImplementedError("a group's kinds never add a fact")

    def update(self, fact: FactRow) -> None:
        self.rows[fact.fact_id] = fact

    def latest_state(self, fact_seq: int) -> StateRow | None:
        if fact_seq in self.latest:
            return self.latest[fact_seq]
        return self.facts.latest_state(fact_seq)

    def push_state(self, state: StateRow) -> None:
        self.states.append(state)
        self.latest[state.fact_seq] = state

    def add_sources(self, fact_id: str, sources: list[str]) -> None:
        raise NotImplementedError("a group's kinds carry no sources")

    def flush(self) -> None:
        # facts is keyed by assert_seq: the last row of each fact is what the updates leave.
        self.facts.update_many(list(self.rows.values()))
        self.facts.push_states(self.states)


def append_group(db: LedgerFile, index: RecallIndex, policy_hash: str, kind: str, actor: str,
                 tx_at: str, items: list[tuple[str, dict[str, Any]]],
                 head: tuple[int, str, str] | None, known: list[FactRow] | None = None,
                 *, signer: WriterKey | None = None,
                 ) -> tuple[list[EventRow], tuple[int, str, str] | None]:
    """Events (fact_id, fields) of `kind` after `head`, inside a write transaction: validated,
    hashed onto the chain and folded one by one in a tight loop, then stored together.
    `known`: the facts' rows as they stand, if the caller holds them (else read here).
    `signer`: the writer key every event is signed with (the actor's, if registered).
    Returns the rows and the new head."""
    if kind not in GROUP_KINDS or kind in SEALED_FIELDS:
        raise ValueError(f"events of kind {kind!r} cannot be appended as a group")
    model = EVENT_MODELS[kind]
    port = BufferedProjection(db.facts, db.facts.get_many([f for f, _ in items])
                              if known is None else known)
    rows: list[EventRow] = []
    all_changes: list[Changes] = []
    seq = head[0] if head else 0
    prev = head[1] if head else GENESIS
    for fact_id, fields in items:
        seq += 1
        envelope: dict[str, Any] = {"seq": seq, "kind": kind, "tx_at": tx_at, "actor": actor,
                                    "policy_hash": policy_hash, "fact_id": fact_id}
        envelope.update({k: v for k, v in fields.items() if v is not None})
        if signer is not None:
            envelope["signer"] = signer.signer
        try:
            model.model_validate(envelope)
        except ValidationError as exc:
            raise refusal(exc) from None
        body = canonical(envelope)
        digest = event_hash(prev, body)
        row = EventRow(seq, kind, tx_at, actor, policy_hash, fact_id, None, body, None,
                       None, prev, digest, None if signer is None else signer.sign(digest))
        rows.append(row)
        prev = row.hash
        sessions.index_event(db, kind, seq, fact_id, envelope)
        all_changes.append(apply_event(port, kind, seq, tx_at, fact_id, envelope, None))
    db.events.append_many(rows)
    port.flush()
    for changes in all_changes:
        if changes:
            index.sync(changes, {})
    return rows, ((seq, prev, tx_at) if rows else head)
