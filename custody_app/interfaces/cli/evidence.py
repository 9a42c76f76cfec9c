"""Subcommands on what relied on a belief and what leaves the ledger: blast, explain, pack, export."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from custody_app.domain.errors import Exit, LedgerError
from custody_app.domain.escaping import escape_text
from custody_app.evidence.actionpack import action_pack_text, render_offline, verify_action_pack
from custody_app.evidence.offline import OfflineReport, verify_export
from custody_app.evidence.packcheck import verify_pack
from custody_app.evidence.readmodels import BlastResult, ExplainResult
from custody_app.files.output import write_output
from custody_app.interfaces.cli.common import (
    AddParser,
    add_paging,
    cursor,
    emit,
    limit,
    print_json,
    show_rendered,
)
from custody_app.keys.keyring import read_public_key
from custody_app.ledger.facade import Ledger

NAMES = ("blast", "explain", "pack", "export", "actions")
READ_ONLY = ("blast", "explain", "actions")


def add_parsers(add: AddParser) -> None:
    s = add("blast", "what could have relied on a fact: sessions served it, their later writes "
            "and actions, derived facts (an upper bound)", "FACT")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s = add("explain", "an action explained in full: who acted, who authorised it, what was "
            "allowed, what the agent saw, what it did, why, the evidence, whether it verifies, "
            "what depended on it, what needs reversal")
    s.add_argument("action_ref", nargs="?", metavar="ACTION_REF", help="the action's ref or seq:N")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.add_argument("--out", metavar="PATH", help="write the signed action pack there")
    s.add_argument("--force", action="store_true", help="replace an --out file that exists")
    s.add_argument("--verify", metavar="PACK", help="check an action pack offline (needs --key)")
    s.add_argument("--key", metavar="PUB", help="the ledger's public key PEM (LEDGER.pub)")
    s = add("actions", "recorded actions, newest first, filtered by tool, actor, session, subject "
            "and time")
    for flag, helptext in (("--tool", "the tool, e.g. billing.issue_refund"),
                           ("--actor", "who acted, kind:id"), ("--session", "the session id"),
                           ("--subject", "the subject it concerned (matched by its hash)"),
                           ("--since", "at or after this ISO time"),
                           ("--until", "before this ISO time")):
        s.add_argument(flag, help=helptext)
    add_paging(s, 100, "actions")
    s.add_argument("--before-seq", type=int, help="the page before this seq (the same as "
                   "--after, kept for scripts)")
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


def _report(report: OfflineReport, args: argparse.Namespace) -> int:
    emit(report, args)
    for problem in report.problems:
        sys.stderr.write(escape_text(f"custody-app: {report.what} check failed: {problem}") + "\n")
    return int(Exit.OK if report.valid else Exit.OP_FAILED)


def offline(args: argparse.Namespace) -> int | None:
    """`pack --verify` and `verify --export` need no ledger: run them here, else None."""
    try:
        if args.command == "verify" and getattr(args, "export", None):
            if not Path(args.export).is_file():
                raise LedgerError("export_unreadable", f"cannot read export {args.export}: no "
                                  "such file")
            return _report(verify_export(args.export, read_public_key(args.key) if args.key else None),
                           args)
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
            return _report(verify_pack(text, read_public_key(args.key)), args)
        if args.command == "explain" and args.verify:
            return _verify_action_pack(args)
        if args.command == "explain" and not args.action_ref:
            sys.stderr.write("custody-app: explain needs ACTION_REF (or --verify PACK --key PUB)\n")
            return 2
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
    if args.out:
        document = ledger.action_pack(args.action_ref)
        write_output(args.out, action_pack_text(document), force=args.force,
                     protected=ledger.own_files())
        emit({"pack": args.out, "action_seq": document["action_seq"],
              "events": len(document["events"]),
              "key_fingerprint": document["signature"]["key_fingerprint"]}, args)
        return 0
    every = ledger.explain_all(args.action_ref)
    if args.json:
        # The served facts stay at the top level, where `explain --json` always had them (for
        # the first action the ref names); `actions` holds each action with the ref, in order.
        flat = [{**f.explain.model_dump(mode="json"), **f.model_dump(mode="json", exclude={"explain"})}
                for f in every]
        print_json({**flat[0], "actions": flat})
    elif len(every) == 1:
        show_rendered(every[0])
    else:
        print(escape_text(f"{len(every)} recorded actions have the ref {args.action_ref}, "
                          "newest trusted first (a receipt that checks and matches, then a "
                          "writer key, then the rest):"))
        for n, full in enumerate(every, 1):
            print(f"\n== {n} of {len(every)}: seq:{full.seq} ==")
            show_rendered(full)
    return 0


def _verify_action_pack(args: argparse.Namespace) -> int:
    if not args.key:
        sys.stderr.write("custody-app: explain --verify needs --key LEDGER.pub\n")
        return 2
    try:
        with open(args.verify, encoding="utf-8", newline="") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise LedgerError("pack_unreadable", f"cannot read pack {args.verify}: {exc}") from None
    report = verify_action_pack(text, read_public_key(args.key))
    code = _report(report, args)
    if report.valid:
        sys.stderr.write(render_offline(json.loads(text)) + "\n")
    return code


def _pack(ledger: Ledger, args: argparse.Namespace) -> int:
    pack = ledger.write_pack(args.fact, args.out, force=args.force)
    radius = pack.blast
    emit({"pack": args.out, "fact_id": pack.fact_id, "events": len(pack.events),
          "sessions": len(radius["sessions"]), "facts_reached": len(radius["facts"]),
          "forget_certificate": pack.forget_certificate is not None,
          "key_fingerprint": pack.signature["key_fingerprint"]}, args)
    return 0


def _actions(ledger: Ledger, args: argparse.Namespace) -> int:
    found = ledger.actions(tool=args.tool, actor=args.actor, session=args.session,
                           subject=args.subject, since=args.since, until=args.until,
                           before_seq=(cursor(ledger, args.after) if args.after is not None
                                       else args.before_seq),
                           limit=limit(args.limit))
    if args.json:
        print_json(found.model_dump(mode="json"))
    else:
        show_rendered(found)
    return 0


def _export(ledger: Ledger, args: argparse.Namespace) -> int:
    emit(ledger.export(args.out, force=args.force), args)
    return 0


COMMANDS: dict[str, Callable[[Ledger, argparse.Namespace], int]] = {
    "blast": _blast, "explain": _explain, "pack": _pack, "export": _export,
    "actions": _actions,
}
