"""A reviewer's day in a real 80x24 terminal (tmux): find the claims, read one, approve one,
reject one with a reason, bulk approve a writer's claims, resolve a pending retraction, place a
hold, preview and run a sweep, trace a blast radius; by keys alone, each task's keystrokes
recorded and printed as a table (`pytest -s` shows it), and the ledger checked afterwards.
Skipped when tmux is not installed (CI installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from custody_app.ledger.facade import Ledger
from tests.tuikit import Story, add_helper_claims, build_story

ROOT = Path(__file__).resolve().parent.parent
REVIEWER = "user:dana"
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Terminal:
    """One app in a tmux session of its own server (a private socket: nothing shared with
    another tmux user), 80x24; keys are sent as tmux names them and counted per task."""

    def __init__(self, socket: str, command: str) -> None:
        self.base = ["tmux", "-L", socket]
        self.table: list[tuple[str, list[str]]] = []
        subprocess.run([*self.base, "-f", "/dev/null", "new-session", "-d", "-s", "walk",
                        "-x", "80", "-y", "24", command], check=True, timeout=30)

    def pane(self) -> str:
        done = subprocess.run([*self.base, "capture-pane", "-p", "-t", "walk"],
                              capture_output=True, text=True, timeout=30)
        return done.stdout

    def wait_for(self, text: str, seconds: float = 60) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            shown = self.pane()
            if text in shown:
                return shown
            time.sleep(0.2)
        raise AssertionError(f"waited {seconds} s for {text!r}; the pane shows:\n{self.pane()}")

    def keys(self, task: str, *keys: str, literal: bool = False) -> None:
        """Send `keys` (tmux key names, or one literal string) as part of `task`."""
        for key in keys:
            subprocess.run([*self.base, "send-keys", "-t", "walk", *(["-l"] if literal else []),
                            key], check=True, timeout=30)
            time.sleep(0.15)  # as a person types: each key lands before the next
        if self.table and self.table[-1][0] == task:
            self.table[-1][1].extend([f"'{k}'" if literal else k for k in keys])
        else:
            self.table.append((task, [f"'{k}'" if literal else k for k in keys]))

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, timeout=30)


def _ledger(tmp_path: Path) -> Story:
    story = build_story(tmp_path / "walk.db")
    add_helper_claims(story, 4)  # agent:helper's claims: the bulk approve
    with Ledger.open(story.path) as led:
        assert led.retract(story["plan2"], actor="agent:stray", reason="I think it is wrong",
                           provenance="claimed").pending
    return story


def test_a_reviewers_day_at_80x24_in_tmux(tmp_path: Path) -> None:
    story = _ledger(tmp_path)
    env = f"env -u COLUMNS -u LINES -u CUSTODY_LEDGER -u CUSTODY_POLICY PYTHONPATH={ROOT}"
    command = (f"{env} {sys.executable} -m custody_app {story.path} --reviewer {REVIEWER}; "
               "sleep 30")
    term = Terminal(f"custody-walk-{os.getpid()}", command)
    try:
        term.wait_for("7 waiting for review")  # the header: 6 claims and 1 retraction

        term.keys("find the claims", "2")
        term.wait_for("✓ 0 marked")
        shown = term.wait_for("agent:helper")
        assert "retraction" in shown and "timezone" in shown

        term.keys("read one", "Down", "Enter")  # the first claim (the retraction is above)
        term.wait_for("Created by event")
        term.wait_for("Europe/Amsterdam")
        term.keys("read one", "Escape")
        term.wait_for("✓ 0 marked")

        term.keys("approve", "a")
        term.wait_for(f"Approve {story['claim']}")
        term.keys("approve", "Enter")
        term.wait_for("approved 1 fact(s)")

        term.keys("reject with a reason", "x")
        term.wait_for(f"Reject {story['claim2']}")
        term.keys("reject with a reason", "wrong region", literal=True)
        term.keys("reject with a reason", "Enter")
        term.wait_for("rejected 1 fact(s)")

        term.keys("bulk approve (a writer's claims)", "w")
        term.wait_for("✓ 4 marked")
        term.keys("bulk approve (a writer's claims)", "a")
        term.wait_for("Approve 4 marked rows")
        term.keys("bulk approve (a writer's claims)", "Enter")
        term.wait_for("approved 4 fact(s)")

        term.keys("resolve a pending retraction", "a")
        term.wait_for(f"Approve the retraction of {story['plan2']}")
        term.wait_for("Approving a retraction")  # and what that does (a notice may cover
        #                                           the end of the line)
        term.keys("resolve a pending retraction", "Enter")
        term.wait_for("approved 1 fact(s)")
        term.wait_for("0 waiting for review")

        term.keys("hold", "1")
        term.wait_for("now (live)")
        term.keys("hold", "/")
        term.keys("hold", "acct:2077", literal=True)
        term.keys("hold", "Enter", "Enter")
        term.wait_for("Created by event")
        term.keys("hold", "h")
        term.wait_for("Place a legal hold on")
        term.keys("hold", "case 2026-200", literal=True)
        term.keys("hold", "Enter")
        term.wait_for("⚑ on legal hold")  # the fact's summary, reloaded
        held = term.wait_for("acct:2077 · ").split("acct:2077 · ")[0].split()[-1]
        assert held.startswith("f_"), held

        term.keys("preview and run a sweep", "4")
        term.wait_for("Preview sweep")
        term.keys("preview and run a sweep", "c")
        term.keys("preview and run a sweep", "2026-03-02T10:30:00Z", literal=True)
        term.keys("preview and run a sweep", "Enter", "p")
        term.wait_for("preview: would expire")
        term.keys("preview and run a sweep", "s")
        term.wait_for("Sweep: expire")
        term.keys("preview and run a sweep", "y")
        term.wait_for("sweep expired")

        term.keys("trace a blast radius", "6")
        term.wait_for("no fact chosen")
        term.keys("trace a blast radius", "/")
        term.keys("trace a blast radius", story["summary"], literal=True)
        term.keys("trace a blast radius", "Enter")
        term.wait_for(f"root {story['summary']}")

        term.keys("quit", "q")
        time.sleep(1)
    finally:
        print(term.pane())
        term.close()

    print("\n| task | keys | count |\n|---|---|---|")
    for task, keys in term.table:
        typed = sum(len(k) - 2 if k.startswith("'") else 1 for k in keys)
        print(f"| {task} | {' '.join(keys)} | {typed} |")

    with Ledger.open(story.path, readonly=True) as led:
        def kinds(fact_id: str) -> list[tuple[str, str, str | None]]:
            events = led.history(fact_id).model_dump()["events"]
            return [(e["kind"], e["actor"], e.get("reason")) for e in events]

        assert ("confirm", REVIEWER, None) in kinds(story["claim"])
        assert ("reject", REVIEWER, "wrong region") in kinds(story["claim2"])
        assert led.history(story["plan2"]).status == "retracted"
        assert led.review_queue().items == [] and led.review_queue().retractions == []
        assert ("hold", REVIEWER, "case 2026-200") in kinds(held)
        assert led.history(story["plan"]).status == "expired"
