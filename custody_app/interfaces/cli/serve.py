"""`custody-app serve` (the MCP server, stdio or loopback HTTP) and `custody-app writer-key`."""

from __future__ import annotations

import argparse
import json
import os
import sys

import anyio
from pydantic_core import PydanticCustomError

from custody_app.domain.errors import LedgerError, Parser
from custody_app.domain.escaping import escape_text
from custody_app.domain.models import check_actor
from custody_app.domain.resources import ledger_path, policy_path
from custody_app.interfaces.cli.common import add_common, say_will_adopt
from custody_app.interfaces.cli.naming import refuse_missing
from custody_app.interfaces.mcp.tools import MemoryTools
from custody_app.keys.writer_keys import new_key, read_key
from custody_app.ledger.facade import Ledger
from custody_app.ledger.identity import bind_agent

AGENT_ENV = "CUSTODY_AGENT"
TOKEN_ENV = "CUSTODY_MCP_TOKEN"
MIN_TOKEN = 16


def _serve_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="custody-app serve",
        description="Serve the ledger to an MCP client over stdio (or Streamable HTTP on "
        "127.0.0.1 with --http). Every connection is one session: its reads are recorded as "
        "served and its writes carry the session. Writes are claimed (quarantined until a "
        "reviewer confirms them) unless --writer-key holds the key the policy registers for "
        "--agent; an agent whose key the policy registers is refused without it.")
    add_common(p)
    p.add_argument("--agent", default=os.environ.get(AGENT_ENV),
                   help=f"the agent identity every write is made as, agent:NAME (default: "
                   f"${AGENT_ENV}); never taken from the client")
    p.add_argument("--writer-key", metavar="FILE",
                   help="writer key file (custody-app writer-key); its public key must be "
                   "registered for --agent in the policy's [provenance] writer_keys: every "
                   "event is then signed with it, and writes are attested")
    p.add_argument("--create", action="store_true",
                   help="create the ledger if it does not exist (otherwise a missing ledger is "
                   "refused, exit 3: a mistyped path must not hand the agent an empty memory)")
    p.add_argument("--http", action="store_true",
                   help="Streamable HTTP on 127.0.0.1 instead of stdio; needs a bearer token")
    p.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    p.add_argument("--session-idle", type=float, default=1800.0, metavar="SECONDS",
                   help="with --http: a session with no request for this long expires and its "
                   "id is refused from then on (default 1800)")
    p.add_argument("--token-env", default=TOKEN_ENV,
                   help=f"environment variable holding the HTTP bearer token (default {TOKEN_ENV})")
    return p


def _fail(message: str, code: int, prog: str = "custody-app serve") -> int:
    sys.stderr.write(escape_text(f"{prog}: {message}") + "\n")  # names the user typed, too
    return code


def serve_main(argv: list[str]) -> int:
    args = _serve_parser().parse_args(argv)
    if not args.agent:
        return _fail(f"--agent agent:NAME is required (or set ${AGENT_ENV})", 2)
    token = None
    if args.http:
        token = os.environ.get(args.token_env, "")
        # Whitespace does not count: a blank token makes a server nobody can log in to, and
        # padding a short secret with spaces does not make it longer to guess.
        if len("".join(token.split())) < MIN_TOKEN or token != token.strip():
            return _fail(f"refusing to serve HTTP without a bearer token: set ${args.token_env} "
                         f"to a secret of at least {MIN_TOKEN} non-whitespace characters, "
                         "without leading or trailing whitespace", 2)
        if not 0 < args.port < 65536:
            return _fail(f"--port {args.port} is not a TCP port", 2)
        if not 0 < args.session_idle < float("inf"):
            return _fail(f"--session-idle {args.session_idle:g} is not a positive number of "
                         "seconds", 2)
    if refused := refuse_missing(ledger_path(args.ledger), create=args.create):
        return _fail(f"{refused.message} ({refused.code})", 3)
    try:
        key = read_key(args.writer_key) if args.writer_key else None
        ledger = Ledger.open(ledger_path(args.ledger), policy=policy_path(args.policy),
                             keystore=args.keystore)
    except LedgerError as exc:
        return _fail(f"{exc.message} ({exc.code})", 3)
    with ledger:
        try:
            # One identity per process (DESIGN 14), fixed here, with the key if given.
            bind_agent(ledger, args.agent, key)
            tools = MemoryTools(ledger, args.agent)
        except LedgerError as exc:
            return _fail(f"{exc.message} ({exc.code})", 2)
        sys.stderr.write(escape_text(f"custody-app serve: {args.agent} on {ledger.db.path}, "
                                     f"writes {tools.provenance}") + "\n")
        say_will_adopt(ledger, "custody-app serve")
        if token is not None:
            from custody_app.interfaces.mcp.http import serve_http
            serve_http(tools, args.port, token, args.session_idle)
        else:
            from custody_app.interfaces.mcp.server import serve_stdio
            anyio.run(serve_stdio, tools)
    return 0


def writer_key_main(argv: list[str]) -> int:
    p = Parser(
        prog="custody-app writer-key",
        description="Create an Ed25519 writer key pair: the private key goes to --out (mode "
        "0600, never over an existing file); the policy line that registers its public key, "
        "for [provenance] writer_keys, goes to stdout.")
    p.add_argument("file", metavar="FILE", nargs="?", help=argparse.SUPPRESS)
    p.add_argument("--out", metavar="PATH", help="where to write the new private key")
    p.add_argument("--agent", required=True, help="the actor the key is for, agent:NAME")
    args = p.parse_args(argv)
    out = args.out or args.file
    if out is None or (args.out and args.file):
        return _fail("give the key file's path once, as --out PATH", 2, "custody-app writer-key")
    try:
        check_actor(args.agent)
    except PydanticCustomError:
        return _fail(f"--agent {args.agent!r} is not kind:id", 2, "custody-app writer-key")
    try:
        public = new_key(out)
    except LedgerError as exc:
        return _fail(f"{exc.message} ({exc.code})", 1, "custody-app writer-key")
    sys.stdout.write(f'writer_keys = {{{json.dumps(args.agent)} = "{public}"}}\n')
    sys.stderr.write(escape_text(
        f"custody-app: put that line under [provenance] in the policy, then start the writer "
        f"with --agent {args.agent} --writer-key {out}") + "\n")
    return 0
