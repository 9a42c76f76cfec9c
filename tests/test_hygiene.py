"""The codebase's own rules, checked mechanically: layering, lint, types."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = BIN / name
    if found.exists():
        return str(found)
    located = shutil.which(name)
    if located is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return located


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_import_layers_hold() -> None:
    """screens -> custody_app -> store; apsw only in store; textual never in the domain."""
    done = _run(_tool("lint-imports"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_is_clean() -> None:
    done = _run(_tool("ruff"), "check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_is_clean() -> None:
    done = _run(_tool("mypy"), "custody_app", "store", "screens")
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_sql_outside_store() -> None:
    words = ("SELECT ", "INSERT INTO", "DELETE FROM", "CREATE TABLE")
    for folder in ("custody_app", "screens"):
        for file in (ROOT / folder).rglob("*.py"):
            text = file.read_text()
            assert not any(w in text for w in words), f"SQL text in {file}"
