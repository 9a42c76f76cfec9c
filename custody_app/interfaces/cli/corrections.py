"""Subcommands that write a fact from the command line: correct (a replacement, an assert that
supersedes the fact, same subject and predicate) and affirm (the fact still holds)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from custody_app.domain.errors import Exit
from custody_app.domain.models import PROVENANCES
from custody_app.domain.readmodels import AssertResult
from custody_app.interfaces.cli.common import AddParser, add_actor, operator, print_json
from custody_app.interfaces.cli.text import ident, value_text, write
from custody_app.ledger.facade import Ledger

NAMES = ("correct", "affirm")
READ_ONLY: tuple[str, ...] = ()


def add_parsers(add: AddParser) -> None:
    s = add("correct", "replace a fact's value: a new fact, same subject and predicate, that "
            "supersedes it (VALUE is read as JSON when it parses, else as a string)",
            "FACT", "VALUE")
    add_actor(s)
    s.add_argument("--reason", required=True, help="why, in words (at most 500 chars)")
    s.add_argument("--provenance", choices=PROVENANCES, default="attested",
                   help="the correction's standing (default attested: an operator's word; "
                   "claimed waits for a reviewer)")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s = add("affirm", "record that a fact still holds (it stays believed, re-read as current)",
            "FACT")
    add_actor(s)
    s.add_argument("--json", action="store_true", help="print the result as JSON")


def parse_value(text: str) -> Any:
    """VALUE as JSON when it parses (`42`, `true`, `{"a": 1}`, `"quoted"`), else the text as a
    string; `null` is kept as text, since a null value means erased."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return text if value is None else value


def masked_note(result: AssertResult) -> list[str]:
    """What redaction masked in the write, field by field (never the masked text)."""
    if not result.redacted:
        return []
    return ["  masked at ingest: " + "; ".join(f"{', '.join(kinds)} in {field}"
                                               for field, kinds in result.redacted.items())]


def _correct(ledger: Ledger, args: argparse.Namespace) -> int:
    old = ledger.why(args.fact).fact
    result = ledger.assert_fact(
        old.subject, old.predicate, parse_value(args.value), actor=operator(args),
        cause={"kind": "manual", "ref": f"correct:{old.fact_id}", "detail": args.reason},
        space=old.space, supersedes=old.fact_id, provenance=args.provenance)
    if args.json:
        print_json(result.model_dump(mode="json"))
        return int(Exit.OK)
    new = ledger.why(result.fact_id).fact
    lines = [f"corrected {old.fact_id} with {new.fact_id}: {ident(new.subject)} "
             f"{ident(new.predicate)} = {value_text(new.value)} (was {value_text(old.value)}); "
             f"now {result.status}, {result.provenance} (seq {result.seq}, {result.tx_at})"]
    if result.status == "quarantined":
        lines.append("  waiting for review: the old value stays believed until a reviewer "
                     "confirms the correction")
    write(lines + masked_note(result))
    return int(Exit.OK)


def _affirm(ledger: Ledger, args: argparse.Namespace) -> int:
    result = ledger.affirm(args.fact, actor=operator(args))
    if args.json:
        print_json(result.model_dump(mode="json"))
        return int(Exit.OK)
    f = ledger.why(args.fact).fact
    write([f"affirmed {f.fact_id}: {ident(f.subject)} {ident(f.predicate)} = "
           f"{value_text(f.value)}; now {result.status} (seq {result.seq}, {result.tx_at})"])
    return int(Exit.OK)


COMMANDS: dict[str, Callable[[Ledger, argparse.Namespace], int]] = {
    "correct": _correct, "affirm": _affirm,
}
