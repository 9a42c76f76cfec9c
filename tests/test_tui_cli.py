"""The console script's ways into the terminal app: --demo (and --demo --no-tui), `tui LEDGER`
refusing a bad policy or reviewer before anything opens, and the tmux check end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from custody_app.ledger.facade import Ledger

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("CUSTODY_LEDGER", "CUSTODY_POLICY", "CUSTODY_REVIEWER")}


def cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "custody_app", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=cwd, env=_env(),
                          stdin=subprocess.DEVNULL)


def test_demo_no_tui_builds_the_ledger_and_prints_the_replay(tmp_path: Path) -> None:
    done = cli("--demo", "--no-tui", "--ledger", tmp_path / "demo.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(out) >= 70 and all(r["ok"] for r in out)
    with Ledger.open(tmp_path / "demo.db", readonly=True) as led:
        assert led.review_queue().items  # the demo leaves a claim for the reviewer
        assert led.verify().valid


def test_demo_no_tui_never_imports_textual(tmp_path: Path) -> None:
    code = ("import sys\nfrom custody_app.interfaces.cli.main import main\n"
            f"rc = main(['--demo', '--no-tui', '--ledger', {str(tmp_path / 'd.db')!r}])\n"
            "assert rc == 0, rc\n"
            "assert not [m for m in sys.modules if m.split('.')[0] == 'textual']\n"
            "print('no textual')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "no textual"


def test_tui_with_a_bad_policy_exits_3_naming_the_key(tmp_path: Path) -> None:
    policy = tmp_path / "bad.toml"
    policy.write_text("[retention]\nwindow = 'P1D'\n")
    done = cli("tui", tmp_path / "new.db", "--policy", policy, cwd=tmp_path)
    assert done.returncode == 3
    assert "key 'retention.window': unknown key" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "new.db").exists()


def test_tui_with_a_bad_reviewer_exits_3(tmp_path: Path) -> None:
    done = cli("tui", tmp_path / "new.db", "--reviewer", "dana", cwd=tmp_path)
    assert done.returncode == 3
    assert "reviewer 'dana' (from --reviewer) must be kind:id" in done.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_tmux_check_approves_a_quarantined_fact() -> None:
    done = subprocess.run(["bash", str(ROOT / "tests" / "tmux_check.sh")], capture_output=True,
                          text=True, timeout=240, env={**_env(), "PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tmux_check: PASS" in done.stdout
