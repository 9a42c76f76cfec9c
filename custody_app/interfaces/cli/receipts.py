"""`custody-app receipt-key FILE` (an issuer key pair for a tool gateway) and `custody-app
receipt verify FILE` (check a receipt offline, under a public key or a policy's issuers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import ValidationError

from custody_app.domain.errors import LedgerError, Parser
from custody_app.domain.escaping import escape_text
from custody_app.domain.policy import load_policy
from custody_app.domain.receipts import Receipt
from custody_app.keys.receipts import new_issuer_key, receipt_problem


def _fail(message: str, code: int, prog: str) -> int:
    sys.stderr.write(escape_text(f"{prog}: {message}") + "\n")  # names the user typed, too
    return code


def receipt_key_main(argv: list[str]) -> int:
    p = Parser(
        prog="custody-app receipt-key",
        description="Create an Ed25519 key pair for a tool gateway that signs receipts: FILE "
        "(private, PKCS#8 PEM, mode 0600) and FILE.pub (the public key in hex), and print the "
        "policy line that registers it under [provenance].")
    p.add_argument("file", metavar="FILE", help="where to write the private key (never overwritten)")
    p.add_argument("--issuer", default="ISSUER", help="the issuer name receipts will carry")
    args = p.parse_args(argv)
    try:
        public = new_issuer_key(args.file)
    except LedgerError as exc:
        return _fail(f"{exc.message} ({exc.code})", 1, "custody-app receipt-key")
    sys.stdout.write(escape_text(f'receipt_issuers = {{"{args.issuer}" = "{public}"}}') + "\n")
    sys.stderr.write(escape_text("custody-app: put that line under [provenance] in the policy; "
                                 f"sign receipts with custody_app.receipts.sign({args.file!r}, "
                                 "...)") + "\n")
    return 0


def receipt_main(argv: list[str]) -> int:
    p = Parser(prog="custody-app receipt",
                                description="Check a signed tool receipt offline.")
    sub = p.add_subparsers(dest="action", required=True)
    v = sub.add_parser("verify", help="check a receipt's signature (and session, tool)")
    v.add_argument("file", metavar="FILE", help="the receipt as JSON")
    v.add_argument("--key", metavar="PUB", help="the issuer's public key file (hex, from receipt-key)")
    v.add_argument("--policy", metavar="POLICY", help="check against this policy's receipt_issuers")
    v.add_argument("--session", help="also require the receipt to be for this session")
    v.add_argument("--tool", help="also require the receipt to be for this tool")
    args = p.parse_args(argv)
    prog = "custody-app receipt verify"
    try:
        data = json.loads(Path(args.file).read_text(encoding="utf-8"))
        receipt = Receipt.model_validate(data)
        if args.key:
            issuers = {receipt.issuer: Path(args.key).read_text(encoding="ascii").strip()}
        else:
            issuers = dict(load_policy(args.policy).policy.provenance.receipt_issuers)
    except (OSError, ValueError) as exc:  # unreadable, not JSON, or not a receipt
        detail = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        return _fail(f"cannot read receipt {args.file}: {detail} (receipt_unreadable)", 2, prog)
    except LedgerError as exc:
        return _fail(f"{exc.message} ({exc.code})", 2, prog)
    problem = receipt_problem(receipt, issuers, args.session or receipt.session, args.tool)
    report = {"receipt_id": receipt.receipt_id, "issuer": receipt.issuer, "tool": receipt.tool,
              "session": receipt.session, "valid": problem is None,
              "failed_check": problem[0] if problem else None}
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    if problem is not None:
        return _fail(f"{problem[1]} (receipt_invalid, check {problem[0]})", 1, prog)
    return 0
