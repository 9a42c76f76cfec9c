"""Files that ship with the package: the default policy and the sample data."""

from __future__ import annotations

from pathlib import Path

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
