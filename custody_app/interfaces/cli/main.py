"""The one console script, `custody-app`: the terminal app, --demo, --batch, and the dispatch
to the subcommands (each group in its own module; a few with parsers of their own)."""

from __future__ import annotations

import argparse
import errno
import importlib
import io
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from custody_app.domain.errors import Exit, LedgerError, Parser
from custody_app.domain.escaping import escape_text
from custody_app.domain.policy import load_policy
from custody_app.domain.resources import demo_batch_paths, demo_policy_path, policy_path
from custody_app.files.output import require_regular
from custody_app.interfaces.batch import bind_identity, run_batch
from custody_app.interfaces.cli import corrections, erasure, evidence, reading, review
from custody_app.interfaces.cli import ledger as ledger_commands
from custody_app.interfaces.cli.common import (
    add_common,
    chosen_ledger,
    fail,
    open_ledger,
    say_adoption,
    say_keystore_missing,
    say_not_adopted,
)
from custody_app.interfaces.cli.naming import (
    CREATES,
    confirm_create,
    missing_ledger,
    refuse_missing,
    unknown_subcommand,
)
from custody_app.interfaces.tui.access import resolve_reviewer
from custody_app.keys.demo_receipts import bind_demo_receipts
from custody_app.keys.writer_keys import read_key
from custody_app.ledger.facade import Ledger
from custody_app.recall import threads
from store.address import address_of


def _main_parser() -> argparse.ArgumentParser:
    p = Parser(
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
    p.add_argument("--agent", metavar="KIND:ID",
                   help="with --batch: run as this agent only (agent:NAME or llm:NAME): every "
                   "op must name it, and no operator op (forget, sweep, hold...) runs")
    p.add_argument("--writer-key", metavar="FILE",
                   help="with --batch: the writer key (custody-app writer-key) the policy "
                   "registers for --agent (or, without --agent, for the actor it names): "
                   "every event written as it is signed")
    p.add_argument("--create", action="store_true",
                   help="with --batch: create the ledger if it does not exist (otherwise a "
                   "missing ledger is refused, exit 3)")
    p.add_argument("--version", action="version", version=f"custody-app {_version()}")
    add_common(p)
    return p


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("custody-app")
    except PackageNotFoundError:
        return "0"


def _sub_parser() -> argparse.ArgumentParser:
    p = Parser(prog="custody-app")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, helptext: str, *positional: str) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=helptext, description=helptext)
        for arg in positional:
            s.add_argument(arg.lower(), metavar=arg)
        add_common(s)
        return s

    for group in _GROUPS:
        group.add_parsers(add)
    # One grammar: every subcommand takes --json (JSON for machines; text for people without).
    for s in sub.choices.values():
        try:
            s.add_argument("--json", action="store_true", help="print the result as JSON")
        except argparse.ArgumentError:
            pass  # the subcommand has its own --json already
    return p


# The subcommands by what they do; each module has add_parsers(), NAMES and COMMANDS.
_GROUPS = (ledger_commands, reading, review, erasure, evidence, corrections)
_COMMANDS: dict[str, Callable[[Ledger, argparse.Namespace], int]] = {
    name: run for group in _GROUPS for name, run in group.COMMANDS.items()}
SUBCOMMANDS = tuple(_COMMANDS)
READ_ONLY = (*ledger_commands.READ_ONLY, *reading.READ_ONLY, *review.READ_ONLY,
             *evidence.READ_ONLY, *erasure.READ_ONLY)


def _subcommand(argv: list[str]) -> int:
    args = _sub_parser().parse_args(argv)
    if (code := evidence.offline(args)) is not None:
        return code
    if refused := refuse_missing(chosen_ledger(args), create=args.command in CREATES):
        return fail(refused, Exit.UNOPENABLE)
    if args.command == "init" and (refused := ledger_commands.init_refusal(chosen_ledger(args))):
        return fail(refused, Exit.OP_FAILED)  # before any file is made
    try:
        ledger = open_ledger(args, readonly=args.command in READ_ONLY)
    except LedgerError as exc:
        return fail(exc, Exit.UNOPENABLE)
    with ledger:
        try:
            say_keystore_missing(ledger)
            if args.policy and args.command in READ_ONLY:
                say_not_adopted(ledger)
            return _COMMANDS[args.command](ledger, args)
        except LedgerError as exc:
            return fail(exc, Exit.OP_FAILED)
        except Exception as exc:  # a damaged file is named (ledger_damaged), never a traceback
            if (damaged := ledger.damaged(exc)) is None:
                raise
            return fail(damaged, Exit.OP_FAILED)
        finally:
            say_adoption(ledger)


# A batch file that is missing, unreadable, or not a regular file (a directory, FIFO, device).
BATCH_UNREADABLE = "batch_unreadable"


def _run_batch(args: argparse.Namespace, source: str, manual_clock: bool,
               out: TextIO | None = None, *, create: bool = False) -> int:
    # The batch file first: a usage error must not create a ledger file as a side effect.
    try:
        if source != "-":
            require_regular(source, "batch file", BATCH_UNREADABLE, may_be_missing=False)
    except LedgerError as exc:
        return fail(exc, Exit.USAGE)
    # A mistyped --ledger must not hand the ops an empty ledger: only --create (or --demo) may.
    if refused := refuse_missing(chosen_ledger(args), create=create or args.create):
        return fail(refused, Exit.UNOPENABLE)
    try:
        # surrogateescape: a line of invalid UTF-8 becomes that line's bad_json, not a crash.
        stream = (io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape")
                  if source == "-" else open(source, encoding="utf-8",  # noqa: SIM115
                                             errors="surrogateescape"))
    except OSError as exc:
        return fail(LedgerError(BATCH_UNREADABLE, f"cannot read batch file {source}: "
                                f"{exc.strerror}"), Exit.USAGE)
    try:
        key = read_key(args.writer_key) if args.writer_key else None
        # No embedding worker: a bulk ingest does not load the model (~140 MB, 257 MB peak for
        # a 2,000-fact --batch under the default policy); its facts are found lexically until
        # the next writable open (the terminal app, the MCP server, the API) embeds them.
        ledger = open_ledger(args, manual_clock=manual_clock, embed_backlog=False)
        try:
            bind_identity(ledger, args.agent, key)
        except BaseException:
            ledger.close()
            raise
    except LedgerError as exc:
        if source != "-":
            stream.close()
        return fail(exc, Exit.UNOPENABLE)
    with ledger, stream:
        outcome = run_batch(ledger, stream, out or sys.stdout, fail_fast=args.fail_fast,
                            held_open=source == "-")
        # A re-clustering the run made due (it ran beside the writes) is let finish.
        ledger.index.maintenance.join()
        say_adoption(ledger)
        waiting = ledger.index.unembedded()
    # --batch starts no embedding worker (no model loaded): its one line says what waits.
    waits = (f"; {waiting:,} fact(s) wait for their vector, found by their words meanwhile "
             "(`custody-app embed` makes them now)" if waiting else "")
    sys.stderr.write(outcome.summary() + waits + "\n")
    return int(Exit.OK if outcome.failed == 0 else Exit.OP_FAILED)


def _demo(args: argparse.Namespace) -> int:
    """Replay the sample into a fresh ledger (./custody-demo.db unless --ledger), then open
    the terminal app on it (or, with --no-tui, print the replay's results)."""
    target = args.ledger or "custody-demo.db"
    address = address_of(target)
    own = address.own_file()  # a ledger on a server has no file of its own to replace
    files = [Path(f"{own}{suffix}") for suffix in ("", "-wal", "-shm", ".keys", ".keys.master",
                                                   ".pub")] if own is not None else []
    # Only the demo's own file is replaced: a --ledger that exists may be someone's memory,
    # and deleting its key store would destroy every value in it for good.
    if args.ledger:
        refused = refuse_missing(target)
        if refused is not None and refused.code != "ledger_missing":
            return fail(refused, Exit.UNOPENABLE)
        if refused is None or any(os.path.lexists(f) for f in files):
            return fail(LedgerError("output_exists", f"refusing to replace {address.display} "
                                    "with the demo ledger: it exists; name a new path with "
                                    "--ledger", path=address.display), Exit.USAGE)
    try:
        # Checked before any is deleted: a directory (or FIFO) under one of the names must not
        # leave the others gone and end in a traceback.
        for file in files:
            if not os.path.islink(file):
                require_regular(file, "to replace the demo file", "output_protected")
    except LedgerError as exc:
        return fail(exc, Exit.USAGE)
    for file in files:
        file.unlink(missing_ok=True)
    target = address.display if own is None else target
    args.ledger = args.ledger or target
    # The sample's receipts are signed by demo issuers only the demo policy registers, for
    # this very ledger: created first, its id is the audience each receipt is signed for.
    args.policy = args.policy or str(demo_policy_path())
    try:
        with open_ledger(args, manual_clock=True) as made:
            ledger_id = made.ledger_id
    except LedgerError as exc:
        return fail(exc, Exit.UNOPENABLE)
    assert ledger_id is not None  # a ledger made by this version has one in its meta
    with tempfile.TemporaryDirectory() as tmp:
        sample = Path(tmp) / "sample.jsonl"
        text = "".join(part.read_text(encoding="utf-8") for part in demo_batch_paths())
        sample.write_text(bind_demo_receipts(text, ledger_id), encoding="utf-8")
        if not args.no_tui:
            with open(os.devnull, "w", encoding="utf-8") as sink:
                code = _run_batch(args, str(sample), manual_clock=True, out=sink, create=True)
            return _tui(args) if code == Exit.OK else code
        code = _run_batch(args, str(sample), manual_clock=True, create=True)
    sys.stderr.write(escape_text(f"custody-app: demo ledger written to {target}; try "
                                 f"`custody-app verify --ledger {target} --key {address.sibling('.pub')}` or "
                                 f"`custody-app recall \"refund\" --ledger {target}`") + "\n")
    return code


# Subcommands with parsers of their own, imported only when run (so `serve` and `--batch` never
# load the TUI, and a plain subcommand loads none of them).
_OWN_PARSERS: dict[str, tuple[str, str]] = {
    "eval": ("custody_app.evaluation.cli", "eval_main"),
    "doctor": ("custody_app.doctor.cli", "doctor_main"),
    "serve": ("custody_app.interfaces.cli.serve", "serve_main"),
    "writer-key": ("custody_app.interfaces.cli.serve", "writer_key_main"),
    "receipt-key": ("custody_app.interfaces.cli.receipts", "receipt_key_main"),
    "receipt": ("custody_app.interfaces.cli.receipts", "receipt_main"),
    "copy": ("custody_app.interfaces.cli.copy", "copy_main"),
}


def main(argv: list[str] | None = None) -> int:
    """The console script; a closed or full stdout ends it quietly with Exit.OUTPUT_CLOSED."""
    if not _standard_streams():
        return int(Exit.OUTPUT_CLOSED)
    threads.limit_process()  # the process is ours: numpy's BLAS on one thread, for good
    try:
        try:
            code = _dispatch(list(sys.argv[1:] if argv is None else argv))
        except SystemExit:  # argparse's --help and usage errors print, then exit
            sys.stdout.flush()
            raise
        except KeyboardInterrupt:
            # Every transaction under way rolled back as the exception passed through it.
            sys.stderr.write("custody-app: interrupted; what was committed stays committed, "
                             "the ops under way were rolled back\n")
            code = int(Exit.INTERRUPTED)
        sys.stdout.flush()
    except OSError as exc:
        if exc.errno not in (errno.EPIPE, errno.ENOSPC, errno.EIO):
            raise
        return _output_closed(exc)
    return code


def _standard_streams() -> bool:
    """Put /dev/null on any of fds 0-2 that is closed (`>&-`), so that no file opened later (an
    output, a key) takes its number and receives what was meant for the stream; False when
    stdout itself was closed: its output would be lost, so nothing is run."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
    for fd in closed:
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
    if 0 in closed:
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    if 2 in closed:
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8")
    if 1 in closed:
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
        sys.stderr.write("custody-app: stdout is closed; nothing was run\n")
        return False
    return True


def _output_closed(exc: OSError) -> int:
    # Python flushes stdout again at exit: point it at /dev/null so that flush cannot fail
    # and print "Exception ignored" after we decided to end quietly.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    if exc.errno != errno.EPIPE:  # a reader that stopped reading (`| head`) wants no note
        try:
            sys.stderr.write(f"custody-app: output full or failing ({exc.strerror}); stopped\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
    return int(Exit.OUTPUT_CLOSED)


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] in _OWN_PARSERS:
        module, name = _OWN_PARSERS[argv[0]]
        run: Callable[[list[str]], int] = getattr(importlib.import_module(module), name)
        return run(argv[1:])
    if argv and argv[0] == "tui":
        argv = argv[1:]  # `custody-app tui LEDGER` is `custody-app LEDGER`
    elif argv and argv[0] in SUBCOMMANDS:
        return _subcommand(argv)
    elif argv and (usage := unknown_subcommand(argv[0], (*SUBCOMMANDS, *_OWN_PARSERS, "tui"))):
        sys.stderr.write(f"custody-app: {usage}\n")
        return int(Exit.USAGE)
    args = _main_parser().parse_args(argv)
    if (args.agent or args.writer_key) and not args.batch:
        # One identity per process: only a batch takes one here (the MCP server: `serve`).
        sys.stderr.write("custody-app: --agent and --writer-key go with --batch (or `custody-app "
                         "serve`); the terminal app and --demo run as the operator\n")
        return int(Exit.USAGE)
    if args.demo:
        return _demo(args)
    if args.batch:
        return _run_batch(args, args.batch, args.manual_clock)
    return _tui(args)


def _tui(args: argparse.Namespace) -> int:
    """The terminal app on the ledger; textual is imported on this interactive path only. It
    needs a terminal (without one Textual would spin), and asks before creating a ledger."""
    path = chosen_ledger(args)
    try:
        load_policy(policy_path(args.policy))
        resolve_reviewer(args.reviewer)
    except LedgerError as exc:
        return fail(exc, Exit.UNOPENABLE)
    refused = refuse_missing(path)
    if refused is not None and refused.code != "ledger_missing":
        return fail(refused, Exit.UNOPENABLE)  # a server that cannot be reached, a dangling link
    missing = refused is not None
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        sys.stderr.write("custody-app: the terminal app needs a terminal (stdin and stdout are "
                         "not one here)" + (f" and there is no ledger at "
                                            f"{address_of(path).display}" if missing else "")
                         + "; scripts use a subcommand (custody-app --help) or --batch FILE\n")
        return int(Exit.USAGE)
    if missing and not confirm_create(path):
        return fail(missing_ledger(path), Exit.UNOPENABLE)
    from custody_app.interfaces.tui.app import make_app

    try:
        app = make_app(path, policy_path(args.policy), reviewer=args.reviewer,
                       keystore=args.keystore)
    except LedgerError as exc:
        return fail(exc, Exit.UNOPENABLE)
    app.run()
    return int(Exit.OK)


if __name__ == "__main__":
    sys.exit(main())
