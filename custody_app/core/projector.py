"""Applies one event to the facts projection; the same code maintains the file and rebuilds it."""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Protocol

from custody_app.domain.lifecycle import (
    ENDED_STATUS,
    check_move,
    effective_rank,
    erased_subject,
    retraction_effect,
)
from store.rows import FACT_COLUMNS, FactRow, StateRow

_FACT_FIELDS = attrgetter(*FACT_COLUMNS)


def replace(fact: FactRow, **changes: Any) -> FactRow:
    """A changed copy of a fact row: dataclasses.replace does the same several times slower,
    and verify's fold runs this for most events of a long ledger."""
    copy = FactRow(*_FACT_FIELDS(fact))
    for name, value in changes.items():
        setattr(copy, name, value)
    return copy


class ProjectionPort(Protocol):
    """Where the projection lives: the ledger file, or memory during a rebuild."""

    def get(self, fact_id: str) -> FactRow | None: ...
    def superseded_by(self, fact_id: str) -> list[FactRow]: ...
    def insert(self, fact: FactRow) -> None: ...
    def update(self, fact: FactRow) -> None: ...
    def latest_state(self, fact_seq: int) -> StateRow | None: ...
    def push_state(self, state: StateRow) -> None: ...
    def add_sources(self, fact_id: str, sources: list[str]) -> None: ...


class MemoryProjection:
    """A projection held in dicts, for `rebuild`."""

    def __init__(self) -> None:
        self.facts: dict[str, FactRow] = {}
        self.replaced: dict[str, set[str]] = {}
        self.states: dict[int, list[StateRow]] = {}
        self.sources: set[tuple[str, str]] = set()

    def get(self, fact_id: str) -> FactRow | None:
        return self.facts.get(fact_id)

    def superseded_by(self, fact_id: str) -> list[FactRow]:
        found = (self.facts[f] for f in self.replaced.get(fact_id, ()))
        return sorted((f for f in found if f.superseded_by == fact_id),
                      key=lambda f: f.assert_seq)

    def insert(self, fact: FactRow) -> None:
        self.update(fact)

    def update(self, fact: FactRow) -> None:
        self.facts[fact.fact_id] = fact
        if fact.superseded_by is not None:
            self.replaced.setdefault(fact.superseded_by, set()).add(fact.fact_id)

    def latest_state(self, fact_seq: int) -> StateRow | None:
        rows = self.states.get(fact_seq)
        return rows[-1] if rows else None

    def push_state(self, state: StateRow) -> None:
        self.states.setdefault(state.fact_seq, []).append(state)

    def add_sources(self, fact_id: str, sources: list[str]) -> None:
        self.sources.update((fact_id, s) for s in sources)

    def dump(self) -> tuple[list[FactRow], list[StateRow], list[tuple[str, str]]]:
        facts = sorted(self.facts.values(), key=lambda f: f.assert_seq)
        states = [s for seq in sorted(self.states) for s in self.states[seq]]
        return facts, states, sorted(self.sources)


# (fact after the event, its status before) for every fact whose status an event changed.
Changes = list[tuple[FactRow, "str | None"]]


def _refresh(port: ProjectionPort, fact: FactRow, seq: int, tx_at: str, changes: Changes,
             *, new: bool = False) -> None:
    replacement = port.get(fact.superseded_by) if fact.superseded_by else None
    state = derive_state(fact, replacement, seq, tx_at)
    previous = None if new else port.latest_state(fact.assert_seq)
    check_move(fact.fact_id, previous.status_trusted if previous else None, state.status_trusted)
    old_status = None if new else fact.status
    if new:
        fact.status = state.status_trusted  # a row just made by apply_event: nobody shares it
    else:
        fact = replace(fact, status=state.status_trusted)
    if previous is None:
        port.insert(fact)
    else:
        port.update(fact)
    if old_status != fact.status:
        changes.append((fact, old_status))
    if not same_state(previous, state):
        port.push_state(state)


def _refresh_replaced(port: ProjectionPort, replacement: FactRow, seq: int, tx_at: str,
                      changes: Changes) -> None:
    """Recompute the facts `replacement` supersedes. When it no longer stands (retracted or
    rejected), they pass to its own live replacement if it has one, else they are restored."""
    for old in port.superseded_by(replacement.fact_id):
        if old.ended is None:
            if replacement.ended in ("retracted", "rejected"):
                old = replace(old, superseded_by=replacement.superseded_by)
            _refresh(port, old, seq, tx_at, changes)


def derive_state(fact: FactRow, replacement: FactRow | None, seq: int, tx_at: str) -> StateRow:
    """The fact's state after event `seq`, given its live replacement (if any)."""
    rank = effective_rank(fact)
    if fact.ended is not None:
        ended = ENDED_STATUS[fact.ended]
        return StateRow(fact.assert_seq, seq, tx_at, 0, rank, ended, ended,
                        fact.valid_to, fact.valid_to)
    base = "quarantined" if rank == 0 else "active"
    if replacement is None:
        return StateRow(fact.assert_seq, seq, tx_at, 1, rank, base, base,
                        fact.valid_to, fact.valid_to)
    cut = replacement.valid_from
    vto = cut if fact.valid_to is None or cut < fact.valid_to else fact.valid_to
    trusted = effective_rank(replacement) >= 1
    return StateRow(fact.assert_seq, seq, tx_at, 1, rank, "superseded",
                    "superseded" if trusted else base, vto, vto if trusted else fact.valid_to)


def same_state(a: StateRow | None, b: StateRow) -> bool:
    return a is not None and (a.live, a.prov_rank, a.status_all, a.status_trusted, a.vto_all,
                              a.vto_trusted) == (b.live, b.prov_rank, b.status_all,
                                                 b.status_trusted, b.vto_all, b.vto_trusted)


def apply_event(port: ProjectionPort, kind: str, seq: int, tx_at: str, fact_id: str | None,
                body: dict[str, Any], subject: str | None = None) -> Changes:
    """Fold one event (its hashed body as a dict, and an assert's plaintext subject unless it
    was erased) into the projection; returns the facts whose status changed."""
    changes: Changes = []
    if kind == "assert":
        assert fact_id is not None
        # Positional, in FACT_COLUMNS' order (a dataclass takes keywords several times
        # slower, and verify's fold makes one row per assert): the names are beside each.
        fact = FactRow(
            seq, fact_id,  # assert_seq, fact_id
            subject if subject is not None else erased_subject(body["subject_ref"]),
            body["predicate"], body["space"], body["valid_from"], body.get("valid_to"),
            body["provenance"],  # ...valid_from, valid_to, provenance
            None, None, None,  # confirmed_seq, ended, ended_seq
            body.get("supersedes"), None, 0,  # supersedes, superseded_by, held
            body["actor"], body.get("session"), "",  # actor, session, status
            ",".join(body["marks"]) if body.get("marks") else None,  # marks
        )
        _refresh(port, fact, seq, tx_at, changes, new=True)
        if body.get("sources"):
            port.add_sources(fact_id, list(body["sources"]))
        if fact.supersedes is not None:
            old = port.get(fact.supersedes)
            if old is not None:
                _refresh(port, replace(old, superseded_by=fact_id), seq, tx_at, changes)
        return changes
    if fact_id is None:
        return changes
    found = port.get(fact_id)
    if found is None:
        return changes
    fact = found
    if kind in ("retract", "reject", "confirm"):
        ends, confirms = retraction_effect(kind, body)
        if ends:
            # A confirmed pending retraction is a retraction; a plain reject, a rejection.
            ended = "rejected" if kind == "reject" else "retracted"
            fact = replace(fact, ended=ended, ended_seq=seq)
        elif confirms:
            fact = replace(fact, confirmed_seq=seq)
        else:
            return changes
        _refresh(port, fact, seq, tx_at, changes)
        _refresh_replaced(port, fact, seq, tx_at, changes)
    elif kind in ("forget", "expire"):
        # Erasure is not a correction: what this fact superseded stays superseded.
        fact = replace(fact, ended="forgotten" if kind == "forget" else "expired", ended_seq=seq)
        if body.get("subject_hash"):
            fact = replace(fact, subject=erased_subject(body["subject_hash"]))
        _refresh(port, fact, seq, tx_at, changes)
    elif kind in ("hold", "release"):
        _refresh(port, replace(fact, held=1 if kind == "hold" else 0), seq, tx_at, changes)
    return changes
