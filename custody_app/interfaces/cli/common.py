"""What every subcommand shares: the --ledger, --policy and --keystore options, opening the
ledger they name, and printing results (stdout carries data only; diagnostics go to stderr)."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Protocol

from pydantic import BaseModel

from custody_app.domain.errors import Exit, LedgerError
from custody_app.domain.escaping import escape_text, escaped, json_text
from custody_app.domain.resources import DEFAULT_LEDGER, LEDGER_ENV, POLICY_ENV, ledger_path, policy_path
from custody_app.domain.sealed_text import SEALED_TEXT
from custody_app.domain.timeutil import ManualClock
from custody_app.interfaces.cli.plain_text import render
from custody_app.interfaces.tui.access import REVIEWER_ENV, resolve_reviewer
from custody_app.keys.keyring import KEYSTORE_ENV
from custody_app.ledger.facade import Ledger
from custody_app.ledger.overview import MAX_PAGE
from store.address import address_of


class AddParser(Protocol):
    """Adds one subcommand's parser, with its positional arguments and the common options."""

    def __call__(self, name: str, helptext: str, *positional: str) -> argparse.ArgumentParser: ...


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ledger", help=f"ledger file (default: ${LEDGER_ENV} or ./{DEFAULT_LEDGER})")
    parser.add_argument("--policy", help=f"policy TOML (default: ${POLICY_ENV} or the shipped default)")
    parser.add_argument("--keystore", help=f"key store (default: ${KEYSTORE_ENV} or LEDGER.keys)")


def add_actor(parser: argparse.ArgumentParser) -> None:
    """The one --actor rule of every write (DESIGN 14: the CLI is an operator surface)."""
    parser.add_argument("--actor", metavar="KIND:ID",
                        help=f"who does this (default: the operator: ${REVIEWER_ENV}, the "
                        "config file's reviewer, else user:LOGIN)")


def operator(args: argparse.Namespace) -> str:
    """The write's actor: --actor, else the operator at the keyboard."""
    return resolve_reviewer(getattr(args, "actor", None))


def add_paging(parser: argparse.ArgumentParser, default: int, what: str) -> None:
    """The one paging rule of every list: --limit N, and --after CURSOR from the page before."""
    parser.add_argument("--limit", type=int, default=default,
                        help=f"at most this many {what} (default {default})")
    parser.add_argument("--after", metavar="CURSOR",
                        help="the page after this cursor (printed as `next page:` by the page "
                        "before, `next_after` in --json)")


_CURSOR = re.compile(r"[0-9]{1,18}")


def cursor(ledger: Ledger, given: str | None) -> int:
    """The position --after names (an event seq), refused when it is not one a page printed:
    not a number, or past the ledger's last event."""
    if given is None:
        return 0
    if not _CURSOR.fullmatch(given):
        raise LedgerError("bad_request", escape_text(f"--after {given[:40]!r} is not a cursor: "
                          "give the number a previous page printed after `next page:`"),
                          field="after")
    head = ledger.head_seq()
    if int(given) > head:
        raise LedgerError("bad_request", f"--after {given} is not a cursor of this ledger: its "
                          f"last event is seq {head}; start without --after", field="after")
    return int(given)


def limit(given: int, most: int = MAX_PAGE) -> int:
    if not 1 <= given <= most:
        raise LedgerError("bad_request", f"--limit must be between 1 and {most}; page on "
                          "with --after", field="limit")
    return given


def chosen_ledger(args: argparse.Namespace) -> str:
    return ledger_path(getattr(args, "ledger", None) or getattr(args, "ledger_path", None))


def shown_ledger(args: argparse.Namespace) -> str:
    """The ledger's address as printed (a server's without its password)."""
    return address_of(chosen_ledger(args)).display


def open_ledger(args: argparse.Namespace, *, manual_clock: bool = False,
                readonly: bool = False, embed_backlog: bool = True) -> Ledger:
    path = chosen_ledger(args)
    # A read-only command writes nothing to any file: with no WAL beside the ledger (so no
    # other process has it open), an immutable snapshot creates no -wal or -shm either.
    # SQLite names the -wal after the file a symbolic link points to.
    wal = address_of(path).sibling("-wal")
    immutable = readonly and (not wal.exists() or wal.stat().st_size == 0)
    ledger = Ledger.open(path, policy=policy_path(args.policy),
                         keystore=args.keystore, reindex_progress=_reindex_progress,
                         clock=ManualClock() if manual_clock else None, readonly=readonly,
                         immutable=immutable, embed_backlog=embed_backlog)
    if not readonly and ledger.policy_refusal is not None:
        # A write command under a policy the ledger cannot vouch for: refused at the door
        # (exit 3) rather than failing op by op; a read-only command reads on.
        ledger.close()
        raise ledger.policy_refusal
    return ledger


def say_adoption(ledger: Ledger) -> None:
    """A write under a --policy other than the one the ledger recorded adopted it (a `policy`
    event): say so on stderr, never silently (DESIGN 14, policy in force)."""
    if ledger.adopted_policy is None:
        return
    seq, previous = ledger.adopted_policy
    source = f" from {ledger.policy.path}" if ledger.policy.path else ""
    sys.stderr.write(escape_text(
        f"custody-app: adopted policy {ledger.policy.hash[:12]}{source} in place of "
        f"{previous[:12]} (policy event seq {seq}); later commands without --policy use it")
        + "\n")


def say_will_adopt(ledger: Ledger, prog: str) -> None:
    """A long-lived writer (`serve`) given a --policy other than the one the ledger recorded
    adopts it at its first write: say so when it starts, naming both hashes (DESIGN 14)."""
    with ledger.db.read():
        recorded = ledger.db.events.last_policy_hash()
    if recorded is not None and recorded != ledger.policy.hash:
        source = f" from {ledger.policy.path}" if ledger.policy.path else ""
        sys.stderr.write(escape_text(
            f"{prog}: policy {ledger.policy.hash[:12]}{source} is not the ledger's "
            f"{recorded[:12]}: the first write adopts it (a policy event), and later commands "
            "without --policy use it") + "\n")


def say_keystore_missing(ledger: Ledger) -> None:
    """A read without the ledger's key store: say so, naming the path, so no sealed value is
    taken for erased nor the values for checked."""
    if ledger.keystore_missing is None:
        return
    sys.stderr.write(escape_text(
        f"custody-app: the key store {ledger.keystore_missing} is missing: values and free "
        "text are held sealed and were not opened or checked (shown as "
        f"\"{SEALED_TEXT}\", never as erased); put the key store back there, or name it with "
        "--keystore PATH") + "\n")


def say_not_adopted(ledger: Ledger) -> None:
    """A read-only command given a --policy the ledger does not record reads under it but
    never adopts it: say so, so nobody believes it is now in force."""
    with ledger.db.read():
        recorded = ledger.db.events.last_policy_hash()
    if recorded is not None and recorded != ledger.policy.hash:
        sys.stderr.write(escape_text(
            f"custody-app: read under policy {ledger.policy.hash[:12]} from "
            f"{ledger.policy.path}, not adopted: this command only reads; the ledger's policy "
            f"stays {recorded[:12]} until a write command is given --policy") + "\n")


def _reindex_progress(done: int, total: int) -> None:
    """The embedder changed: the recall indexes are being rebuilt at open."""
    sys.stderr.write(f"\rcustody-app: re-embedding believed facts for the new embedder: "
                     f"{done:,}/{total:,}" + ("\n" if done == total else ""))
    sys.stderr.flush()


def fail(exc: LedgerError, code: Exit) -> int:
    hint = (f"; name the ledger with --ledger PATH (or ${LEDGER_ENV}; default ./{DEFAULT_LEDGER})"
            if exc.code == "ledger_unopenable" else "")
    sys.stderr.write(escape_text(f"custody-app: {exc.message}{hint} ({exc.code})") + "\n")
    return int(code)


def print_json(obj: object) -> None:
    sys.stdout.write(json_text(obj, indent=2) + "\n")


def print_text(text: str) -> None:
    """Human-readable output: the caller escaped the stored strings it interpolated (see
    `show_rendered`); this escapes whatever control character is left but the line breaks."""
    sys.stdout.write(escape_text(text, keep_newlines=True) + "\n")


def show_rendered(result: Any) -> None:
    """A read model's `render()`, computed on a copy whose stored strings are escaped, so a
    newline or escape sequence in a subject cannot forge or recolour a line."""
    print_text(escaped(result).render())


def show(result: BaseModel) -> int:
    print_json(result.model_dump(mode="json"))
    return int(Exit.OK)


def emit(result: BaseModel | dict[str, Any], args: argparse.Namespace) -> None:
    """A result as JSON with --json, else as text for people (DESIGN 11: one grammar)."""
    if getattr(args, "json", False):
        print_json(result.model_dump(mode="json") if isinstance(result, BaseModel) else result)
    else:
        print_text(render(str(getattr(args, "command", "")), result))
