"""Issue 33's walk from a local ledger to the team server, with real processes: the demo ledger
copied to PostgreSQL and back, `verify --key` passing on both copies, and the terminal app opened
on the PostgreSQL copy in a real terminal (tmux, 80x24). The tmux part is skipped without tmux
(CI installs it)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.test_batch_cli import cli
from tests.test_tui_tmux_walk import Terminal

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    path = tmp_path / "demo.db"
    done = cli("--demo", "--no-tui", "--ledger", path)
    assert done.returncode == 0, done.stderr
    return path


def _verify(ledger: str | Path, key: Path) -> None:
    done = cli("verify", "--ledger", ledger, "--key", key)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_demo_goes_to_the_server_and_back_and_verifies_with_its_key_on_both(
        demo: Path, pg_url: str, tmp_path: Path) -> None:
    key = Path(f"{demo}.pub")
    _verify(demo, key)
    done = cli("copy", demo, pg_url)
    assert done.returncode == 0, done.stdout + done.stderr
    _verify(pg_url, key)
    back = tmp_path / "back.db"
    done = cli("copy", pg_url, back)
    assert done.returncode == 0, done.stdout + done.stderr
    _verify(back, key)
    heads = [cli("verify", "--json", "--ledger", where).stdout for where in (demo, pg_url, back)]
    assert len({h.split('"head"', 1)[1][:72] for h in heads}) == 1, heads


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_terminal_app_opens_on_the_server_copy_in_tmux(demo: Path, pg_url: str) -> None:
    done = cli("copy", demo, pg_url)
    assert done.returncode == 0, done.stdout + done.stderr
    env = (f"env -u COLUMNS -u LINES -u CUSTODY_LEDGER -u CUSTODY_POLICY PYTHONPATH={ROOT} "
           f"XDG_DATA_HOME={os.environ['XDG_DATA_HOME']}")
    command = f"{env} {sys.executable} -m custody_app '{pg_url}' --reviewer user:dana; sleep 30"
    term = Terminal(f"custody-pg-{os.getpid()}", command)
    try:
        beliefs = term.wait_for("acct:1042")  # the demo's customer, on the Beliefs screen
        assert "password" not in beliefs
        term.keys("review", "2")
        review = term.wait_for("why it waits")  # the Review screen's queue
        assert "waiting for review" in review
        term.keys("quit", "C-q")
    finally:
        term.close()
