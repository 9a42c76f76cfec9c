"""Live refresh: another process appends while the app is open and the open screen shows it,
keeping the cursor; a changed policy file is validated and adopted, or its error shown."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.widgets import DataTable

from custody_app.domain.policy import load_policy
from custody_app.ledger.facade import Ledger
from tests.tuikit import app_on, build_story, cursor_of, idle, keys, notes

ROOT = Path(__file__).resolve().parent.parent


def batch(path: Path, *ops: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """A real second process: `custody-app --batch -` on the same ledger file."""
    return subprocess.run([sys.executable, "-m", "custody_app", "--create", "--batch", "-", "--ledger",
                           str(path)], input="\n".join(json.dumps(o) for o in ops),
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


async def until(pilot: Any, check: Callable[[], bool], seconds: float = 15.0) -> bool:
    """Poll (the app keeps running meanwhile) until `check()` holds or time runs out."""
    for _ in range(int(seconds / 0.1)):
        if check():
            return True
        await asyncio.sleep(0.1)
        await pilot.pause()
    return check()


async def test_a_second_process_appends_and_the_screen_shows_it(tmp_path: Path) -> None:
    story = build_story(tmp_path / "live.db")
    app = app_on(story.path, watch=True)
    async with app.run_test(size=(160, 40)) as pilot:
        await idle(pilot)
        table = app.screen.query_one("#facts", DataTable)
        await pilot.press("down", "down")
        assert cursor_of(table) == story["plan2"]
        done = batch(story.path, {
            "op": "assert", "subject": "acct:7", "predicate": "plan", "value": "enterprise",
            "provenance": "attested", "actor": "agent:other", "space": "org",
            "cause": {"kind": "tool", "ref": "crm#9"}})
        assert done.returncode == 0, done.stderr
        new = json.loads(done.stdout.splitlines()[0])["result"]["fact_id"]
        assert await until(pilot, lambda: new in keys(table)), keys(table)
        assert cursor_of(table) == story["plan2"]  # the cursor stayed on its row
        assert keys(table)[-1] == new
        # A retraction by the other process ends the fact on screen too.
        done = batch(story.path, {"op": "retract", "fact_id": new, "actor": "user:maria",
                                  "reason": "wrong account"})
        assert done.returncode == 0, done.stderr
        assert await until(pilot, lambda: new not in keys(table))


async def test_review_queue_refreshes_when_another_process_confirms(tmp_path: Path) -> None:
    story = build_story(tmp_path / "live.db")
    app = app_on(story.path, watch=True)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("2")
        await idle(pilot)
        queue = app.screen.query_one("#queue", DataTable)
        assert keys(queue) == [story["claim"], story["claim2"]]
        done = batch(story.path, {"op": "confirm", "fact_id": story["claim"],
                                  "actor": "reviewer:other"})
        assert done.returncode == 0, done.stderr
        assert await until(pilot, lambda: keys(queue) == [story["claim2"]])


async def test_policy_file_change_is_adopted_or_refused(tmp_path: Path) -> None:
    story = build_story(tmp_path / "live.db")
    policy = tmp_path / "policy.toml"
    policy.write_text('default_space = "org"\n')
    app = app_on(story.path, policy=policy, watch=True)
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        await idle(pilot)
        first = app.access.policy.hash
        assert f"policy {first[:12]}" in app.sub_title
        policy.write_text('default_space = "org"\n[retention.windows]\n"team:*" = "P30D"\n')
        wanted = load_policy(policy).hash
        assert await until(pilot, lambda: f"policy {wanted[:12]}" in app.sub_title)
        assert await until(pilot, lambda: any("adopted (policy event #" in n
                                              for n in notes(app)))
        with Ledger.open(story.path, readonly=True) as led:
            assert [p.hash for p in led.policy_history()][-1] == wanted
        policy.write_text('default_space = "org"\n[retention]\nwindow = "P1D"\n')
        assert await until(pilot, lambda: any("unknown key" in n and "stays in force" in n
                                              for n in notes(app)))
        assert app.access.policy.hash == wanted and f"policy {wanted[:12]}" in app.sub_title
