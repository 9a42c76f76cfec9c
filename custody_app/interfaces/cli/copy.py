"""`custody-app copy SRC DST`: a whole ledger, with its key store, into an empty place on either
backend (custody_app.ledger.copy says what is copied and what is refused)."""

from __future__ import annotations

import sys

from custody_app.domain.errors import Exit, LedgerError, Parser
from custody_app.interfaces.cli.common import fail, print_json, print_text
from custody_app.ledger.copy import copy_ledger

PROG = "custody-app copy"


def _progress(table: str, done: int) -> None:
    """Large tables say how far they are (a batch at a time), on stderr."""
    if done >= 50_000:
        sys.stderr.write(f"\r{PROG}: {table}: {done:,} row(s)")
        sys.stderr.flush()


def copy_main(argv: list[str]) -> int:
    p = Parser(
        prog=PROG,
        description="Copy a whole ledger (every event with its hash and signature, sealed "
        "values, policies, checkpoints, erasure records) and its key store into an empty "
        "place: a SQLite file or a PostgreSQL schema (postgresql://USER@HOST:PORT/DB, "
        "?schema=NAME), either way. The copy keeps the master key (written to the "
        "destination's master key file unless $CUSTODY_MASTER_KEY gives it) and rebuilds the "
        "recall indexes; `custody-app verify --ledger DST --key SRC.pub` checks it. A "
        "destination that holds anything is refused.")
    p.add_argument("source", metavar="SRC", help="the ledger to copy (a file or a URL)")
    p.add_argument("destination", metavar="DST", help="where the copy goes (must be empty)")
    p.add_argument("--keystore", metavar="KEYS",
                   help="the source's key store (default: $CUSTODY_KEYSTORE or SRC's own)")
    p.add_argument("--to-keystore", metavar="KEYS",
                   help="the copy's key store (default: DST's own: DST.keys beside a file, "
                   "the schema NAME_keys of a server ledger)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    try:
        result = copy_ledger(args.source, args.destination, keystore=args.keystore,
                             to_keystore=args.to_keystore, progress=_progress)
    except LedgerError as exc:
        return fail(exc, Exit.UNOPENABLE)
    if args.json:
        print_json(result.model_dump(mode="json"))
    else:
        print_text(result.render())
    return int(Exit.OK)
