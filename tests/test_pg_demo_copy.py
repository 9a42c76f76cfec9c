"""Issue 33's walk from a local ledger to the team server, with real processes: the demo ledger
copied to PostgreSQL and back, `verify --key` passing on both copies, and the terminal app opened
on the PostgreSQL copy in a real terminal (tmux, 80x24). The tmux part is skipped without tmux
(CI installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_batch_cli import cli

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
    socket = f"custody-pg-{os.getpid()}"
    base = ["tmux", "-L", socket]
    env = (f"env -u COLUMNS -u LINES -u CUSTODY_LEDGER -u CUSTODY_POLICY PYTHONPATH={ROOT} "
           f"XDG_DATA_HOME={os.environ['XDG_DATA_HOME']}")
    command = f"{env} {sys.executable} -m custody_app '{pg_url}' --reviewer user:dana; sleep 30"
    subprocess.run([*base, "-f", "/dev/null", "new-session", "-d", "-s", "pg", "-x", "80",
                    "-y", "24", command], check=True, timeout=30)

    def wait_for(text: str, seconds: float = 60) -> str:
        deadline = time.monotonic() + seconds
        shown = ""
        while time.monotonic() < deadline:
            shown = subprocess.run([*base, "capture-pane", "-p", "-t", "pg"], capture_output=True,
                                   text=True, timeout=30).stdout
            if text in shown:
                return shown
            time.sleep(0.2)
        raise AssertionError(f"waited {seconds} s for {text!r}; the pane shows:\n{shown}")

    try:
        beliefs = wait_for("acct:1042")  # the demo's customer, on the Beliefs screen
        assert "password" not in beliefs
        subprocess.run([*base, "send-keys", "-t", "pg", "2"], check=True, timeout=30)
        review = wait_for("why it waits")  # the Review screen's queue
        assert "waiting for review" in review
        subprocess.run([*base, "send-keys", "-t", "pg", "C-q"], check=True, timeout=30)
    finally:
        subprocess.run([*base, "kill-server"], capture_output=True, timeout=30)
