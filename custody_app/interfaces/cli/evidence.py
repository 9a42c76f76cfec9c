"""Subcommands on what relied on a belief and what leaves the ledger: blast, explain, pack, export."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from custody_app.domain.errors import LedgerError
from custody_app.domain.escaping import escape_text
from custody_app.evidence.offline import OfflineReport, verify_export
from custody_app.evidence.packcheck import verify_pack
from custody_app.evidence.readmodels import BlastResult, ExplainResult
from custody_app.interfaces.cli.common import AddParser, print_json, show_rendered
from custody_app.keys.keyring import read_public_key
from custody_app.ledger.facade import Ledger

NAMES = ("blast", "explain", "pack", "export")
READ_ONLY = ("blast", "explain")


def add_parsers(add: AddParser) -> None:
    s = add("blast", "what could have relied on a fact: sessions served it, their later writes "
            "and actions, derived facts (an upper bound)", "FACT")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s = add("explain", "what a recorded action's session had been served before it, and which "
            "of those facts were since retracted or erased", "ACTION_REF")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s = add("pack", "write one fact's signed evidence pack, or check one with --verify")
    s.add_argument("fact", nargs="?", metavar="FACT", help="the fact to pack")
    s.add_argument("--out", metavar="PATH", help="where to write the pack")
    s.add_argument("--verify", metavar="PACK", help="check a pack offline (needs --key)")
    s.add_argument("--key", metavar="PUB", help="the ledger's public key PEM (LEDGER.pub)")
    s.add_argument("--force", action="store_true", help="replace PATH if it exists (never the "
                   "ledger's own files)")
    s = add("export", "write the whole event log as JSON Lines (one event per line, with its chain "
            "fields; erased values null) and a signed trailer")
    s.add_argument("--out", metavar="PATH", required=True, help="where to write the export")
    s.add_argument("--force", action="store_true", help="replace PATH if it exists (never the "
                   "ledger's own files)")


def _report(report: OfflineReport, as_json: bool = True) -> int:
    if as_json:
        print_json(report.model_dump(mode="json"))
    for problem in report.problems:
        sys.stderr.write(escape_text(f"custody-app: {report.what} check failed: {problem}") + "\n")
    return 0 if report.valid else 1


def offline(args: argparse.Namespace) -> int | None:
    """`pack --verify` and `verify --export` need no ledger: run them here, else None."""
    try:
        if args.command == "verify" and getattr(args, "export", None):
            if not Path(args.export).is_file():
                raise LedgerError("export_unreadable", f"cannot read export {args.export}: no "
                                  "such file")
            return _report(verify_export(args.export, read_public_key(args.key) if args.key else None))
        if args.command == "pack" and args.verify:
            if not args.key:
                sys.stderr.write("custody-app: pack --verify needs --key LEDGER.pub\n")
                return 2
            try:
                with open(args.verify, encoding="utf-8", newline="") as handle:
                    text = handle.read()
            except (OSError, UnicodeDecodeError) as exc:
                raise LedgerError("pack_unreadable",
                                  f"cannot read pack {args.verify}: {exc}") from None
            return _report(verify_pack(text, read_public_key(args.key)))
        if args.command == "pack" and (not args.fact or not args.out):
            sys.stderr.write("custody-app: pack needs FACT and --out PATH (or --verify PACK "
                             "--key PUB)\n")
            return 2
    except LedgerError as exc:
        sys.stderr.write(escape_text(f"custody-app: {exc.message} ({exc.code})") + "\n")
        return 1
    return None


def _readable(result: BlastResult | ExplainResult, as_json: bool) -> int:
    """A report as JSON for machines, or its readable rendering."""
    if as_json:
        print_json(result.model_dump(mode="json"))
    else:
        show_rendered(result)
    return 0


def _blast(ledger: Ledger, args: argparse.Namespace) -> int:
    return _readable(ledger.blast(args.fact), args.json)


def _explain(ledger: Ledger, args: argparse.Namespace) -> int:
    return _readable(ledger.explain(args.action_ref), args.json)


def _pack(ledger: Ledger, args: argparse.Namespace) -> int:
    pack = ledger.write_pack(args.fact, args.out, force=args.force)
    radius = pack.blast
    print_json({"pack": args.out, "fact_id": pack.fact_id, "events": len(pack.events),
          "sessions": len(radius["sessions"]), "facts_reached": len(radius["facts"]),
          "forget_certificate": pack.forget_certificate is not None,
          "key_fingerprint": pack.signature["key_fingerprint"]})
    return 0


def _export(ledger: Ledger, args: argparse.Namespace) -> int:
    print_json(ledger.export(args.out, force=args.force).model_dump(mode="json"))
    return 0


COMMANDS: dict[str, Callable[[Ledger, argparse.Namespace], int]] = {
    "blast": _blast, "explain": _explain, "pack": _pack, "export": _export,
}
