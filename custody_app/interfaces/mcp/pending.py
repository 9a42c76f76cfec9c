"""The `memory_pending` tool: the agent's own writes still waiting for review, and the note a
quarantined write's result carries (reads leave a claim out until a reviewer confirms it)."""

from __future__ import annotations

from pydantic import Field

from custody_app.domain.models import Frozen
from custody_app.domain.readmodels import AssertResult, ReadModel
from custody_app.ledger.facade import Ledger
from custody_app.ledger.overview import MAX_PAGE

QUARANTINE_NOTE = ("claimed: quarantined until a reviewer confirms it; memory_read and "
                   "memory_recall do not return it until then (memory_pending lists it)")


class PendingArguments(Frozen):
    """Arguments of memory_pending."""

    limit: int = Field(50, ge=1, le=MAX_PAGE, description="list at most this many (oldest first)")


class PendingWrite(ReadModel):
    fact_id: str
    subject: str
    predicate: str
    value: object
    written_at: str
    supersedes: str | None
    marks: list[str]


class PendingWrites(ReadModel):
    """This agent's writes awaiting review: how many in all, and the oldest `limit` of them."""

    total: int
    writes: list[PendingWrite]
    note: str = "reads and recall leave these out until a reviewer confirms them"


class QuarantinedWrite(AssertResult):
    """A write's result when it was quarantined, saying what that means for later reads."""

    note: str = QUARANTINE_NOTE


def pending_writes(ledger: Ledger, agent: str, limit: int) -> PendingWrites:
    """Every claim in the review queue written by `agent`, counted; the oldest `limit` listed."""
    mine: list[PendingWrite] = []
    after: int | None = 0
    while after is not None:
        page = ledger.review_queue(after_seq=after, limit=MAX_PAGE)
        mine += [PendingWrite(fact_id=i.fact.fact_id, subject=i.fact.subject,
                              predicate=i.fact.predicate, value=i.fact.value, written_at=i.tx_at,
                              supersedes=i.supersedes.fact_id if i.supersedes else None,
                              marks=i.marks)
                 for i in page.items if i.writer == agent]
        after = page.next_after
    return PendingWrites(total=len(mine), writes=mine[:limit])
