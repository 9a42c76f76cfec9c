"""Subcommands that read the ledger for a person: beliefs (as of a moment), show (a fact's
story), why and history, each in text with `--json` for machines."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from custody_app.domain.errors import Exit
from custody_app.interfaces.cli.common import (
    AddParser,
    add_paging,
    cursor,
    limit,
    print_json,
    show,
    shown_ledger,
)
from custody_app.interfaces.cli.text import (
    fact_line,
    history_lines,
    ident,
    plain,
    story,
    write,
)
from custody_app.ledger.facade import Ledger
from custody_app.ledger.overview import MAX_PAGE
from custody_app.ledger.readmodels import SHOW_STATUSES

NAMES = ("beliefs", "show", "why", "history")
READ_ONLY = NAMES


def add_parsers(add: AddParser) -> None:
    s = add("beliefs", "the facts believed at a moment (default: now), with their ids")
    s.add_argument("--subject")
    s.add_argument("--space")
    s.add_argument("--predicate")
    s.add_argument("--valid-at", metavar="ISO", help="true in the world at this time (default now)")
    s.add_argument("--tx-at", metavar="ISO", help="as the ledger knew it at this time (default now)")
    s.add_argument("--include", action="append", default=[], choices=SHOW_STATUSES,
                   help="also list facts in this status (repeatable)")
    add_paging(s, 50, "facts")
    s.add_argument("--json", action="store_true", help="print the page as JSON")
    s = add("show", "a fact's story in a few lines: what, who, why, what it replaced, reviews, "
            "policy", "FACT")
    s.add_argument("--policy-text", action="store_true",
                   help="print the exact policy text the fact was written under")
    s.add_argument("--json", action="store_true", help="print `why` as JSON")
    add("why", "why a fact is believed (the story `show` prints; --json for all of it)",
        "FACT").add_argument("--json", action="store_true", help="print the result as JSON")
    s = add("history", "a fact's events, one a line", "FACT")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    add_paging(s, MAX_PAGE, "events")


def _beliefs(ledger: Ledger, args: argparse.Namespace) -> int:
    page = ledger.beliefs(args.valid_at, args.tx_at, subject=args.subject, space=args.space,
                          predicate=args.predicate, show=args.include, limit=limit(args.limit),
                          after_seq=cursor(ledger, args.after))
    if args.json:
        return show(page)
    where = ", ".join(f"{name} {ident(v)}" for name, v in (("subject", args.subject),
                      ("space", args.space), ("predicate", args.predicate)) if v)
    lines = [f"Believed at valid time {page.valid_at}, as known at {page.tx_at}"
             + (f" ({where})" if where else "") + f": {len(page.facts)} fact(s)"
             + (" on this page" if page.next_after is not None else "")]
    lines += [f"  {fact_line(f)}" + ("" if f.believed else "  (not believed)") for f in page.facts]
    if page.next_after is not None:
        lines.append(f"next page: {page.next_after} (custody-app beliefs --after "
                     f"{page.next_after} ...)")
    if page.facts:
        lines.append(f"next: custody-app show {page.facts[0].fact_id} --ledger {plain(shown_ledger(args))}")
    else:
        lines.append("no fact matches; `custody-app beliefs` without filters lists them all")
    write(lines)
    return int(Exit.OK)


def _story(ledger: Ledger, args: argparse.Namespace) -> int:
    why = ledger.why(args.fact)
    if args.json:
        return show(why)
    if getattr(args, "policy_text", False):
        sys.stdout.write(f"# policy {why.policy.hash}"
                         + (f" ({plain(why.policy.path)})" if why.policy.path else "") + "\n")
        write([plain(line) for line in why.policy.source.rstrip("\n").split("\n")])
        return int(Exit.OK)
    lines = story(why, shown_ledger(args))
    at = next((n for n, line in enumerate(lines) if line.startswith("next:")), len(lines))
    for r in ledger.pending_retractions():
        if r.fact.fact_id == why.fact.fact_id:
            # Said here too: the fact is still believed, but someone asked to retract it.
            lines.insert(at, f"  RETRACTION PENDING: asked by {ident(r.retractor)} at {r.tx_at} "
                         f"({r.provenance or 'claimed'}): {plain(r.reason or '(no reason)')}; "
                         f"event {r.event_id}; review it with custody-app confirm|reject "
                         f"{why.fact.fact_id} --retraction {r.event_id}")
    write(lines)
    return int(Exit.OK)


def _history(ledger: Ledger, args: argparse.Namespace) -> int:
    history = ledger.history(args.fact)
    after, most = cursor(ledger, args.after), limit(args.limit)
    later = [e for e in history.events if e.seq > after]
    history = history.model_copy(update={"events": later[:most]})
    more = later[most - 1].seq if len(later) > most else None
    if args.json:
        print_json({**history.model_dump(mode="json"), "next_after": more})
        return int(Exit.OK)
    write(history_lines(history)
          + ([f"next page: {more} (custody-app history {args.fact} --after {more} ...)"]
             if more is not None else []))
    return int(Exit.OK)


COMMANDS: dict[str, Callable[[Ledger, argparse.Namespace], int]] = {
    "beliefs": _beliefs, "show": _story, "why": _story, "history": _history,
}
