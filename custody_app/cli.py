"""The one console script, `custody-app`: the TUI, --batch, and the subcommands."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from enum import IntEnum
from pathlib import Path

from custody_app.batch import run_batch
from custody_app.errors import LedgerError
from custody_app.ledger import Ledger
from custody_app.resources import sample_batch_path
from custody_app.timeutil import ManualClock

LEDGER_ENV = "CUSTODY_LEDGER"
POLICY_ENV = "CUSTODY_POLICY"
DEFAULT_LEDGER = "custody.db"


class Exit(IntEnum):
    OK = 0
    OP_FAILED = 1
    USAGE = 2
    UNOPENABLE = 3


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ledger", help=f"ledger file (default: ${LEDGER_ENV} or ./{DEFAULT_LEDGER})")
    parser.add_argument("--policy", help=f"policy TOML (default: ${POLICY_ENV} or the shipped default)")


def _main_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="custody-app",
        description="Governed memory for AI agents. Subcommands: verify, why, history, rebuild.",
    )
    p.add_argument("ledger_path", nargs="?", metavar="LEDGER", help="ledger file")
    p.add_argument("--batch", metavar="FILE", help="run JSON Lines ops from FILE ('-' for stdin)")
    p.add_argument("--demo", action="store_true",
                   help="replay the sample support-agent ledger into a fresh file and run it")
    p.add_argument("--manual-clock", action="store_true",
                   help="allow {\"op\": \"clock\", \"set\": ISO} to set transaction time")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failed op")
    _common(p)
    return p


def _sub_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="custody-app")
    sub = p.add_subparsers(dest="command", required=True)
    for name, helptext in (("verify", "walk the hash chain"),
                           ("rebuild", "recompute the projection and report differences")):
        s = sub.add_parser(name, help=helptext)
        _common(s)
        if name == "rebuild":
            s.add_argument("--repair", action="store_true", help="replace a differing projection")
    for name, helptext in (("why", "why a fact is believed"), ("history", "a fact's events")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("fact_id", metavar="FACT")
        _common(s)
    return p


SUBCOMMANDS = ("verify", "rebuild", "why", "history")


def _ledger_path(args: argparse.Namespace) -> str:
    return (getattr(args, "ledger", None) or getattr(args, "ledger_path", None)
            or os.environ.get(LEDGER_ENV) or DEFAULT_LEDGER)


def _open(args: argparse.Namespace, *, manual_clock: bool = False,
          readonly: bool = False) -> Ledger:
    policy = args.policy or os.environ.get(POLICY_ENV)
    return Ledger.open(_ledger_path(args), policy=policy,
                       clock=ManualClock() if manual_clock else None, readonly=readonly)


def _fail(exc: LedgerError, code: Exit) -> int:
    sys.stderr.write(f"custody-app: {exc.message} ({exc.code})\n")
    return int(code)


def _print(obj: object) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def _subcommand(argv: list[str]) -> int:
    args = _sub_parser().parse_args(argv)
    try:
        ledger = _open(args, readonly=args.command != "rebuild")
    except LedgerError as exc:
        return _fail(exc, Exit.UNOPENABLE)
    with ledger:
        try:
            if args.command == "verify":
                report = ledger.verify()
                _print(report.model_dump(mode="json"))
                return int(Exit.OK if report.valid else Exit.OP_FAILED)
            if args.command == "rebuild":
                rebuilt = ledger.rebuild(repair=args.repair)
                _print(rebuilt.model_dump(mode="json"))
                return int(Exit.OK if not rebuilt.differences or rebuilt.repaired
                           else Exit.OP_FAILED)
            result = ledger.why(args.fact_id) if args.command == "why" else ledger.history(
                args.fact_id)
            _print(result.model_dump(mode="json"))
            return int(Exit.OK)
        except LedgerError as exc:
            return _fail(exc, Exit.OP_FAILED)


def _run_batch(args: argparse.Namespace, source: str, manual_clock: bool) -> int:
    # The batch file first: a usage error must not create a ledger file as a side effect.
    try:
        stream = sys.stdin if source == "-" else open(source, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        sys.stderr.write(f"custody-app: cannot read batch file {source}: {exc.strerror}\n")
        return int(Exit.USAGE)
    try:
        ledger = _open(args, manual_clock=manual_clock)
    except LedgerError as exc:
        if stream is not sys.stdin:
            stream.close()
        return _fail(exc, Exit.UNOPENABLE)
    with ledger, stream:
        outcome = run_batch(ledger, stream, sys.stdout, fail_fast=args.fail_fast)
    return int(Exit.OK if outcome.failed == 0 else Exit.OP_FAILED)


def _demo(args: argparse.Namespace) -> int:
    """Replay the sample into a fresh ledger (./custody-demo.db unless --ledger) and show it."""
    target = Path(args.ledger or "custody-demo.db")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    args.ledger = str(target)
    with tempfile.TemporaryDirectory() as tmp:
        sample = Path(tmp) / "sample.jsonl"
        shutil.copyfile(sample_batch_path(), sample)
        code = _run_batch(args, str(sample), manual_clock=True)
    sys.stderr.write(f"custody-app: demo ledger written to {target}; try "
                     f"`custody-app verify --ledger {target}`\n")
    return code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        return _subcommand(argv)
    args = _main_parser().parse_args(argv)
    if args.demo:
        return _demo(args)
    if args.batch:
        return _run_batch(args, args.batch, args.manual_clock)
    sys.stderr.write("custody-app: the terminal UI is not built yet; use --batch FILE or --demo\n")
    return int(Exit.USAGE)


if __name__ == "__main__":
    sys.exit(main())
