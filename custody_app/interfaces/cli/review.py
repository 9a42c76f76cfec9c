"""Subcommands of a reviewer on the command line: queue (the review queue with totals), confirm,
reject and retract, each saying what it did to which fact and what is believed now."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable

from custody_app.domain.errors import Exit, LedgerError
from custody_app.domain.readmodels import FactOpResult, WhyResult
from custody_app.interfaces.cli.common import (
    AddParser,
    add_paging,
    cursor,
    limit,
    print_json,
    shown_ledger,
)
from custody_app.interfaces.cli.text import fact_line, ident, plain, value_text, write
from custody_app.interfaces.tui.access import REVIEWER_ENV, resolve_reviewer
from custody_app.ledger.facade import Ledger
from custody_app.ledger.overview import MAX_PAGE
from custody_app.ledger.readmodels import PendingRetraction, ReviewItem

NAMES = ("queue", "confirm", "reject", "retract")
READ_ONLY = ("queue",)


def add_parsers(add: AddParser) -> None:
    s = add("queue", "claims waiting for a reviewer, oldest first, with totals by writer and cause")
    s.add_argument("--writer", metavar="KIND:ID", help="only claims by this writer")
    s.add_argument("--subject", help="only claims about this subject")
    add_paging(s, 20, "claims")
    s.add_argument("--json", action="store_true", help="print totals and items as JSON")
    for name, helptext, reason in (
            ("confirm", "confirm a quarantined claim: reads return it from now on", False),
            ("reject", "reject a quarantined claim: it is never believed", True),
            ("retract", "withdraw a fact: reads stop returning it, what it replaced is believed "
             "again", True)):
        s = add(name, helptext, "FACT")
        s.add_argument("--actor", metavar="KIND:ID",
                       help=f"who does this (default: ${REVIEWER_ENV}, the config file's "
                       "reviewer, else user:LOGIN)")
        s.add_argument("--reason", required=reason, help="why, in words (at most 500 chars)")
        if name != "retract":
            s.add_argument("--retraction", metavar="EVENT",
                           help="review the fact's pending retraction with this event id (as "
                           "`queue` and `show` print it), instead of a quarantined claim")
        s.add_argument("--json", action="store_true", help="print the result as JSON")


def _whole_queue(ledger: Ledger) -> list[ReviewItem]:
    """Every waiting claim, page by page (totals must count all of them, not one page)."""
    items: list[ReviewItem] = []
    after: int | None = 0
    while after is not None:
        page = ledger.review_queue(after_seq=after, limit=MAX_PAGE)
        items += page.items
        after = page.next_after
    return items


def _retraction_lines(waiting: list[PendingRetraction], ledger_name: str) -> list[str]:
    """The retractions waiting for review, each marked as such, with the command that
    reviews that very retraction (by its event id)."""
    if not waiting:
        return []
    lines = [f"Retractions waiting: {len(waiting)} (the fact stays believed until one is confirmed)"]
    for r in waiting:
        lines.append(f"  RETRACTION PENDING of {fact_line(r.fact)}")
        lines.append(f"      asked by {ident(r.retractor)} at {r.tx_at} ({r.provenance or 'claimed'}"
                     f"): {plain(r.reason or '(no reason)')}; event {r.event_id}")
        lines.append(f"      next: custody-app confirm {r.fact.fact_id} --retraction {r.event_id} "
                     f"--ledger {ledger_name}   |   custody-app reject {r.fact.fact_id} "
                     f"--retraction {r.event_id} --reason TEXT --ledger {ledger_name}")
    return lines


def _queue(ledger: Ledger, args: argparse.Namespace) -> int:
    waiting = _whole_queue(ledger)
    waiting_retractions = [r for r in ledger.pending_retractions()
                           if (not args.writer or r.retractor == args.writer)
                           and (not args.subject or r.fact.subject == args.subject)]
    chosen = [i for i in waiting if (not args.writer or i.writer == args.writer)
              and (not args.subject or i.fact.subject == args.subject)]
    by_writer = Counter(i.writer for i in chosen)
    by_cause = Counter(i.cause.kind for i in chosen)
    after = cursor(ledger, args.after)
    later = [i for i in chosen if i.assert_seq > after]
    shown = later[: args.limit]
    more = shown[-1].assert_seq if len(later) > len(shown) and shown else None
    if args.json:
        print_json({"total": len(waiting), "matching": len(chosen), "by_writer": dict(by_writer),
                    "by_cause": dict(by_cause), "shown": len(shown), "next_after": more,
                    "items": [i.model_dump(mode="json") for i in shown],
                    "retractions": [r.model_dump(mode="json") for r in waiting_retractions]})
        return int(Exit.OK)
    filtered = len(chosen) != len(waiting)
    lines = [f"Review queue: {len(waiting)} claim(s) waiting"
             + (f", {len(chosen)} matching" if filtered else "")
             + (f"; showing the oldest {len(shown)}" if len(shown) < len(chosen) else "")]
    if chosen:
        lines.append("  by writer: " + ", ".join(f"{ident(w)} {n}" for w, n in by_writer.most_common()))
        lines.append("  by cause: " + ", ".join(f"{c} {n}" for c, n in by_cause.most_common()))
    for item in shown:
        marks = f" marked {','.join(item.marks)}" if item.marks else ""
        replaces = f"; would replace {item.supersedes.fact_id}" if item.supersedes else ""
        lines.append(f"  {fact_line(item.fact)}")
        lines.append(f"      by {ident(item.writer)} at {item.tx_at}, cause {item.cause.kind} "
                     f"{ident(item.cause.ref)}{marks}{replaces}")
    ledger_name = plain(shown_ledger(args))
    lines += _retraction_lines(waiting_retractions, ledger_name)
    if more is not None:
        lines.append(f"next page: {more} (custody-app queue --after {more} ...)")
    if shown:
        lines.append(f"next: custody-app confirm {shown[0].fact.fact_id} --ledger {ledger_name}"
                     f"   |   custody-app reject {shown[0].fact.fact_id} --reason TEXT "
                     f"--ledger {ledger_name}")
    write(lines)
    return int(Exit.OK)


def _outcome(verb: str, before: WhyResult, result: FactOpResult, after: Ledger) -> list[str]:
    f = before.fact
    lines = [f"{verb} {f.fact_id}: {ident(f.subject)} {ident(f.predicate)} = "
             f"{value_text(f.value)}; now {result.status} (seq {result.seq}, {result.tx_at})"]
    # What a retraction or rejection hands belief back to: the facts it had replaced.
    for ref in before.supersedes:
        old = after.why(ref.fact_id).fact
        state = "believed again" if old.status == "active" else f"still {old.status}"
        lines.append(f"  {state}: {fact_line(old)}")
    return lines


def _review(verb: str, past: str) -> Callable[[Ledger, argparse.Namespace], int]:
    def run(ledger: Ledger, args: argparse.Namespace) -> int:
        actor = resolve_reviewer(args.actor)
        before = ledger.why(args.fact)
        do = getattr(ledger, verb)
        named = getattr(args, "retraction", None)
        extra = {"retraction_event": named} if named else {}
        if not named and verb != "retract":
            _refuse_unnamed_retraction(ledger, args.fact, verb, before)
        result: FactOpResult = (do(args.fact, actor=actor, reason=args.reason, **extra)
                                if args.reason or verb != "confirm"
                                else do(args.fact, actor=actor, **extra))
        if named:
            return _retraction_outcome(verb, past, before, result, args.json)
        if args.json:
            print_json(result.model_dump(mode="json"))
            return int(Exit.OK)
        lines = _outcome(past, before, result, ledger)
        if verb == "confirm" and result.status != "active":
            lines.append(f"  not believed yet: it is {result.status}")
        write(lines)
        return int(Exit.OK)
    return run


def _refuse_unnamed_retraction(ledger: Ledger, fact_id: str, verb: str, before: WhyResult) -> None:
    """`confirm FACT` / `reject FACT` on a fact that is not a claim but has a retraction
    waiting: name the retraction (its event id), so the decision applies to the one read."""
    if before.fact.status == "quarantined":
        return
    waiting = [r for r in ledger.pending_retractions() if r.fact.fact_id == fact_id]
    if waiting:
        r = waiting[-1]
        raise LedgerError(
            "retraction_not_named",
            f"fact {fact_id} is not a claim waiting for review, but a retraction of it by "
            f"{r.retractor} is (event {r.event_id}): to {verb} that retraction, run custody-app "
            f"{verb} {fact_id} --retraction {r.event_id}", fact_id=fact_id, retraction_event=r.event_id)


def _retraction_outcome(verb: str, past: str, before: WhyResult, result: FactOpResult,
                        as_json: bool) -> int:
    if as_json:
        print_json(result.model_dump(mode="json"))
        return int(Exit.OK)
    f = before.fact
    effect = ("the fact is retracted" if verb == "confirm" else "the fact stays as it was")
    write([f"{past} the retraction of {f.fact_id}: {ident(f.subject)} {ident(f.predicate)} = "
           f"{value_text(f.value)}; {effect}, now {result.status} (seq {result.seq}, "
           f"{result.tx_at})"])
    return int(Exit.OK)


def _checked(run: Callable[[Ledger, argparse.Namespace], int]
             ) -> Callable[[Ledger, argparse.Namespace], int]:
    def checked(ledger: Ledger, args: argparse.Namespace) -> int:
        limit(args.limit, most=1 << 30)
        return run(ledger, args)
    return checked


COMMANDS: dict[str, Callable[[Ledger, argparse.Namespace], int]] = {
    "queue": _checked(_queue),
    "confirm": _review("confirm", "confirmed"),
    "reject": _review("reject", "rejected"),
    "retract": _review("retract", "retracted"),
}
