"""Subcommands on the ledger itself: init, verify, rebuild, hold, release, checkpoint, recall
and embed."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from pydantic import BaseModel

from custody_app.domain.errors import Exit, LedgerError
from custody_app.domain.escaping import escape_identifier, escape_text
from custody_app.interfaces.cli.common import (
    AddParser,
    add_actor,
    emit,
    operator,
    print_text,
    show,
)
from custody_app.keys.crypto import public_fingerprint
from custody_app.keys.keyring import MASTER_ENV, public_key_refusal, read_public_key, write_public_key
from custody_app.ledger.facade import Ledger
from custody_app.recall.search import unembedded_note
from store import ledger_holds_events

NAMES = ("init", "verify", "rebuild", "hold", "release", "checkpoint", "recall", "embed")
READ_ONLY = ("verify",)


def add_parsers(add: AddParser) -> None:
    add("init", "create a ledger with its key store, master key, forget key and signing key")
    s = add("verify", "walk the hash chain and check signed checkpoints")
    s.add_argument("--key", metavar="PUB", help="public key PEM to check checkpoints against")
    s.add_argument("--export", metavar="FILE", help="check an export offline instead (no ledger)")
    s.add_argument("--deep", action="store_true",
                   help="also compare the recall indexes' content with the facts indexed afresh")
    s = add("rebuild", "recompute the projection and report differences")
    s.add_argument("--repair", action="store_true", help="replace a differing projection")
    s.add_argument("--deep", action="store_true", help="compare the recall indexes' content too")
    for name, helptext in (("hold", "place a legal hold on a fact"),
                           ("release", "release a legal hold")):
        s = add(name, helptext, "FACT")
        add_actor(s)
        s.add_argument("--reason", required=True, help="why, in words (at most 500 chars)")
    add_actor(add("checkpoint", "sign the chain head with the ledger key"))
    s = add("recall", "facts believed now that match a query (hybrid lexical + vector)", "QUERY")
    s.add_argument("-k", type=int, default=10, help="how many results (default 10)")
    s.add_argument("--space")
    s.add_argument("--subject")
    s.add_argument("--session", help="record a served event for this session")
    s.add_argument("--include-claimed", action="store_true", help="include quarantined facts")
    s.add_argument("--strategy", choices=("hybrid", "lexical", "vector"), default="hybrid")
    s.add_argument("--verbose", "-v", action="store_true",
                   help="also say how the search ran (after the results)")
    s.add_argument("--json", action="store_true")
    add("embed", "make the vectors still waiting for the background embedding worker (after a "
        "--batch, which leaves them), then exit")


def init_refusal(path: str) -> LedgerError | None:
    """Why `init` may not make a ledger at `path`, asked before any file is made: its public
    key file's path is taken (`key_exists`). An existing ledger's is checked once it is open
    (`_init`), against its own key."""
    return None if ledger_holds_events(path) else public_key_refusal(path)


def _init(ledger: Ledger, args: argparse.Namespace) -> int:
    assert ledger.keys is not None
    pem = ledger.keys.public_pem()
    # Before anything is recorded: a public key file that is not this key is never replaced.
    if (refused := public_key_refusal(ledger.db.path, pem)) is not None:
        raise refused
    # The ledger records the policy it was initialised with: later commands use it (DESIGN 14).
    ledger.adopt_policy()
    _ = ledger.keys.forget_key
    pub = write_public_key(ledger.db.path, pem)
    files = [ledger.db.path, ledger.keys.path, str(ledger.keys.master_file)]
    for path in files:
        if os.path.exists(path):
            os.chmod(path, 0o600)
    emit({"ledger": ledger.db.path, "ledger_id": ledger.ledger_id,
          "policy": ledger.policy.hash, "keystore": ledger.keys.path,
                "master_key": files[2] if not os.environ.get(MASTER_ENV) else f"${MASTER_ENV}",
                "public_key": str(pub), "key_fingerprint": public_fingerprint(pem),
                "advice": "keep the key store and master key out of the backups that hold the "
                          "ledger, or crypto-shredding cannot protect those backups"}, args)
    return int(Exit.OK)


def _verify(ledger: Ledger, args: argparse.Namespace) -> int:
    pem = read_public_key(args.key) if args.key else None
    report = ledger.verify(public_key=pem, deep=args.deep)
    emit(report, args)
    return int(Exit.OK if report.valid else Exit.OP_FAILED)


def _rebuild(ledger: Ledger, args: argparse.Namespace) -> int:
    rebuilt = ledger.rebuild(repair=args.repair, deep=args.deep)
    emit(rebuilt, args)
    return int(Exit.OK if not rebuilt.differences or rebuilt.repaired else Exit.OP_FAILED)


def _recall(ledger: Ledger, args: argparse.Namespace) -> int:
    result = ledger.recall(args.query, k=args.k, space=args.space, subject=args.subject,
                           session=args.session, include_claimed=args.include_claimed,
                           strategy=args.strategy)
    if args.json:
        return show(result)
    for n, hit in enumerate(result.results, start=1):
        f = hit.fact
        value = escape_text(json.dumps(f.value, ensure_ascii=False)[:80])
        print_text(f"{n:>3}. {escape_identifier(f.subject)} {escape_identifier(f.predicate)} = {value}  "
                   f"[{f.status}, {hit.salience_class}, score {hit.score:.4f}] {f.fact_id}")
    if not result.results:
        print_text("no believed fact matches")
    if result.unembedded:
        print_text(unembedded_note(result.unembedded))
    if args.verbose:  # how the search ran, after what it found
        print_text(f"{result.strategy}: {escape_text(result.note)}")
    return int(Exit.OK)


def _embed(ledger: Ledger, args: argparse.Namespace) -> int:
    emit(ledger.embed_waiting(_embed_progress), args)
    return int(Exit.OK)


def _embed_progress(done: int, total: int) -> None:
    sys.stderr.write(f"\rcustody-app: embedding believed facts: {done:,}/{total:,}"
                     + ("\n" if done >= total else ""))
    sys.stderr.flush()


def _emitted(result: BaseModel, args: argparse.Namespace) -> int:
    emit(result, args)
    return int(Exit.OK)


COMMANDS: dict[str, Callable[[Ledger, argparse.Namespace], int]] = {
    "init": _init,
    "verify": _verify,
    "rebuild": _rebuild,
    "hold": lambda led, a: _emitted(led.hold(a.fact, actor=operator(a), reason=a.reason), a),
    "release": lambda led, a: _emitted(led.release(a.fact, actor=operator(a), reason=a.reason),
                                       a),
    "checkpoint": lambda led, a: _emitted(led.checkpoint(actor=operator(a)), a),
    "recall": _recall,
    "embed": _embed,
}
