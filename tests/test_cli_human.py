"""The human subcommands in real subprocesses on a real demo ledger: beliefs, show, why,
history, queue, confirm, reject, retract (text and --json), a mistyped subcommand, a missing
ledger, the terminal app without a terminal, and the README's first steps run literally."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from custody_app import Ledger

ROOT = Path(__file__).resolve().parent.parent
ID = re.compile(r"\bf_[0-9a-f]{22}\b")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("CUSTODY_LEDGER", "CUSTODY_POLICY", "CUSTODY_REVIEWER", "CUSTODY_CONFIG")}


def cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "custody_app", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=cwd, env=_env(),
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh demo ledger, built the way the README says (without the terminal app)."""
    folder = tmp_path_factory.mktemp("demo")
    done = cli("--demo", "--no-tui", cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder / "custody-demo.db"


@pytest.fixture
def copy(demo: Path, tmp_path: Path) -> Path:
    for suffix in ("", "-wal", ".keys", ".keys.master", ".pub"):
        if Path(f"{demo}{suffix}").exists():
            shutil.copyfile(f"{demo}{suffix}", tmp_path / f"custody-demo.db{suffix}")
    return tmp_path / "custody-demo.db"


def _facts(ledger: Path, subject: str) -> dict[str, dict[str, Any]]:
    done = cli("beliefs", "--subject", subject, "--json", "--ledger", ledger, cwd=ledger.parent)
    assert done.returncode == 0, done.stderr
    return {f["predicate"]: f for f in json.loads(done.stdout)["facts"]}


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


# ---- names that are wrong ---------------------------------------------------------------------

def test_a_mistyped_subcommand_is_a_usage_error_with_a_suggestion(tmp_path: Path) -> None:
    done = cli("qeue", "--ledger", "demo.db", cwd=tmp_path)
    assert done.returncode == 2
    assert "unknown subcommand 'qeue' (did you mean 'queue'?)" in done.stderr
    assert _files(tmp_path) == set()  # neither a ledger named qeue nor demo.db


def test_an_unknown_word_is_not_taken_as_a_ledger_path(tmp_path: Path) -> None:
    done = cli("frobnicate", cwd=tmp_path)
    assert done.returncode == 2 and "unknown subcommand 'frobnicate'" in done.stderr
    assert "write ./frobnicate" in done.stderr and _files(tmp_path) == set()


def test_the_terminal_app_refuses_to_start_without_a_terminal(demo: Path) -> None:
    before = _files(demo.parent)
    done = cli(demo, cwd=demo.parent)  # stdin is /dev/null: no terminal; must not spin
    assert done.returncode == 2
    assert "needs a terminal" in done.stderr and _files(demo.parent) == before


def test_a_mistyped_ledger_name_creates_nothing(demo: Path) -> None:
    before = _files(demo.parent)
    done = cli("custody-dmeo.db", cwd=demo.parent)
    assert done.returncode == 2 and "no ledger at custody-dmeo.db" in done.stderr
    assert _files(demo.parent) == before


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_the_terminal_app_asks_before_creating_a_ledger(demo: Path) -> None:
    """In a real (pseudo-)terminal the app asks; answering no creates nothing."""
    import pty

    before = _files(demo.parent)
    leader, follower = pty.openpty()
    child = subprocess.Popen([sys.executable, "-m", "custody_app", "custody-dmeo.db"],
                             stdin=follower, stdout=follower, stderr=follower, cwd=demo.parent,
                             env=_env())
    os.close(follower)
    seen = b""
    try:
        while b"[y/N]" not in seen:
            chunk = os.read(leader, 4096)
            assert chunk, seen
            seen += chunk
        os.write(leader, b"n\n")
        assert child.wait(timeout=60) == 3
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        os.close(leader)
    assert b"there is no custody-dmeo.db, but there is custody-demo.db" in seen
    assert _files(demo.parent) == before


@pytest.mark.parametrize("command", ["history", "show", "confirm", "hold"])
def test_subcommands_refuse_a_missing_ledger_saying_how_to_name_one(demo: Path,
                                                                    command: str) -> None:
    extra = ["--actor", "user:x", "--reason", "r"] if command == "hold" else []
    before = _files(demo.parent)
    done = cli(command, "f_0000000000000000000000", *extra, "--ledger", "custody-dmeo.db",
               cwd=demo.parent)
    assert done.returncode == 3, done.stderr
    assert "did you mean custody-demo.db?" in done.stderr and "--ledger PATH" in done.stderr
    assert "(ledger_missing)" in done.stderr and _files(demo.parent) == before


# ---- reading -----------------------------------------------------------------------------------

def test_beliefs_text_lists_ids_and_says_what_to_run_next(demo: Path) -> None:
    done = cli("beliefs", "--subject", "acct:1042", "--ledger", demo, cwd=demo.parent)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    plan = _facts(demo, "acct:1042")["plan"]
    assert lines[0].startswith("Believed at valid time") and "(subject acct:1042)" in lines[0]
    assert any(line.split()[:3] == [plan["fact_id"], "acct:1042", "plan"] for line in lines)
    assert lines[-1].startswith("next: custody-app show f_")
    assert all("acct:1042" in line for line in lines[1:-1])


def test_beliefs_filters_and_json_agree_with_the_api(demo: Path) -> None:
    done = cli("beliefs", "--subject", "acct:1042", "--predicate", "plan", "--json", "--ledger",
               demo, cwd=demo.parent)
    page = json.loads(done.stdout)
    with Ledger.open(demo, readonly=True) as ledger:
        want = [f.fact_id for f in ledger.beliefs(subject="acct:1042", predicate="plan").facts]
    assert [f["fact_id"] for f in page["facts"]] == want and len(want) == 1
    old = cli("beliefs", "--subject", "acct:1042", "--predicate", "plan", "--include",
              "superseded", "--json", "--ledger", demo, cwd=demo.parent)
    assert len(json.loads(old.stdout)["facts"]) > 1


def test_show_tells_the_story_and_why_json_keeps_everything(demo: Path) -> None:
    plan = _facts(demo, "acct:1042")["plan"]
    done = cli("show", plan["fact_id"], "--ledger", demo, cwd=demo.parent)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith(f"{plan['fact_id']}: acct:1042 plan = {{")
    assert "written by system:crm-sync" in text and "replaced: f_" in text
    assert re.search(r"policy [0-9a-f]{64}", text) and len(text) < 2000
    assert "\\n" not in text  # no escaped policy file inside
    why = json.loads(cli("why", plan["fact_id"], "--json", "--ledger", demo, cwd=demo.parent).stdout)
    assert why["fact"]["fact_id"] == plan["fact_id"] and "source" in why["policy"]
    assert cli("why", plan["fact_id"], "--ledger", demo, cwd=demo.parent).stdout == text
    policy = cli("show", plan["fact_id"], "--policy-text", "--ledger", demo, cwd=demo.parent)
    assert policy.stdout.splitlines()[0] == f"# policy {why['policy']['hash']}" + (
        f" ({why['policy']['path']})" if why["policy"]["path"] else "")
    assert why["policy"]["source"].strip() in policy.stdout


def test_history_text_is_one_line_per_event(demo: Path) -> None:
    plan = _facts(demo, "acct:1042")["plan"]
    data = json.loads(cli("history", plan["fact_id"], "--json", "--ledger", demo,
                          cwd=demo.parent).stdout)
    text = cli("history", plan["fact_id"], "--ledger", demo, cwd=demo.parent).stdout.splitlines()
    assert text[0] == f"{plan['fact_id']}: active now; {len(data['events'])} event(s)"
    assert [line.split()[1] for line in text[1:]] == [str(e["seq"]) for e in data["events"]]
    assert "assert" in text[1] and "cause import" in text[1]


def test_stored_control_characters_are_escaped_in_text(tmp_path: Path) -> None:
    ledger = tmp_path / "c.db"
    with Ledger.open(ledger) as led:
        led.assert_fact("acct:9", "note", "red\x1b[31m\u202eevil", actor="agent:x",
                        cause={"kind": "tool", "ref": "t#1"}, provenance="attested")
    for command in (["beliefs"], ["queue"]):
        out = cli(*command, "--ledger", ledger, cwd=tmp_path).stdout
        assert "\x1b" not in out and "\u202e" not in out
    out = cli("beliefs", "--ledger", ledger, cwd=tmp_path).stdout
    assert "\\u001b[31m\\u202eevil" in out  # JSON escapes ESC; plain() the override


# ---- review ------------------------------------------------------------------------------------

def test_queue_text_and_json_count_every_claim(copy: Path) -> None:
    with Ledger.open(copy) as led, led.transaction():
        for n in range(3):
            led.assert_fact(f"acct:{n}", "tier", "gold", actor="agent:helper",
                            cause={"kind": "tool", "ref": f"t#{n}"})
    data = json.loads(cli("queue", "--json", "--ledger", copy, cwd=copy.parent).stdout)
    assert data["total"] == 4 and data["by_writer"] == {"agent:support-bot": 1, "agent:helper": 3}
    assert data["by_cause"] == {"message": 1, "tool": 3}
    only = json.loads(cli("queue", "--writer", "agent:helper", "--limit", "2", "--json",
                          "--ledger", copy, cwd=copy.parent).stdout)
    assert (only["matching"], only["shown"]) == (3, 2)
    text = cli("queue", "--writer", "agent:helper", "--limit", "2", "--ledger", copy,
               cwd=copy.parent).stdout.splitlines()
    assert text[0] == "Review queue: 4 claim(s) waiting, 3 matching; showing the oldest 2"
    assert text[1] == "  by writer: agent:helper 3" and text[-1].startswith("next: custody-app confirm")


def test_confirm_makes_the_claim_believed(copy: Path) -> None:
    [item] = json.loads(cli("queue", "--json", "--ledger", copy, cwd=copy.parent).stdout)["items"]
    fact = item["fact"]["fact_id"]
    done = cli("confirm", fact, "--actor", "reviewer:dana", "--ledger", copy, cwd=copy.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"confirmed {fact}: user:977 timezone = \"Europe/Amsterdam\"; now active")
    assert _facts(copy, "user:977")["timezone"]["fact_id"] == fact


def test_reject_json_and_a_writer_who_is_not_a_reviewer(copy: Path) -> None:
    [item] = json.loads(cli("queue", "--json", "--ledger", copy, cwd=copy.parent).stdout)["items"]
    fact = item["fact"]["fact_id"]
    refused = cli("reject", fact, "--actor", "agent:helper", "--reason", "no", "--ledger", copy,
                  cwd=copy.parent)
    assert refused.returncode == 1 and "(not_reviewer)" in refused.stderr
    done = cli("reject", fact, "--actor", "reviewer:dana", "--reason", "wrong account", "--json",
               "--ledger", copy, cwd=copy.parent)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "retracted"
    assert json.loads(cli("queue", "--json", "--ledger", copy, cwd=copy.parent).stdout)["total"] == 0


def test_retract_says_what_is_believed_again(copy: Path) -> None:
    plan = _facts(copy, "acct:1042")["plan"]
    why = json.loads(cli("why", plan["fact_id"], "--json", "--ledger", copy, cwd=copy.parent).stdout)
    [old] = why["supersedes"]
    done = cli("retract", plan["fact_id"], "--actor", "user:ops", "--reason", "wrong import",
               "--ledger", copy, cwd=copy.parent)
    assert done.returncode == 0, done.stderr
    first, again = done.stdout.splitlines()[:2]
    assert first.startswith(f"retracted {plan['fact_id']}: acct:1042 plan = ") and "now retracted" in first
    assert again.startswith(f"  believed again: {old['fact_id']}  acct:1042 plan = ")
    assert _facts(copy, "acct:1042")["plan"]["fact_id"] == old["fact_id"]


# ---- the README, literally ---------------------------------------------------------------------

def _first_steps() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- first-steps:", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_the_readme_first_steps_run_as_written_on_a_fresh_demo(demo: Path) -> None:
    fact: str | None = None
    steps = _first_steps()
    assert any("beliefs --subject acct:1042" in s for s in steps)
    for line in steps:
        words = shlex.split(line, comments=True)
        assert words[0] == ".venv/bin/custody-app", line
        if "FACT_ID" in words:
            assert fact is not None, f"{line}: no earlier step printed a fact id"
            words = [fact if w == "FACT_ID" else w for w in words]
        done = cli(*words[1:], cwd=demo.parent)
        assert done.returncode == 0, f"{line}\n{done.stderr}"
        assert done.stdout.strip(), line
        found = ID.findall(done.stdout)
        fact = fact or (found[0] if found else None)
    assert fact is not None
