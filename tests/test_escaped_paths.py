"""Issue 31: the `next:` hints (and every other human line) print the ledger path and other
user-given strings escaped, so a path holding an escape sequence cannot retitle or clear the
terminal. Real CLI processes, a real folder whose name holds the sequences."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ESC = "\x1b]0;pwned\x07\x1b[2J"
CAUSE = {"kind": "tool", "ref": "r"}


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    return subprocess.run([sys.executable, "-m", "custody_app", *args], input=stdin,
                          capture_output=True, text=True, timeout=120, env=env)


def raw_controls(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    folder = tmp_path_factory.mktemp("esc") / f"led{ESC}"
    folder.mkdir()
    db = folder / f"l{ESC}.db"
    assert cli("init", "--ledger", str(db)).returncode == 0
    lines = [{"op": "assert", "subject": "acct:1", "predicate": "plan", "value": "gold",
              "actor": "user:a", "cause": CAUSE, "provenance": "attested"},
             {"op": "assert", "subject": "acct:2", "predicate": "plan", "value": "tin",
              "actor": "agent:bot", "cause": CAUSE}]
    done = cli("--batch", "-", "--ledger", str(db),
               stdin="".join(json.dumps(x) + "\n" for x in lines))
    believed, claimed = (json.loads(r)["result"]["fact_id"] for r in done.stdout.splitlines())
    return db, believed, claimed


@pytest.mark.parametrize("command", ["show", "beliefs", "queue"])
def test_next_hints_print_the_ledger_path_escaped(hostile: tuple[Path, str, str],
                                                  command: str) -> None:
    db, believed, _ = hostile
    args = {"show": ["show", believed], "beliefs": ["beliefs"], "queue": ["queue"]}[command]
    done = cli(*args, "--ledger", str(db))
    assert done.returncode == 0, done.stderr
    assert "next:" in done.stdout
    assert raw_controls(done.stdout + done.stderr) == [], repr(done.stdout)
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in done.stdout


@pytest.mark.parametrize("case", ["missing ledger", "writer-key", "bad batch file", "demo"])
def test_other_lines_naming_a_user_given_path_are_escaped(hostile: tuple[Path, str, str],
                                                          case: str) -> None:
    db, _, _ = hostile
    folder = db.parent
    args = {"missing ledger": ["beliefs", "--ledger", str(folder / f"none{ESC}.db")],
            "writer-key": ["writer-key", str(folder / f"w{ESC}.key"), "--agent", "agent:x"],
            "bad batch file": ["--batch", str(folder / f"b{ESC}.jsonl"), "--ledger", str(db)],
            "demo": ["--demo", "--no-tui", "--ledger", str(folder / f"demo{ESC}.db")]}[case]
    done = cli(*args)
    out = done.stdout + done.stderr
    assert raw_controls(out) == [], repr(out[-2000:])
    assert "\\x1b" in out
