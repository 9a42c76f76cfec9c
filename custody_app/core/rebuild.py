"""The rebuild of the projection (facts, states, sessions, actions, the indexes of the events
readers rely on) from the events, compared with what is stored, and repaired on request; the
recall indexes follow the repaired beliefs."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import Any, Protocol

from custody_app.core.derived import EVENT_INDEXED, DerivedAudit
from custody_app.core.projector import MemoryProjection, apply_event
from custody_app.domain.errors import LedgerError
from custody_app.domain.models import EVENT_MODELS
from custody_app.domain.readmodels import RebuildResult
from custody_app.recall.deep import content_differences
from custody_app.recall.index import RecallIndex
from store import LedgerFile


class Core(Protocol):
    """What the rebuild needs of the ledger core (`LedgerCore`)."""

    db: LedgerFile
    index: RecallIndex

    def transaction(self) -> AbstractContextManager[None]: ...


def rebuild(core: Core, *, repair: bool = False, deep: bool = False) -> RebuildResult:
    """Recompute the projection from the events and report where the stored one differs.
    An event of a kind this code does not know is reported, and refuses a repair (no fold can
    say what it did). `deep` compares the recall indexes' content, not only their rows."""
    memory = MemoryProjection()
    derived = DerivedAudit()
    unknown: list[str] = []
    with core.db.read():
        for e in core.db.events.iter_all():
            body = json.loads(e.body)
            if e.kind not in EVENT_MODELS:
                unknown.append(f"event {e.seq} has an unknown kind {e.kind!r}: the ledger file "
                               "was edited (run verify)")
                continue
            apply_event(memory, e.kind, e.seq, e.tx_at, e.fact_id, body, e.subject)
            derived.check(e, body)
        stored = core.db.facts.dump()
        index = derived.sessions.index()
        stored_index = core.db.sessions.dump()
        actions = derived.sessions.actions
        stored_actions = core.db.actions.dump()
        _, event_index_problem = derived.finish(core, only=EVENT_INDEXED)
    if unknown and repair:
        raise LedgerError("unknown_event_kind", unknown[0] + "; nothing was repaired")
    rebuilt = memory.dump()
    # The recall indexes are derived too; compared before anything is repaired.
    with core.db.read():
        recall_differences = _recall_differences(core, deep)
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
    reindexed = [event_index_problem] if event_index_problem is not None else []
    if repair and reindexed:
        with core.transaction():
            core.db.events.reindex()
    differences = unknown + differences + index_differences + action_differences + reindexed
    if repair and differences and not recall_differences:
        # The projection was repaired: the indexes must follow the repaired beliefs.
        with core.db.read():
            stale = _recall_differences(core, deep)
        if stale:
            with core.transaction():
                core.index.rebuild()
    if repair and recall_differences:
        with core.transaction():
            core.index.rebuild()
    differences += [f"recall index: {d}" for d in recall_differences]
    return RebuildResult(facts=len(rebuilt[0]), states=len(rebuilt[1]),
                         differences=differences, repaired=repair and bool(differences))


def _recall_differences(core: Core, deep: bool) -> list[str]:
    if not core.db.recall.exists():
        return []
    return core.index.differences() + (content_differences(core.index) if deep else [])


def _compare(stored: tuple[list[Any], list[Any], list[Any]],
             rebuilt: tuple[list[Any], list[Any], list[Any]], limit: int = 50,
             names: tuple[str, str, str] = ("fact", "state", "source link")) -> list[str]:
    out: list[str] = []
    for name, mine, theirs in zip(names, stored, rebuilt, strict=True):
        have, want = set(map(repr, mine)), set(map(repr, theirs))
        out += [f"{name} only in the stored projection: {r}" for r in sorted(have - want)]
        out += [f"{name} missing from the stored projection: {r}" for r in sorted(want - have)]
    return out[:limit]
