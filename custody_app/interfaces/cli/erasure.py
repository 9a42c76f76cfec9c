"""Subcommands that erase: forget, forget-subject and sweep. Each prints its certificate (or
JSON with --json) and exits 1 when the certificate is not complete."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from custody_app.domain.errors import Exit
from custody_app.domain.escaping import escape_text, escaped
from custody_app.domain.models import REASON_CODES
from custody_app.erasure.certificate import ErasureCertificate, ForgetResult, SubjectForgetResult, SweepResult
from custody_app.interfaces.cli.common import (
    AddParser,
    add_actor,
    add_paging,
    cursor,
    limit,
    operator,
    print_json,
    print_text,
    show_rendered,
)
from custody_app.interfaces.cli.text import fact_line
from custody_app.ledger.facade import Ledger

NAMES = ("forget", "forget-subject", "sweep", "erasures", "rotate-index-key", "rotate-epoch")
READ_ONLY = ("erasures",)


def add_parsers(add: AddParser) -> None:
    for name, target, helptext in (
            ("forget", "FACT", "erase a fact's value and everything derived from it"),
            ("forget-subject", "SUBJECT", "erase a data principal: its facts, what derives from "
             "them, and its data key")):
        s = add(name, helptext, target)
        add_actor(s)
        s.add_argument("--reason", required=True, choices=REASON_CODES, help="reason code")
        s.add_argument("--json", action="store_true", help="print the certificate as JSON")
    s = add("sweep", "expire what the retention windows (or --before) allow, skipping (and "
            "listing) held facts; exit 1 only when a certificate is not complete")
    s.add_argument("--before", metavar="ISO", help="cutoff instead of the policy's windows")
    s.add_argument("--space", help="only this space")
    s.add_argument("--dry-run", action="store_true", help="show what would expire; write nothing")
    add_actor(s)
    s.add_argument("--reason", default="retention", choices=REASON_CODES)
    s.add_argument("--json", action="store_true")
    s = add("erasures", "the erasure receipts: tombstones and erasure events (reason, counts, "
            "cascade depth, time); with --subject, whether that subject was erased")
    s.add_argument("--subject", help="match this subject by its peppered hash")
    add_paging(s, 100, "erasures")
    s.add_argument("--json", action="store_true")
    s = add("rotate-epoch", "re-wrap every key under a new epoch (master) key, re-key the word "
            "index and destroy the old key, so backups, WAL archives, replicas and copies taken "
            "before an erasure no longer yield what it destroyed")
    s.add_argument("--json", action="store_true")
    s = add("rotate-index-key", "re-key the word index under a fresh key and destroy the old "
            "one, so copies taken before can no longer be tested with the current key store")
    s.add_argument("--json", action="store_true")


def _erasure(args: argparse.Namespace, result: ForgetResult | SubjectForgetResult | SweepResult,
             certificate: ErasureCertificate | None) -> int:
    if args.json:
        print_json(result.model_dump(mode="json"))
    elif certificate is not None:
        show_rendered(certificate)
    complete = certificate is None or certificate.complete
    return int(Exit.OK if complete else Exit.OP_FAILED)


def _sweep(ledger: Ledger, args: argparse.Namespace) -> int:
    result = ledger.sweep(before=args.before, space=args.space, dry_run=args.dry_run,
                          actor=operator(args), reason=args.reason)
    if not args.json:
        verb = "would expire" if result.dry_run else "expired"
        shown = escaped(result)
        print_text(f"cutoffs: {json.dumps(shown.cutoffs)}\n{verb} {len(shown.expired)}"
                   f" fact(s): {' '.join(shown.expired)}")
        if shown.held:
            print_text(f"{'would skip' if result.dry_run else 'skipped'}, on legal hold: "
                       f"{len(shown.held)} fact(s)")
            for fact_id in result.held:
                print_text(f"  {fact_line(ledger.why(fact_id).fact)}")
        if shown.note:
            print_text(shown.note)
    # A held fact skipped is the hold doing its work, not a failure (DESIGN 13: a sweep exits
    # non-zero only when a certificate is not complete); the held facts are listed above.
    return _erasure(args, result, result.certificate)


def _erasures(ledger: Ledger, args: argparse.Namespace) -> int:
    result = ledger.erasures(args.subject)
    after, most = cursor(ledger, args.after), limit(args.limit)
    # An erasure is a run of events: the cursor is the last seq of the last one shown.
    later = [r for r in result.erasures if r.first_seq > after]
    result = result.model_copy(update={"erasures": later[:most]})
    more = later[most - 1].last_seq if len(later) > most else None
    if args.json:
        print_json({**result.model_dump(mode="json"), "next_after": more})
        return int(Exit.OK)
    show_rendered(result)
    if more is not None:
        print_text(f"next page: {more} (custody-app erasures --after {more} ...)")
    return int(Exit.OK)


def _rotate(ledger: Ledger, args: argparse.Namespace) -> int:
    result = ledger.rotate_index_key()
    if args.json:
        print_json(result.model_dump(mode="json"))
    else:
        print_text(f"rotated the word index key in {result.seconds:.2f} s: {escape_text(result.detail)}")
    return int(Exit.OK if result.checkpoint_complete else Exit.OP_FAILED)


def _rotate_epoch(ledger: Ledger, args: argparse.Namespace) -> int:
    result = ledger.rotate_epoch()
    if args.json:
        print_json(result.model_dump(mode="json"))
    else:
        print_text(f"rotated the epoch key in {result.seconds:.2f} s: {escape_text(result.detail)}")
        for cert in result.certificates:
            show_rendered(cert)
    return int(Exit.OK if result.index.checkpoint_complete else Exit.OP_FAILED)


COMMANDS: dict[str, Callable[[Ledger, argparse.Namespace], int]] = {
    "forget": lambda led, a: _erasure(
        a, r := led.forget(a.fact, actor=operator(a), reason=a.reason), r.certificate),
    "forget-subject": lambda led, a: _erasure(
        a, r := led.forget_subject(a.subject, actor=operator(a), reason=a.reason),
        r.certificate),
    "sweep": _sweep,
    "erasures": _erasures,
    "rotate-index-key": _rotate,
    "rotate-epoch": _rotate_epoch,
}
