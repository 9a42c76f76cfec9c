"""Files: those that ship with the package (the default policy, the sample data), and which
ledger and policy a command works on when none is named."""

from __future__ import annotations

import os
from pathlib import Path

LEDGER_ENV = "CUSTODY_LEDGER"
POLICY_ENV = "CUSTODY_POLICY"
DEFAULT_LEDGER = "custody.db"

# custody_app/, the package root (this file is custody_app/domain/resources.py).
_PACKAGE = Path(__file__).resolve().parent.parent


def resource(relative: str) -> Path:
    """A shipped file: inside the wheel under _data/, or at the project root in a checkout."""
    for base in (_PACKAGE / "_data", _PACKAGE.parent):
        candidate = base / relative
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"custody-app resource {relative} is missing from this install")


def default_policy_path() -> Path:
    return resource("policies/default.toml")


def sample_batch_path() -> Path:
    return resource("sample_data/support_agent.jsonl")


def demo_batch_paths() -> list[Path]:
    """What --demo replays, in order: three weeks of a support agent's memory, then the refund
    incident that the blast radius screen traces (it continues the same ledger)."""
    return [sample_batch_path(), resource("sample_data/incident_refund.jsonl")]


def demo_policy_path() -> Path:
    """The policy --demo runs under: the default plus the demo receipt issuers."""
    return resource("sample_data/demo_policy.toml")


def ledger_path(given: str | None) -> str:
    """The ledger a command works on: the one given, else $CUSTODY_LEDGER, else ./custody.db."""
    return given or os.environ.get(LEDGER_ENV) or DEFAULT_LEDGER


def policy_path(given: str | None) -> str | None:
    """The policy file given, else $CUSTODY_POLICY; None means the shipped default."""
    return given or os.environ.get(POLICY_ENV)
