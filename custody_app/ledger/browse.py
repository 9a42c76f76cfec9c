"""Paged reads for browsing a big ledger (the terminal app's): beliefs at any event, the review
queue oldest first, holds, erasure previews (retention, policy and status: overview.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from functools import partial
from itertools import islice

from custody_app.core import reads
from custody_app.core.texts import open_body
from custody_app.domain.errors import LedgerError
from custody_app.domain.models import PROVENANCES, Cause
from custody_app.domain.readmodels import FactRef
from custody_app.domain.spelling import as_held
from custody_app.domain.timeutil import normalise, parse_time
from custody_app.erasure.cascade import cascade
from custody_app.ledger import retractions
from custody_app.ledger.overview import MAX_PAGE, LedgerOverview, page_limit
from custody_app.ledger.readmodels import (
    SHOW_STATUSES,
    BeliefPage,
    BeliefView,
    Change,
    ErasurePreview,
    EventBrief,
    HoldItem,
    HoldPage,
    PendingRetraction,
    ReviewItem,
    ReviewPage,
)
from custody_app.recall.salience import salience, salience_class
from store.rows import BeliefRow, FactRow


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _ref(fact: FactRow) -> FactRef:
    return FactRef(fact_id=fact.fact_id, status=fact.status, subject=fact.subject,
                   predicate=fact.predicate, valid_from=fact.valid_from)


def _matches(r: PendingRetraction, match: str | None) -> bool:
    """The queue filter on a pending retraction: its retractor, subject, predicate, reason."""
    fields = (r.retractor, r.fact.subject, r.fact.predicate, f"retract:{r.reason or ''}")
    return not match or any(match.lower() in f.lower() for f in fields)


def _change(row: BeliefRow) -> Change:
    if row.live_then and not row.live_now:
        return "ended"
    if row.live_now and not row.live_then:
        return "added"
    if (row.status_then, row.vto_then, row.rank_then) != (row.status_now, row.vto_now,
                                                          row.rank_now):
        return "changed"
    return "same"


class BrowseReads(LedgerOverview):
    """The read side the terminal app pages through; every read is bounded by `limit`."""

    def event_at(self, seq: int) -> EventBrief | None:
        """The event at `seq`, briefly (None when there is none)."""
        with self.db.read():
            found = self.db.browse.event_brief(seq)
        return None if found is None else EventBrief(seq=found[0], kind=found[1], tx_at=found[2],
                                                     actor=found[3], fact_id=found[4])

    def head_seq(self) -> int:
        """How many events the ledger holds (seq is gapless from 1)."""
        with self.db.read():
            return self.db.browse.head_seq()

    def seq_at(self, tx_at: str) -> int:
        """The last event the ledger had learned at transaction time `tx_at` (0: none yet)."""
        moment = normalise(tx_at, "tx_at")
        with self.db.read():
            return self.db.browse.seq_at(moment)

    def beliefs(self, valid_at: str | None = None, tx_at: str | None = None, *,
                at_seq: int | None = None, space: str | None = None,
                subject: str | None = None, predicate: str | None = None,
                show: Iterable[str] = (), diff: bool = False, after_seq: int = 0,
                limit: int = 50) -> BeliefPage:
        """One page of the facts believed at valid time `valid_at` as the ledger knew them
        after event `at_seq` (or at transaction time `tx_at`; default: now), in first-assert
        order after `after_seq`. `show` adds facts then quarantined, retracted, superseded or
        forgotten (and expired); `diff` adds facts believed now but not then. Each fact says how
        it stands now (`change`: same, added, ended, changed) and its salience now."""
        shown = list(dict.fromkeys(show))
        bad = [s for s in shown if s not in SHOW_STATUSES]
        if bad:
            raise LedgerError("bad_request", f"cannot show status {bad[0]!r}; choose from "
                              + ", ".join(SHOW_STATUSES), field="show")
        page_limit(limit)
        statuses = tuple(s for s in shown if s != "quarantined")
        if "forgotten" in shown:
            statuses += ("expired",)
        pending = "quarantined" in shown
        with self.db.read():
            now = self.now()
            head = self.db.browse.head_seq()
            v = normalise(valid_at, "valid_at") if valid_at else now
            if at_seq is None:
                seq = self.db.browse.seq_at(normalise(tx_at, "tx_at")) if tx_at else head
            else:
                seq = max(0, min(at_seq, head))
            brief = self.db.browse.event_brief(seq) if seq else None
            # A filter may name an identifier as `doctor` shows one the door now refuses.
            subject, predicate, space = (
                None if value is None else as_held(value, partial(self.db.facts.holds, field))
                for field, value in (("subject", subject), ("predicate", predicate),
                                     ("space", space)))
            t = tx_at if tx_at and at_seq is None else (brief[2] if brief else now)
            rows = self.db.browse.beliefs(
                valid_at=v, seq=seq, head=head, min_rank=0 if pending else 1, pending=pending,
                statuses=statuses, diff=diff, subject=subject, predicate=predicate, space=space,
                after_seq=after_seq, limit=limit)
            moment = parse_time(now)
            facts = [self._belief(r, moment) for r in rows]
        at_event = None if brief is None else EventBrief(seq=brief[0], kind=brief[1],
                                                         tx_at=brief[2], actor=brief[3],
                                                         fact_id=brief[4])
        return BeliefPage(valid_at=v, tx_at=normalise(t), seq=seq, head_seq=head,
                          at_event=at_event, diff=diff, show=shown, facts=facts,
                          next_after=rows[-1].assert_seq if len(rows) == limit else None)

    def _belief(self, r: BeliefRow, moment: datetime) -> BeliefView:
        text = self.values.open_subject(r.fact_id, r.subject, r.value)
        then = r.status_then is not None
        rounded: float | None = None
        named: str | None = None
        if r.live_now:
            fact = self.db.facts.get(r.fact_id)
            if fact is not None:
                b = max(salience(self.db, self.policy, fact, moment), -99.0)
                rounded, named = round(b, 4), salience_class(self.policy, b)
        return BeliefView(
            fact_id=r.fact_id, assert_seq=r.assert_seq, subject=r.subject,
            predicate=r.predicate, value=reads.load_value(text), space=r.space,
            status=r.status_then if r.status_then is not None else "not_asserted", status_now=r.status_now,
            provenance=PROVENANCES[r.rank_then if then else r.rank_now], valid_from=r.valid_from,
            valid_to=r.vto_then if then else r.vto_now, actor=r.actor,
            erased=text is None and not self.values.unreadable(r.value),
            sealed=self.values.unreadable(r.value),
            held=bool(r.held), believed=bool(r.live_then), believed_now=bool(r.live_now),
            change=_change(r), salience=rounded, salience_class=named)

    def review_queue(self, *, after_seq: int = 0, limit: int = 50,
                     match: str | None = None) -> ReviewPage:
        """Claimed facts waiting for a reviewer, oldest first, with writer, cause and what
        each would supersede; with `match`, only those (and the pending retractions) whose
        writer, subject, predicate or cause contains it, in any case."""
        page_limit(limit)
        with self.db.read():
            items = []
            if match:  # the cause is sealed: claims are opened, then matched (one more: "more?")
                found = list(islice(self._claims_matching(match, after_seq), limit + 1))
                rows = [f for f, _ in found[:limit]] + ([found[limit][0]] if len(found) > limit
                                                        else [])
            else:
                rows = self.db.browse.with_status_page("quarantined", after_seq, limit)
            more = len(rows) > limit or (not match and len(rows) == limit)
            rows = rows[:limit]
            for fact in rows:
                event = self.db.events.get(fact.assert_seq)
                assert event is not None
                body = open_body(self.db, self.values.texts, event.seq, event.body)
                old = self.db.facts.get(fact.supersedes) if fact.supersedes else None
                items.append(ReviewItem(
                    fact=reads.fact_view(self.db, self.values, fact), assert_seq=fact.assert_seq,
                    tx_at=event.tx_at, writer=fact.actor, cause=Cause(**body["cause"]),
                    session=fact.session, marks=(fact.marks or "").split(",") if fact.marks
                    else [], supersedes=_ref(old) if old else None))
            waiting = [r for r in self.pending_retractions() if _matches(r, match)] \
                if after_seq == 0 else []
        return ReviewPage(items=items, next_after=rows[-1].assert_seq if more and rows else None,
                          retractions=waiting)

    def _claims_matching(self, match: str, after_seq: int) -> Iterator[tuple[FactRow, str]]:
        """Claims waiting after `after_seq` whose writer, subject, predicate or cause (opened:
        it is sealed) contains `match` in any case, oldest first, read 500 at a time."""
        needle = match.lower()
        while True:
            rows = self.db.browse.with_status_page("quarantined", after_seq, MAX_PAGE)
            for fact in rows:
                event = self.db.events.get(fact.assert_seq)
                assert event is not None
                cause = open_body(self.db, self.values.texts, event.seq, event.body)["cause"]
                text = "\x1f".join((fact.actor, fact.subject or "", fact.predicate,
                                     f"{cause.get('kind', '')}:{cause.get('ref', '')}"))
                if needle in text.lower():
                    yield fact, fact.fact_id
            if len(rows) < MAX_PAGE:
                return
            after_seq = rows[-1].assert_seq

    def review_matching(self, match: str) -> list[str]:
        """Ids of every claim waiting whose writer, subject, predicate or cause contains
        `match` (any case), oldest first: what a filtered queue's "mark all" marks."""
        with self.db.read():
            return [fact_id for _, fact_id in self._claims_matching(match, 0)]

    def pending_retractions(self) -> list[PendingRetraction]:
        """Retractions of another writer's fact waiting for a reviewer, oldest first."""
        with self.db.read():
            return [PendingRetraction(
                fact=reads.fact_view(self.db, self.values, fact), seq=seq, tx_at=tx_at,
                retractor=actor, provenance=_text(body.get("provenance")),
                reason=_text(body.get("reason")), session=_text(body.get("session")),
                event_id=event_id)
                for seq, fact, actor, tx_at, body, event_id in retractions.pending_retractions(self)]

    def holds(self, *, after_seq: int = 0, limit: int = 50) -> HoldPage:
        """Facts on legal hold, oldest first, with who placed the hold, when and why."""
        page_limit(limit)
        with self.db.read():
            items = []
            rows = self.db.browse.held_page(after_seq, limit)
            for fact in rows:
                hold = self.db.browse.last_event_of_kind(fact.fact_id, "hold")
                items.append(HoldItem(
                    fact=reads.fact_view(self.db, self.values, fact), assert_seq=fact.assert_seq,
                    held_by=hold[2] if hold else None, held_at=hold[1] if hold else None,
                    reason=open_body(self.db, self.values.texts, hold[0], hold[3]).get("reason")
                    if hold else None,
                    hold_seq=hold[0] if hold else None))
        return HoldPage(items=items,
                        next_after=rows[-1].assert_seq if len(rows) == limit else None)

    def erasure_preview(self, fact_id: str) -> ErasurePreview:
        """What `forget(fact_id)` would erase: the fact and its cascade (nothing is written)."""
        with self.db.read():
            root = reads.require_fact(self.db, fact_id)
            facts, _ = cascade(self.db, [root])
        return ErasurePreview(root=fact_id, facts=[_ref(f) for f in facts],
                              held=[f.fact_id for f in facts if f.held])

    def facts_brief(self, fact_ids: Iterable[str]) -> list[FactRef]:
        """The named facts, briefly, in the order given (unknown ids are left out)."""
        with self.db.read():
            found = (self.db.facts.get(f) for f in fact_ids)
            return [_ref(f) for f in found if f is not None]
