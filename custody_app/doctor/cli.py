"""`custody-app doctor`: the subcommand of the install and ledger checks (doctor/checks.py)."""

from __future__ import annotations

import argparse
import sys

from custody_app.doctor.checks import diagnose
from custody_app.domain.errors import Exit, Parser
from custody_app.domain.escaping import escape_text, escaped, json_text
from custody_app.domain.resources import DEFAULT_LEDGER, LEDGER_ENV, POLICY_ENV, ledger_path, policy_path
from custody_app.keys.keyring import KEYSTORE_ENV


def _parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="custody-app doctor",
        description="check the install and a ledger, read-only: sqlite-vec, secure delete, "
        "schema version and triggers, WAL state, pending scrubs, stored identifiers the door now "
        "refuses, key files and their modes. "
        "One line per check (ok, warn or FAIL); exit 0 when nothing failed, 1 on a failure, "
        "3 when the ledger cannot be opened.")
    p.add_argument("--ledger", help=f"ledger file (default: ${LEDGER_ENV} or ./{DEFAULT_LEDGER})")
    p.add_argument("--keystore", help=f"key store (default: ${KEYSTORE_ENV} or LEDGER.keys)")
    p.add_argument("--policy", help=f"a policy TOML to check against the one the ledger records "
                   f"(default: ${POLICY_ENV}, else the recorded one); never adopted")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--strict", action="store_true", help="exit 1 on a warning too")
    return p


def doctor_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    report = diagnose(ledger_path(args.ledger), keystore=args.keystore,
                      policy=policy_path(args.policy))
    if args.json:
        sys.stdout.write(json_text(report.model_dump(mode="json"), indent=2) + "\n")
    else:
        sys.stdout.write(escape_text(escaped(report).render(), keep_newlines=True) + "\n")
    failed = sum(c.outcome == "FAIL" for c in report.checks)
    sys.stderr.write(f"custody-app: doctor: {len(report.checks)} check(s), {failed} failed, "
                     f"{report.warnings} warning(s)\n")
    if not report.opened:
        return int(Exit.UNOPENABLE)
    return int(Exit.OP_FAILED if failed or (args.strict and report.warnings) else Exit.OK)
