"""The rebuild of the projection (facts, states, sessions, actions) from the events, compared
with what is stored, and repaired on request; the recall indexes follow the repaired beliefs."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import Any, Protocol

from custody_app.core import sessions
from custody_app.core.projector import MemoryProjection, apply_event
from custody_app.domain.readmodels import RebuildResult
from custody_app.recall.index import RecallIndex
from store import LedgerFile


class Core(Protocol):
    """What the rebuild needs of the ledger core (`LedgerCore`)."""

    db: LedgerFile
    index: RecallIndex

    def transaction(self) -> AbstractContextManager[None]: ...


def rebuild(core: Core, *, repair: bool = False) -> RebuildResult:
    """Recompute the projection from the events and report where the stored one differs."""
    memory = MemoryProjection()
    with core.db.read():
        for e in core.db.events.iter_all():
            apply_event(memory, e.kind, e.seq, e.tx_at, e.fact_id, json.loads(e.body),
                        e.subject)
        stored = core.db.facts.dump()
        index = sessions.rebuilt_index(core.db.events.iter_all())
        stored_index = core.db.sessions.dump()
        actions = sessions.rebuilt_actions(core.db.events.iter_all())
        stored_actions = core.db.actions.dump()
    rebuilt = memory.dump()
    # The recall indexes are derived too; compared before anything is repaired.
    with core.db.read():
        recall_differences = core.index.differences() if core.db.recall.exists() else []
    differences = _compare(stored, rebuilt)
    index_differences = _compare(stored_index, index,
                                 names=("served fact", "session event", "session"))
    if repair and differences:
        with core.transaction():
            core.db.facts.replace_all(*rebuilt)
    if repair and index_differences:
        with core.transaction():
            core.db.sessions.replace_all(*index)
    action_differences = _compare(([*map(tuple, stored_actions)], [], []),
                                  ([*map(tuple, actions)], [], []),
                                  names=("action", "-", "-"))
    if repair and action_differences:
        with core.transaction():
            core.db.actions.replace_all(actions)
    differences += index_differences + action_differences
    if repair and differences and not recall_differences:
        # The projection was repaired: the indexes must follow the repaired beliefs.
        with core.db.read():
            stale = core.index.differences() if core.db.recall.exists() else []
        if stale:
            with core.transaction():
                core.index.rebuild()
    if repair and recall_differences:
        with core.transaction():
            core.index.rebuild()
    differences += [f"recall index: {d}" for d in recall_differences]
    return RebuildResult(facts=len(rebuilt[0]), states=len(rebuilt[1]),
                         differences=differences, repaired=repair and bool(differences))


def _compare(stored: tuple[list[Any], list[Any], list[Any]],
             rebuilt: tuple[list[Any], list[Any], list[Any]], limit: int = 50,
             names: tuple[str, str, str] = ("fact", "state", "source link")) -> list[str]:
    out: list[str] = []
    for name, mine, theirs in zip(names, stored, rebuilt, strict=True):
        have, want = set(map(repr, mine)), set(map(repr, theirs))
        out += [f"{name} only in the stored projection: {r}" for r in sorted(have - want)]
        out += [f"{name} missing from the stored projection: {r}" for r in sorted(want - have)]
    return out[:limit]
