"""The ledger's events newest first, each with the fact it is about and a one-line summary:
what the terminal app's live timeline pages through."""

from __future__ import annotations

from typing import Any

from custody_app.core.ledger_core import LedgerCore
from custody_app.core.texts import open_body
from custody_app.domain.sealed_text import ERASED_TEXT, SEALED_TEXT
from custody_app.ledger.overview import page_limit
from custody_app.ledger.readmodels import TimelineEvent, TimelinePage

# Summaries are one line: the screen cuts them further to its width.
SUMMARY_CHARS = 120


class TimelineReads(LedgerCore):
    """The timeline read; bounded by `limit` like every browsing read."""

    def timeline(self, *, before_seq: int | None = None, limit: int = 50) -> TimelinePage:
        """Up to `limit` events before `before_seq` (default: from the head), newest first."""
        page_limit(limit)
        with self.db.read():
            head = self.db.browse.head_seq()
            cursor = head + 1 if before_seq is None else before_seq
            rows = self.db.browse.events_newest(cursor, limit)
            events = [self._timeline_event(row) for row in rows]
        last = events[-1].seq if events else None
        return TimelinePage(events=events, head_seq=head,
                            next_before=last if len(events) == limit and last != 1 else None)

    def _timeline_event(self, row: tuple[object, ...]) -> TimelineEvent:
        seq, kind, tx_at, actor, fact_id, subject, predicate, body, blob, status = row
        data = open_body(self.db, self.values.texts, int(str(seq)), str(body))  # reasons sealed
        value = None
        if kind == "assert" and isinstance(fact_id, str) and isinstance(subject, str):
            opened = self.values.open_subject(fact_id, subject,
                                              blob if isinstance(blob, bytes) else None)
            unread = self.values.unreadable(blob if isinstance(blob, bytes) else None)
            value = (SEALED_TEXT if unread else ERASED_TEXT) if opened is None else opened
        text = summary(str(kind), data, value)
        return TimelineEvent(
            seq=int(str(seq)), tx_at=str(tx_at), kind=str(kind), actor=str(actor),
            fact_id=None if fact_id is None else str(fact_id),
            subject=None if subject is None else str(subject),
            predicate=None if predicate is None else str(predicate),
            status=None if status is None else str(status),
            provenance=data.get("provenance") if isinstance(data.get("provenance"), str) else None,
            summary=text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 1] + "…")


def summary(kind: str, body: dict[str, Any], value: str | None) -> str:
    """What an event did, in a few words, from its body (and an assert's value, as JSON)."""
    b = body
    if kind == "assert":
        extra = f", supersedes {b['supersedes']}" if b.get("supersedes") else ""
        return f"= {value} ({b.get('provenance')}{extra})"
    if kind in ("retract", "confirm", "reject", "hold", "release"):
        pending = " (pending review)" if b.get("pending") else ""
        of = f"the retraction #{b['retraction']}: " if b.get("retraction") else ""
        return f"{of}{b.get('reason') or ''}{pending}".strip()
    if kind in ("forget", "expire"):
        root = f", cascaded from {b['root']}" if b.get("root") else ""
        rule = ""
        if kind == "expire":
            # A sweep with an explicit cutoff (`sweep --before`) applies no policy window: the
            # event has a cutoff and no `window` field.
            window = f", window {b['window']}" if b.get("window") else ""
            rule = f"{window}, cutoff {str(b.get('cutoff'))[:19]}"
        return f"{b.get('reason')}{rule}{root}"
    if kind == "forget_subject":
        counts = ", ".join(f"{k} {v}" for k, v in sorted((b.get("counts") or {}).items()))
        return f"{b.get('reason')}: {counts}"
    if kind == "served":
        return f"{len(b.get('fact_ids') or [])} fact(s) via {b.get('via')} to {b.get('session')}"
    if kind == "acted":
        return f"{b.get('tool')} {b.get('ref')} → {b.get('outcome')} in {b.get('session')}"
    if kind == "checkpoint":
        return f"signed head #{b.get('checkpoint_seq')} (key {str(b.get('key_fingerprint'))[:12]})"
    if kind == "policy":
        return f"policy {str(b.get('policy_hash'))[:12]} in force"
    return ""
