"""The blast radius screen on the refund incident: fact -> sessions -> actions -> beliefs,
still-believed ones marked, incomplete sessions shown; the evidence pack exported from it."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static, Tree

from custody_app.domain.timeutil import ManualClock
from custody_app.evidence.packcheck import verify_pack
from custody_app.interfaces.batch import run_batch
from custody_app.keys.demo_receipts import bind_demo_receipts
from custody_app.ledger.facade import Ledger
from screens.blast import BlastScreen
from screens.fact import FactScreen
from tests.tuikit import app_on, idle, notes, open_screen

INCIDENT = Path(__file__).resolve().parent.parent / "sample_data" / "incident_refund.jsonl"


@pytest.fixture
def incident(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The incident replayed; returns the ledger and fact ids by the sample's op ids."""
    path = tmp_path / "incident.db"
    out = io.StringIO()
    policy = INCIDENT.with_name("demo_policy.toml")  # registers the sample's receipt issuers
    with Ledger.open(path, clock=ManualClock(), id_seed=3, policy=policy) as led:
        # The sample's receipts are signed for this ledger, as --demo does (DESIGN 14).
        run_batch(led, bind_demo_receipts(INCIDENT.read_text(), str(led.ledger_id)).splitlines(),
                  out)
    ids = {}
    for line in out.getvalue().splitlines():
        r = json.loads(line)
        if r["ok"] and r["op"] == "assert":
            ids[r["id"]] = r["result"]["fact_id"]
    return path, ids


def labels(node: Any) -> list[str]:
    out = [str(node.label)]
    for child in node.children:
        out += labels(child)
    return out


def walk(node: Any, depth: int = 0) -> list[tuple[int, str]]:
    out = [(depth, str(node.label))]
    for child in node.children:
        out += walk(child, depth + 1)
    return out


async def test_tree_from_fact_through_sessions_and_actions_to_beliefs(
        incident: tuple[Path, dict[str, str]]) -> None:
    path, ids = incident
    app = app_on(path)
    async with app.run_test(size=(170, 50), notifications=True) as pilot:
        await idle(pilot)
        app.push_screen(FactScreen(app.access, ids["wrong-plan"]))
        await idle(pilot)
        await pilot.press("b")
        await idle(pilot)
        assert isinstance(app.screen, BlastScreen)
        tree = app.screen.query_one("#tree", Tree)
        nodes = walk(tree.root)
        text = "\n".join(label for _, label in nodes)
        assert nodes[0][1].startswith(f"root {ids['wrong-plan']} acct:4520 plan [retracted]")
        sessions = [label for depth, label in nodes if depth == 1 and label.startswith("session")]
        assert any("sess_0401_umbrella" in s for s in sessions)
        assert any("sess_0401_billing" in s for s in sessions)
        # the nightly summariser wrote only after the retraction: ruled out, not INCOMPLETE
        assert not any("INCOMPLETE" in s for s in sessions)
        assert "sess_0401_hooli" not in text and ids["hooli-belief"] not in text
        umbrella = next(n for n in tree.root.children if "sess_0401_umbrella" in str(n.label))
        under = labels(umbrella)
        assert any("action " in u and "RF-2026-0412" in u for u in under)
        eligible = next(u for u in under if ids["belief-eligible"] in u)
        assert "written in session sess_0401_umbrella" in eligible
        assert "STILL BELIEVED" in text
        with Ledger.open(path, readonly=True) as led:
            radius = led.blast(ids["wrong-plan"])
        believed = {f.fact_id for f in radius.facts if f.believed}
        for f in radius.facts:  # every reached belief is in the tree, marked as the API says
            line = next(label for _, label in nodes if f.fact_id in label
                        and label.startswith("fact"))
            assert ("STILL BELIEVED" in line) == (f.fact_id in believed)
        summary = str(app.screen.query_one("#summary", Static).render())
        # the same counts as the CLI's text (issue 32: the app said 3 sessions, the CLI 2)
        assert radius.counts() in summary.replace("\n", " ")
        assert "2 session(s) read it, 0 could have (INCOMPLETE)" in summary
        assert "upper bound" in str(app.screen.query_one("#bound", Static).render())
        await pilot.press("e")
        await idle(pilot)
        pack = path.parent / f"pack-{ids['wrong-plan']}.json"
        assert any(str(pack) in n for n in notes(app)), notes(app)
        report = verify_pack(pack.read_text(), _public_pem(path))
        assert report.valid, report
        await pilot.press("escape")
        await idle(pilot)
        assert isinstance(app.screen, FactScreen)


def _public_pem(path: Path) -> str:
    with Ledger.open(path, readonly=True) as led:
        assert led.keys is not None
        return led.keys.public_pem()


async def test_blast_mode_takes_a_typed_fact_id_and_refuses_an_unknown_one(
        incident: tuple[Path, dict[str, str]]) -> None:
    path, ids = incident
    app = app_on(path)
    async with app.run_test(size=(170, 50), notifications=True) as pilot:
        await open_screen(pilot, "6")
        assert isinstance(app.screen, BlastScreen)
        # Keys work on arrival (no trap); `/` is how a user chooses to type an id.
        assert app.screen.focused is app.screen.query_one("#tree", Tree)
        await pilot.press("slash", *"f_nothing", "enter")
        await idle(pilot)
        assert any("(unknown_fact)" in n for n in notes(app))
        await pilot.press("slash", "ctrl+a", "ctrl+k", *ids["sla-deadline"], "enter")
        await idle(pilot)
        root = str(app.screen.query_one("#tree", Tree).root.label)
        assert root.startswith(f"root {ids['sla-deadline']}")


async def test_incomplete_session_says_why_it_could_have_read_it_within_80_columns(
        tmp_path: Path) -> None:
    """Since the blast radius keeps only sessions that could have read the fact, an INCOMPLETE
    session is one with no recorded reads that wrote or acted about its subject or in its space
    while it was believed: the tree says that (not "wrote with no recorded reads"), in lines that
    fit an 80-column terminal."""
    from datetime import timedelta

    from tests.tuikit import CAUSE, T0, WRITER

    path = tmp_path / "possible.db"
    clock = ManualClock(T0)
    with Ledger.open(path, clock=clock, id_seed=5) as led:
        root = led.assert_fact("acct:1", "plan", "gold", actor=WRITER, cause=CAUSE,
                               space="team:a").fact_id
        clock.set(T0 + timedelta(hours=1))
        led.assert_fact("acct:1", "note", "same subject", actor=WRITER, cause=CAUSE,
                        space="org", session="s_subject")
        led.act("s_act", "crm.update", "CRM-1", "ok", actor="agent:x", subject="acct:1")
        assert led.blast(root).incomplete_sessions == ["s_act", "s_subject"]
    app = app_on(path)
    async with app.run_test(size=(80, 24)) as pilot:
        await idle(pilot)
        app.push_screen(BlastScreen(app.access, root, fact_screen=FactScreen))
        await idle(pilot)
        tree = app.screen.query_one("#tree", Tree)
        sessions = [n for n in tree.root.children if str(n.label).startswith("session")]
        assert len(sessions) == 2
        for node in sessions:
            assert str(node.label).endswith("INCOMPLETE: no recorded reads")
            assert [str(c.label) for c in node.children][0] == (
                "wrote or acted about its subject or space while it was believed")
        text = "\n".join(label for _, label in walk(tree.root))
        assert "wrote with no recorded reads" not in text
        # every line about an INCOMPLETE session fits the tree's width (guides: 4 a level)
        for node in sessions:
            for depth, line in ((1, node.label), (2, node.children[0].label)):
                assert 4 * depth + len(str(line)) <= tree.size.width, (line, tree.size.width)
