"""Issue 15 in real subprocesses on a fresh demo ledger: the sweep docs/erasure.md cites, run
literally, completes (exit 0, nothing leaks, what remains listed as shared with where it lives), and the
reading subcommands say that an erased fact's free text was erased."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_cli_human import cli

SWEEP = "sweep --before 2026-03-10T00:00:00Z --actor user:dpo"
ID = re.compile(r"\bf_[0-9a-f]{22}\b")


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("demo15")
    built = cli("--demo", "--no-tui", cwd=folder)
    assert built.returncode == 0, built.stderr
    done = cli(*SWEEP.split(), "--ledger", "custody-demo.db", cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    return folder / "custody-demo.db", done.stdout


def test_the_erasure_docs_cite_this_very_sweep() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "erasure.md").read_text()
    assert f"`custody-app {SWEEP}` exits 0" in " ".join(text.split())


def test_the_demo_sweep_completes_and_lists_what_remains_as_shared(swept: tuple[Path, str]) -> None:
    _ledger, out = swept
    assert "complete: yes" in out
    counts = re.findall(r"(\d+) leak\(s\)", out)
    assert counts and all(c == "0" for c in counts), out
    assert "\n      leak:" not in out
    # Each remaining string is named with the rows that hold it.
    for block in re.findall(r"shared: (.+?)\n((?:        in .+\n)+)", out):
        assert block[1].strip().startswith("in table "), block


def test_show_and_history_say_the_free_text_was_erased(swept: tuple[Path, str]) -> None:
    ledger, out = swept
    # A retracted fact of the demo: its cause and its retraction's reason were sealed.
    line = next(x for x in out.splitlines() if "retracted -> expire" in x)
    fact = ID.findall(line)[0]
    shown = cli("show", fact, "--ledger", ledger, cwd=ledger.parent)
    assert shown.returncode == 0, shown.stderr
    assert "(ref: (erased)" in shown.stdout, shown.stdout
    assert re.search(r'(retract|reject) by .+: "\(erased\)"', shown.stdout), shown.stdout
    history = cli("history", fact, "--ledger", ledger, cwd=ledger.parent)
    assert history.returncode == 0 and "reason (erased)" in history.stdout, history.stdout
    verify = cli("verify", "--ledger", ledger, "--key", f"{ledger}.pub", cwd=ledger.parent)
    assert verify.returncode == 0, verify.stdout
