"""The one console script, `custody-app`: the TUI, --batch, and the subcommands."""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import sys
import tempfile
from collections.abc import Callable
from enum import IntEnum
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel

from custody_app.domain.errors import LedgerError
from custody_app.domain.models import REASON_CODES
from custody_app.domain.resources import demo_batch_paths
from custody_app.domain.timeutil import ManualClock
from custody_app.erasure.certificate import ErasureCertificate, ForgetResult, SubjectForgetResult, SweepResult
from custody_app.interfaces.batch import run_batch
from custody_app.interfaces.cli import evidence as cli_evidence
from custody_app.keys.crypto import public_fingerprint
from custody_app.keys.keyring import (
    KEYSTORE_ENV,
    MASTER_ENV,
    master_path_for,
    public_key_path_for,
    read_public_key,
)
from custody_app.ledger.facade import Ledger

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
    parser.add_argument("--keystore", help=f"key store (default: ${KEYSTORE_ENV} or LEDGER.keys)")


def _main_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="custody-app",
        description="Governed memory for AI agents. Subcommands: "
        + ", ".join((*SUBCOMMANDS, *_OWN_PARSERS))
        + " (custody-app SUBCOMMAND --help).",
    )
    p.add_argument("ledger_path", nargs="?", metavar="LEDGER", help="ledger file")
    p.add_argument("--batch", metavar="FILE", help="run JSON Lines ops from FILE ('-' for stdin)")
    p.add_argument("--demo", action="store_true",
                   help="replay the sample support-agent ledger into a fresh file and open the "
                   "terminal app on it (with --no-tui: print the replay's JSON results instead)")
    p.add_argument("--no-tui", action="store_true",
                   help="with --demo: build the demo ledger only, printing one JSON result per op")
    p.add_argument("--reviewer", metavar="KIND:ID",
                   help="who reviews, holds and erases in the terminal app (default: "
                   "$CUSTODY_REVIEWER, the config file's reviewer, else user:LOGIN)")
    p.add_argument("--manual-clock", action="store_true",
                   help="allow {\"op\": \"clock\", \"set\": ISO} to set transaction time")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failed op")
    _common(p)
    return p


def _sub_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="custody-app")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, helptext: str, *positional: str) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=helptext, description=helptext)
        for arg in positional:
            s.add_argument(arg.lower(), metavar=arg)
        _common(s)
        return s

    def who(s: argparse.ArgumentParser, reason: str) -> None:
        s.add_argument("--actor", required=True, help="who does this, as kind:id")
        if reason == "code":
            s.add_argument("--reason", required=True, choices=REASON_CODES, help="reason code")
        else:
            s.add_argument("--reason", required=True, help="why, in words (at most 500 chars)")

    add("init", "create a ledger with its key store, master key, forget key and signing key")
    s = add("verify", "walk the hash chain and check signed checkpoints")
    s.add_argument("--key", metavar="PUB", help="public key PEM to check checkpoints against")
    s.add_argument("--export", metavar="FILE", help="check an export offline instead (no ledger)")
    add("rebuild", "recompute the projection and report differences").add_argument(
        "--repair", action="store_true", help="replace a differing projection")
    add("why", "why a fact is believed", "FACT")
    add("history", "a fact's events", "FACT")
    for name, target, helptext in (
            ("forget", "FACT", "erase a fact's value and everything derived from it"),
            ("forget-subject", "SUBJECT", "erase a data principal: its facts, what derives from "
             "them, and its data key")):
        s = add(name, helptext, target)
        who(s, "code")
        s.add_argument("--json", action="store_true", help="print the certificate as JSON")
    who(add("hold", "place a legal hold on a fact", "FACT"), "text")
    who(add("release", "release a legal hold", "FACT"), "text")
    s = add("sweep", "expire what the retention windows (or --before) allow; exit 1 when "
            "something due could not be erased")
    s.add_argument("--before", metavar="ISO", help="cutoff instead of the policy's windows")
    s.add_argument("--space", help="only this space")
    s.add_argument("--dry-run", action="store_true", help="show what would expire; write nothing")
    s.add_argument("--actor", default="system:retention")
    s.add_argument("--reason", default="retention", choices=REASON_CODES)
    s.add_argument("--json", action="store_true")
    add("checkpoint", "sign the chain head with the ledger key").add_argument(
        "--actor", default="system:custody")
    s = add("recall", "facts believed now that match a query (hybrid lexical + vector)", "QUERY")
    s.add_argument("-k", type=int, default=10, help="how many results (default 10)")
    s.add_argument("--space")
    s.add_argument("--subject")
    s.add_argument("--session", help="record a served event for this session")
    s.add_argument("--include-claimed", action="store_true", help="include quarantined facts")
    s.add_argument("--strategy", choices=("hybrid", "lexical", "vector"), default="hybrid")
    s.add_argument("--json", action="store_true")
    cli_evidence.add_parsers(add)
    return p


SUBCOMMANDS = ("init", "verify", "rebuild", "why", "history", "forget", "forget-subject", "hold",
               "release", "sweep", "checkpoint", "recall", *cli_evidence.NAMES)
READ_ONLY = ("verify", "why", "history", *cli_evidence.READ_ONLY)


def _ledger_path(args: argparse.Namespace) -> str:
    return (getattr(args, "ledger", None) or getattr(args, "ledger_path", None)
            or os.environ.get(LEDGER_ENV) or DEFAULT_LEDGER)


def _open(args: argparse.Namespace, *, manual_clock: bool = False,
          readonly: bool = False) -> Ledger:
    policy = args.policy or os.environ.get(POLICY_ENV)
    return Ledger.open(_ledger_path(args), policy=policy, keystore=args.keystore,
                       reindex_progress=_reindex_progress,
                       clock=ManualClock() if manual_clock else None, readonly=readonly)


def _reindex_progress(done: int, total: int) -> None:
    """The embedder changed: the recall indexes are being rebuilt at open."""
    sys.stderr.write(f"\rcustody-app: re-embedding believed facts for the new embedder: "
                     f"{done:,}/{total:,}" + ("\n" if done == total else ""))
    sys.stderr.flush()


def _fail(exc: LedgerError, code: Exit) -> int:
    sys.stderr.write(f"custody-app: {exc.message} ({exc.code})\n")
    return int(code)


def _print(obj: object) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def _subcommand(argv: list[str]) -> int:
    args = _sub_parser().parse_args(argv)
    if (code := cli_evidence.offline(args)) is not None:
        return code
    try:
        ledger = _open(args, readonly=args.command in READ_ONLY)
    except LedgerError as exc:
        return _fail(exc, Exit.UNOPENABLE)
    with ledger:
        try:
            return _COMMANDS[args.command](ledger, args)
        except LedgerError as exc:
            return _fail(exc, Exit.OP_FAILED)


def _init(ledger: Ledger, args: argparse.Namespace) -> int:
    assert ledger.keys is not None
    pem = ledger.keys.public_pem()
    _ = ledger.keys.forget_key
    pub = public_key_path_for(ledger.db.path)
    pub.write_text(pem)
    files = [ledger.db.path, ledger.keys.path, str(master_path_for(Path(ledger.keys.path)))]
    for path in files:
        if os.path.exists(path):
            os.chmod(path, 0o600)
    _print({"ledger": ledger.db.path, "keystore": ledger.keys.path,
            "master_key": files[2] if not os.environ.get(MASTER_ENV) else f"${MASTER_ENV}",
            "public_key": str(pub), "key_fingerprint": public_fingerprint(pem),
            "advice": "keep the key store and master key out of the backups that hold the "
                      "ledger, or crypto-shredding cannot protect those backups"})
    return int(Exit.OK)


def _verify(ledger: Ledger, args: argparse.Namespace) -> int:
    pem = read_public_key(args.key) if args.key else None
    report = ledger.verify(public_key=pem)
    _print(report.model_dump(mode="json"))
    return int(Exit.OK if report.valid else Exit.OP_FAILED)


def _rebuild(ledger: Ledger, args: argparse.Namespace) -> int:
    rebuilt = ledger.rebuild(repair=args.repair)
    _print(rebuilt.model_dump(mode="json"))
    return int(Exit.OK if not rebuilt.differences or rebuilt.repaired else Exit.OP_FAILED)


def _show(result: BaseModel) -> int:
    _print(result.model_dump(mode="json"))
    return int(Exit.OK)


def _erasure(args: argparse.Namespace, result: ForgetResult | SubjectForgetResult | SweepResult,
             certificate: ErasureCertificate | None, extra_failure: bool = False) -> int:
    if args.json:
        _print(result.model_dump(mode="json"))
    elif certificate is not None:
        sys.stdout.write(certificate.render() + "\n")
    complete = certificate is None or certificate.complete
    return int(Exit.OK if complete and not extra_failure else Exit.OP_FAILED)


def _sweep(ledger: Ledger, args: argparse.Namespace) -> int:
    result = ledger.sweep(before=args.before, space=args.space, dry_run=args.dry_run,
                          actor=args.actor, reason=args.reason)
    if not args.json:
        verb = "would expire" if result.dry_run else "expired"
        sys.stdout.write(f"cutoffs: {json.dumps(result.cutoffs)}\n{verb} {len(result.expired)}"
                         f" fact(s): {' '.join(result.expired)}\n")
        if result.held:
            sys.stdout.write(f"skipped, on legal hold: {' '.join(result.held)}\n")
        if result.note:
            sys.stdout.write(result.note + "\n")
    return _erasure(args, result, result.certificate, extra_failure=bool(result.held))


def _recall(ledger: Ledger, args: argparse.Namespace) -> int:
    result = ledger.recall(args.query, k=args.k, space=args.space, subject=args.subject,
                           session=args.session, include_claimed=args.include_claimed,
                           strategy=args.strategy)
    if args.json:
        return _show(result)
    sys.stdout.write(f"{result.strategy}: {result.note}\n")
    for n, hit in enumerate(result.results, start=1):
        f = hit.fact
        value = json.dumps(f.value, ensure_ascii=False)
        sys.stdout.write(f"{n:>3}. {f.subject} {f.predicate} = {value[:80]}  [{f.status}, "
                         f"{hit.salience_class}, score {hit.score:.4f}] {f.fact_id}\n")
    if not result.results:
        sys.stdout.write("no believed fact matches\n")
    return int(Exit.OK)


_COMMANDS: dict[str, Callable[[Ledger, argparse.Namespace], int]] = {
    "init": _init,
    "verify": _verify,
    "rebuild": _rebuild,
    "why": lambda led, a: _show(led.why(a.fact)),
    "history": lambda led, a: _show(led.history(a.fact)),
    "forget": lambda led, a: _erasure(a, r := led.forget(a.fact, actor=a.actor, reason=a.reason),
                                      r.certificate),
    "forget-subject": lambda led, a: _erasure(
        a, r := led.forget_subject(a.subject, actor=a.actor, reason=a.reason), r.certificate),
    "hold": lambda led, a: _show(led.hold(a.fact, actor=a.actor, reason=a.reason)),
    "release": lambda led, a: _show(led.release(a.fact, actor=a.actor, reason=a.reason)),
    "sweep": _sweep,
    "checkpoint": lambda led, a: _show(led.checkpoint(actor=a.actor)),
    "recall": _recall,
    **cli_evidence.COMMANDS,
}


def _run_batch(args: argparse.Namespace, source: str, manual_clock: bool,
               out: TextIO | None = None) -> int:
    # The batch file first: a usage error must not create a ledger file as a side effect.
    try:
        # surrogateescape: a line of invalid UTF-8 becomes that line's bad_json, not a crash.
        stream = (io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape")
                  if source == "-" else open(source, encoding="utf-8",  # noqa: SIM115
                                             errors="surrogateescape"))
    except OSError as exc:
        sys.stderr.write(f"custody-app: cannot read batch file {source}: {exc.strerror}\n")
        return int(Exit.USAGE)
    try:
        ledger = _open(args, manual_clock=manual_clock)
    except LedgerError as exc:
        if source != "-":
            stream.close()
        return _fail(exc, Exit.UNOPENABLE)
    with ledger, stream:
        outcome = run_batch(ledger, stream, out or sys.stdout, fail_fast=args.fail_fast)
    return int(Exit.OK if outcome.failed == 0 else Exit.OP_FAILED)


def _demo(args: argparse.Namespace) -> int:
    """Replay the sample into a fresh ledger (./custody-demo.db unless --ledger), then open
    the terminal app on it (or, with --no-tui, print the replay's results)."""
    target = Path(args.ledger or "custody-demo.db")
    for suffix in ("", "-wal", "-shm", ".keys", ".keys.master", ".pub"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    args.ledger = str(target)
    with tempfile.TemporaryDirectory() as tmp:
        sample = Path(tmp) / "sample.jsonl"
        sample.write_text("".join(part.read_text(encoding="utf-8") for part in demo_batch_paths()),
                          encoding="utf-8")
        if not args.no_tui:
            with open(os.devnull, "w", encoding="utf-8") as sink:
                code = _run_batch(args, str(sample), manual_clock=True, out=sink)
            return _tui(args) if code == Exit.OK else code
        code = _run_batch(args, str(sample), manual_clock=True)
    sys.stderr.write(f"custody-app: demo ledger written to {target}; try "
                     f"`custody-app verify --ledger {target} --key {target}.pub` or "
                     f"`custody-app recall \"refund\" --ledger {target}`\n")
    return code


# Subcommands with parsers of their own, imported only when run (so `serve` and `--batch` never
# load the TUI, and a plain subcommand loads none of them).
_OWN_PARSERS: dict[str, tuple[str, str]] = {
    "eval": ("custody_app.evaluation.cli", "eval_main"),
    "doctor": ("custody_app.doctor.cli", "doctor_main"),
    "serve": ("custody_app.interfaces.mcp.cli", "serve_main"),
    "writer-key": ("custody_app.interfaces.mcp.cli", "writer_key_main"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _OWN_PARSERS:
        module, name = _OWN_PARSERS[argv[0]]
        run: Callable[[list[str]], int] = getattr(importlib.import_module(module), name)
        return run(argv[1:])
    if argv and argv[0] == "tui":
        argv = argv[1:]  # `custody-app tui LEDGER` is `custody-app LEDGER`
    elif argv and argv[0] in SUBCOMMANDS:
        return _subcommand(argv)
    args = _main_parser().parse_args(argv)
    if args.demo:
        return _demo(args)
    if args.batch:
        return _run_batch(args, args.batch, args.manual_clock)
    return _tui(args)


def _tui(args: argparse.Namespace) -> int:
    """The terminal app on the ledger; textual is imported on this interactive path only."""
    from custody_app.interfaces.tui.app import make_app

    try:
        app = make_app(_ledger_path(args), args.policy or os.environ.get(POLICY_ENV),
                       reviewer=args.reviewer, keystore=args.keystore)
    except LedgerError as exc:
        return _fail(exc, Exit.UNOPENABLE)
    app.run()
    return int(Exit.OK)


if __name__ == "__main__":
    sys.exit(main())
