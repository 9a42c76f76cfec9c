"""`custody-app eval`: run the scenarios against the ledger (and the naive baseline), sign and
verify reports. Exit 0 when the ledger is perfect, 1 when it scores below, 2 on bad input."""

from __future__ import annotations

import argparse
import json
import sys
from enum import IntEnum

from custody_app.domain.errors import LedgerError, Parser
from custody_app.evaluation.report import (
    build_report,
    read_private_key,
    render_table,
    sign_report,
    verify_report,
    write_key_pair,
)
from custody_app.evaluation.runner import evaluate
from custody_app.evaluation.scenarios import load_scenarios
from custody_app.evaluation.systems import LedgerMemory, MemoryUnderTest, OverwriteMemory
from custody_app.files.output import write_output
from custody_app.keys.keyring import read_public_key


class EvalExit(IntEnum):
    OK = 0
    BELOW_PERFECT = 1
    USAGE = 2


def _parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="custody-app eval",
        description="Replay memory-mutation scenarios against the ledger and score every read "
        "(correct, stale, contradiction, blast radius). Exit 0 when the ledger is perfect, 1 "
        "when it scores below perfect (or a report does not verify), 2 on bad input.")
    p.add_argument("--scenarios", metavar="FILE", help="scenario file (default: the built-in ones)")
    p.add_argument("--baseline", action="store_true",
                   help="also run the naive overwrite store and print both side by side")
    p.add_argument("--policy", help="policy TOML for the ledger (default: the shipped default)")
    p.add_argument("--json", action="store_true", help="print the report as JSON, not a table")
    p.add_argument("--out", metavar="REPORT", help="write the JSON report to this file")
    p.add_argument("--force", action="store_true", help="replace REPORT if it exists")
    p.add_argument("--sign", metavar="KEY", help="sign the report with this Ed25519 private key "
                   "(PKCS#8 PEM, e.g. from --keygen); needs --out")
    p.add_argument("--verify", metavar="REPORT", help="check a signed report's signature and "
                   "that it was made on these scenarios; runs nothing")
    p.add_argument("--key", metavar="PUB", help="with --verify: the public key PEM to require")
    p.add_argument("--keygen", metavar="FILE",
                   help="write a new signing key to FILE (0600) and its public key to FILE.pub")
    return p


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")


def _fail(exc: LedgerError) -> int:
    sys.stderr.write(f"custody-app eval: {exc.message} ({exc.code})\n")
    return int(EvalExit.USAGE)


def eval_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.keygen:
            _say(json.dumps(write_key_pair(args.keygen), indent=2))
            return int(EvalExit.OK)
        if args.verify:
            pem = read_public_key(args.key) if args.key else None
            check = verify_report(args.verify, scenarios=args.scenarios, public_key=pem)
            _say(json.dumps(check.model_dump(mode="json"), indent=2))
            return int(EvalExit.OK if check.valid else EvalExit.BELOW_PERFECT)
        if args.sign and not args.out:
            raise LedgerError("usage", "--sign needs --out REPORT")
        key = read_private_key(args.sign) if args.sign else None
        scenarios = load_scenarios(args.scenarios)
        memories: list[MemoryUnderTest] = [LedgerMemory(args.policy)]
        if args.baseline:
            memories.append(OverwriteMemory())
        result = evaluate(scenarios, memories)
        report = build_report(result)
        if key is not None:
            report = sign_report(report, key)
        if args.out:
            write_output(args.out, json.dumps(report, indent=2, ensure_ascii=False) + "\n",
                         force=args.force)
        _say(json.dumps(report, indent=2, ensure_ascii=False) if args.json
             else render_table(result))
    except LedgerError as exc:
        return _fail(exc)
    ledger = result.systems[0]
    if not ledger.perfect:
        sys.stderr.write("custody-app eval: the ledger scored below perfect\n")
        for problem in ledger.problems:
            sys.stderr.write(f"  scenario {problem.scenario!r} op index {problem.op_index} "
                             f"({problem.op}): expected {problem.expected_error or 'success'}, "
                             f"got {problem.got_error or 'success'}\n")
        for read in ledger.read_scores:
            if not read.correct:
                sys.stderr.write(f"  scenario {read.scenario!r} op index {read.op_index}: "
                                 f"expected {json.dumps(read.expect)}, got "
                                 f"{json.dumps(read.got)}\n")
        return int(EvalExit.BELOW_PERFECT)
    return int(EvalExit.OK)
