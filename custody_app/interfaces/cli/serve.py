"""`custody-app serve` (the MCP server, stdio or loopback HTTP) and `custody-app writer-key`."""

from __future__ import annotations

import argparse
import os
import sys

import anyio

from custody_app.domain.errors import LedgerError, Parser
from custody_app.domain.escaping import escape_text
from custody_app.domain.resources import ledger_path, policy_path
from custody_app.interfaces.cli.common import add_common
from custody_app.interfaces.cli.naming import refuse_missing
from custody_app.interfaces.mcp.tools import MemoryTools
from custody_app.keys.writer_keys import new_key, read_key
from custody_app.ledger.facade import Ledger

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
        "--agent.")
    add_common(p)
    p.add_argument("--agent", default=os.environ.get(AGENT_ENV),
                   help=f"the agent identity every write is made as, agent:NAME (default: "
                   f"${AGENT_ENV}); never taken from the client")
    p.add_argument("--writer-key", metavar="FILE",
                   help="writer key file; its sha256 must be registered for --agent in the "
                   "policy's [provenance] writer_keys for writes to be attested")
    p.add_argument("--create", action="store_true",
                   help="create the ledger if it does not exist (otherwise a missing ledger is "
                   "refused, exit 3: a mistyped path must not hand the agent an empty memory)")
    p.add_argument("--http", action="store_true",
                   help="Streamable HTTP on 127.0.0.1 instead of stdio; needs a bearer token")
    p.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
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
            tools = MemoryTools(ledger, args.agent, writer_key=key)
        except LedgerError as exc:
            return _fail(f"{exc.message} ({exc.code})", 2)
        if key is not None and not tools.trusted:
            sys.stderr.write(f"custody-app serve: the writer key is not the one the policy "
                             f"registers for {args.agent}; every write will be claimed\n")
        sys.stderr.write(f"custody-app serve: {args.agent} on {ledger.db.path}, writes "
                         f"{tools.provenance}\n")
        if token is not None:
            from custody_app.interfaces.mcp.http import serve_http
            serve_http(tools, args.port, token)
        else:
            from custody_app.interfaces.mcp.server import serve_stdio
            anyio.run(serve_stdio, tools)
    return 0


def writer_key_main(argv: list[str]) -> int:
    p = Parser(
        prog="custody-app writer-key",
        description="Create a writer key file (mode 0600) and print the policy line that "
        "registers it, for [provenance] writer_keys.")
    p.add_argument("file", metavar="FILE", help="where to write the new key (never overwritten)")
    p.add_argument("--agent", required=True, help="the actor the key is for, agent:NAME")
    args = p.parse_args(argv)
    try:
        digest = new_key(args.file)
    except LedgerError as exc:
        return _fail(f"{exc.message} ({exc.code})", 1, "custody-app writer-key")
    sys.stdout.write(f'writer_keys = {{"{args.agent}" = "{digest}"}}\n')
    sys.stderr.write(f"custody-app: put that line under [provenance] in the policy, then "
                     f"serve with --agent {args.agent} --writer-key {args.file}\n")
    return 0
