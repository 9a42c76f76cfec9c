"""Multi-line stored text (a policy file, a report of several lines) keeps its line breaks and
still escapes every other control character and bidi override: the policy text in the app
(`o` on Fact and Integrity) and the CLI's `actions` and the end of `explain`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from custody_app.domain.escaping import MultilineText, escape_multiline, escaped
from custody_app.domain.timeutil import ManualClock
from custody_app.ledger.facade import Ledger
from screens.fact import FactScreen
from tests.conftest import SUITE_DEFAULT_POLICY
from tests.tuikit import FROZEN, app_on, build_story, idle, open_screen, screen_text

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = "\x1b[31m\u202egnp.exe\x07\r\u2028"


def test_the_multiline_form_keeps_breaks_and_escapes_the_rest() -> None:
    text = f"one\ntwo{HOSTILE}\r\nthree"
    out = escape_multiline(text)
    assert out.split("\n") == ["one", "two\\x1b[31m\\u202egnp.exe\\x07\\x0d\\u2028", "three"]
    # A plain stored string never keeps a break (it would forge a line); a MultilineText does.
    assert escaped("a\nb") == "a\\x0ab"
    kept = escaped({"policy": MultilineText("a\nb\u202e")}, markup=True)["policy"]
    assert kept == "a\nb\\u202e" and isinstance(kept, MultilineText)
    assert escaped(MultilineText("[b]x[/b]\ny"), markup=True) == "\\[b]x\\[/b]\ny"


def _cli(*args: str | Path) -> str:
    done = subprocess.run([sys.executable, "-m", "custody_app", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _acted(path: Path) -> None:
    with Ledger.open(path, clock=ManualClock(FROZEN)) as led:
        assert led.recall("plan", session="s1").model_dump()
        led.act("s1", "crm.close", "T-1", "closed", actor="agent:support-bot")
        led.act("s1", "crm.note", "T-2", f"noted{HOSTILE}\nforged line",
                actor="agent:support-bot")


def test_actions_prints_one_line_per_action_and_a_stored_break_stays_escaped(
        tmp_path: Path) -> None:
    story = build_story(tmp_path / "t.db")
    _acted(story.path)
    lines = _cli("actions", "--ledger", story.path).rstrip("\n").split("\n")
    assert len(lines) == 2, lines
    assert "crm.note T-2 -> noted\\x1b[31m\\u202egnp.exe\\x07\\x0d\\u2028\\x0aforged line" \
        in lines[0]
    assert "crm.close T-1 -> closed" in lines[1]
    assert not any(c in "".join(lines) for c in "\x1b\x07\r\u202e\u2028")


def test_explain_ends_with_the_served_facts_each_on_its_line(tmp_path: Path) -> None:
    story = build_story(tmp_path / "t.db")
    _acted(story.path)
    out = _cli("explain", "T-1", "--ledger", story.path)
    assert "\\x0a" not in out
    tail = out[out.index("Action crm.close T-1"):].rstrip("\n").split("\n")
    assert tail[1].strip().endswith("served to the session before it:")
    assert tail[-1].strip().startswith("since retracted or erased:")


def _hostile_policy(tmp_path: Path) -> Path:
    text = SUITE_DEFAULT_POLICY.read_text(encoding="utf-8")
    policy = tmp_path / "policy.toml"
    # Another space than the default, so a policy of its own (comments do not change a hash).
    text = text.replace('default_space = "org"', 'default_space = "team:hostile"')
    policy.write_text(f"# reviewed by \u202ecounsel\u202c, see [b]case[/b]\n{text}",
                      encoding="utf-8")
    return policy


def _adopt(path: Path, policy: Path) -> str:
    """A write under the policy: the ledger records it (and its text) with a `policy` event."""
    with Ledger.open(path, policy=policy, clock=ManualClock(FROZEN)) as led:
        return led.assert_fact("acct:9", "plan", "pro", actor="agent:support-bot",
                               cause={"kind": "tool", "ref": "crm#2"},
                               provenance="attested").fact_id


async def test_policy_text_on_integrity_keeps_its_lines(tmp_path: Path) -> None:
    from textual.widgets import DataTable

    policy = _hostile_policy(tmp_path)
    story = build_story(tmp_path / "t.db")
    _adopt(story.path, policy)
    app = app_on(story.path, policy=policy)
    async with app.run_test(size=(120, 60)) as pilot:
        await open_screen(pilot, "5")
        table = app.screen.query_one("#policies", DataTable)
        assert table.row_count
        await pilot.press("o")
        await idle(pilot)
        text = screen_text(app, "#policy_text")
        assert "\\x0a" not in text
        assert "# reviewed by \\u202ecounsel\\u202c, see [b]case[/b]" in text.split("\n")
        assert text.count("\n") > 20 and "\u202e" not in text


async def test_policy_text_on_the_fact_screen_keeps_its_lines(tmp_path: Path) -> None:
    policy = _hostile_policy(tmp_path)
    story = build_story(tmp_path / "t.db")
    fact = _adopt(story.path, policy)
    app = app_on(story.path, policy=policy)
    async with app.run_test(size=(120, 60)) as pilot:
        await idle(pilot)
        app.push_screen(FactScreen(app.access, fact))
        await idle(pilot)
        await pilot.press("o")
        await idle(pilot)
        text = screen_text(app, "#policy")
        lines = text.split("\n")
        assert "\\x0a" not in text and len(lines) > 20
        assert "# reviewed by \\u202ecounsel\\u202c, see [b]case[/b]" in lines
        assert "\u202e" not in text
