"""Read models of the paged browsing reads (beliefs at an event, review queue, holds, status)."""

from __future__ import annotations

from typing import Any, Literal

from custody_app.domain.models import Cause
from custody_app.domain.readmodels import FactRef, FactView, ReadModel

Change = Literal["same", "added", "ended", "changed"]
# Status toggles of the beliefs screen: facts in these states are shown beside believed ones.
SHOW_STATUSES = ("quarantined", "retracted", "superseded", "forgotten")


class EventBrief(ReadModel):
    """One event, briefly: where a time-travel cursor stands."""

    seq: int
    kind: str
    tx_at: str
    actor: str
    fact_id: str | None


class BeliefView(ReadModel):
    """A fact as of the asked moment, with how it stands now (`change`) and its salience now."""

    fact_id: str
    assert_seq: int
    subject: str
    predicate: str
    value: Any
    space: str
    status: str
    """Status as of the moment asked; `not_asserted` for a fact the ledger learned later."""
    status_now: str
    provenance: str
    valid_from: str
    valid_to: str | None
    actor: str
    erased: bool
    held: bool
    believed: bool
    believed_now: bool
    change: Change
    salience: float | None = None
    salience_class: str | None = None
    sealed: bool = False
    """The value is held, sealed, but this read could not open it: the key store is missing."""


class BeliefPage(ReadModel):
    """One page of `Ledger.beliefs`: pass `next_after` as `after_seq` for the next page."""

    valid_at: str
    tx_at: str
    seq: int
    head_seq: int
    at_event: EventBrief | None
    diff: bool
    show: list[str]
    facts: list[BeliefView]
    next_after: int | None


class ReviewItem(ReadModel):
    """A claimed fact waiting for review: who wrote it, why, and what it would supersede."""

    fact: FactView
    assert_seq: int
    tx_at: str
    writer: str
    cause: Cause
    session: str | None
    marks: list[str]
    supersedes: FactRef | None


class PendingRetraction(ReadModel):
    """A retraction of another writer's fact waiting for a reviewer; the fact stays believed."""

    fact: FactView
    seq: int
    tx_at: str
    retractor: str
    provenance: str | None
    reason: str | None
    session: str | None
    event_id: str = ""
    """The retraction's event id: what a review of it names (`retraction_event`), so the
    decision applies to this retraction and no other."""


class ReviewPage(ReadModel):
    items: list[ReviewItem]
    next_after: int | None
    # Retractions waiting for review (listed with the first page of the queue).
    retractions: list[PendingRetraction] = []


class HoldItem(ReadModel):
    """A fact on legal hold, with the hold event that placed it."""

    fact: FactView
    assert_seq: int
    held_by: str | None
    held_at: str | None
    reason: str | None
    hold_seq: int | None


class HoldPage(ReadModel):
    items: list[HoldItem]
    next_after: int | None


class ErasurePreview(ReadModel):
    """What a forget of `root` would erase (the root and its cascade), and held facts that
    would make it refuse."""

    root: str
    facts: list[FactRef]
    held: list[str]


class RetentionSpace(ReadModel):
    space: str
    pattern: str | None
    window: str | None
    cutoff: str | None


class RetentionView(ReadModel):
    """The policy's retention windows (pattern: duration, and the cutoff each gives now) and
    one page of spaces with the window that governs each; `next_after` pages on."""

    now: str
    windows: dict[str, str]
    spaces: list[RetentionSpace]
    cutoffs: dict[str, str] = {}
    next_after: str | None = None


class PolicyChange(ReadModel):
    seq: int
    tx_at: str
    hash: str
    path: str | None


class LedgerStatus(ReadModel):
    """The ledger file at a glance: chain head, WAL, pending scrubs, policies."""

    path: str
    events: int
    head_hash: str | None
    head_tx_at: str | None
    db_bytes: int
    wal_bytes: int
    pending_scrubs: list[tuple[str, str]]
    policy_in_force: str
    policy_recorded: str | None
    policy_history: list[PolicyChange]
    counts: dict[str, int]


class TimelineEvent(ReadModel):
    """One event of the ledger's timeline: what happened, by whom, to which fact, in brief."""

    seq: int
    tx_at: str
    kind: str
    actor: str
    fact_id: str | None
    subject: str | None
    predicate: str | None
    status: str | None  # the fact's status now
    provenance: str | None  # the writer's (or retractor's) standing, when the event has one
    summary: str


class TimelinePage(ReadModel):
    """Events newest first; `next_before` is the cursor of the next (older) page."""

    events: list[TimelineEvent]
    head_seq: int
    next_before: int | None
