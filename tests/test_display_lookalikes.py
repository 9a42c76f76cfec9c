"""A lookalike identifier a ledger written before the door refused invisible characters still
holds (actor `agent:support-bot\\u2060`, subject `acct:1042\\u200b`) is shown as one in every
human-readable output: the CLI's `beliefs`, `show`, `why`, `history` and `queue` text and the
terminal app's review queue write the invisible character as an escape, never raw, while a
value's emoji ZWJ and a reason's Persian ZWNJ display as written and `--json` carries the
stored string unchanged. On a SQLite file and on a PostgreSQL server.

The ledger is written the way tests/test_stored_invisible_identifiers.py writes one: through the
product, under the door as it was before (no hand edit of the chain)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from textual.widgets import DataTable

from custody_app import Ledger
from custody_app.domain.escaping import escaped
from custody_app.domain.readmodels import EventView
from screens.review import ReviewScreen
from tests.test_stored_invisible_identifiers import (
    ACTOR,
    LOOKALIKE,
    RAW,
    door_before_invisible_characters,
    run,
)
from tests.tuikit import app_on, cell_texts, idle, keys

SHOWN_ACTOR = "agent:support-bot\\u2060"
SHOWN_SUBJECT = "acct:1042\\u200b"
SESSION = "s-1\ufeff"
SHOWN_SESSION = "s-1\\ufeff"
EMOJI = "\U0001f469\u200d\U0001f4bb dev"  # woman technologist: a ZWJ sequence
REASON = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"  # Persian, with a ZWNJ
CAUSE = {"kind": "tool", "ref": "crm#1"}


def plant(path: str) -> dict[str, str]:
    """A confirmed fact (an emoji value, a Persian reason) and two claims waiting, all about
    the lookalike subject by the lookalike actor, and a claim by the real actor."""
    with Ledger.open(path) as led:
        with door_before_invisible_characters():
            team = led.assert_fact(LOOKALIKE, "team", EMOJI, actor=ACTOR, cause=CAUSE,
                                   provenance="claimed", session=SESSION).fact_id
            led.confirm(team, actor="user:op", reason=REASON)
            ids = {"team": team, **{
                name: led.assert_fact(LOOKALIKE, predicate, EMOJI, actor=ACTOR, cause=CAUSE,
                                      provenance="claimed").fact_id
                for name, predicate in (("claim", "plan"), ("claim2", "tier"))}}
        ids["real"] = led.assert_fact("acct:7", "plan", "gold", actor="agent:support-bot",
                                      cause=CAUSE, provenance="claimed").fact_id
        assert led.verify().valid
    return ids


def _text(path: str, *args: str) -> str:
    done = run(*args, "--ledger", path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any(char in done.stdout for char in RAW), done.stdout  # never raw
    return done.stdout


def _json(path: str, *args: str) -> Any:
    done = run(*args, "--ledger", path, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_beliefs_text_escapes_the_lookalike_json_keeps_it(address: str) -> None:
    ids = plant(address)
    text = _text(address, "beliefs")
    assert f'{ids["team"]}  {SHOWN_SUBJECT} team = "{EMOJI}"' in text  # the value as written
    [fact] = _json(address, "beliefs")["facts"]
    assert (fact["subject"], fact["actor"], fact["value"]) == (LOOKALIKE, ACTOR, EMOJI)


@pytest.mark.parametrize("command", ["show", "why"])
def test_the_story_escapes_identifiers_and_keeps_the_value_and_reason(
        address: str, command: str) -> None:
    ids = plant(address)
    text = _text(address, command, ids["team"])
    assert f'{ids["team"]}: {SHOWN_SUBJECT} team = "{EMOJI}"' in text
    assert f"written by {SHOWN_ACTOR} at" in text and f"in session {SHOWN_SESSION}" in text
    assert 'confirm by user:op at' in text and f': "{REASON}"' in text  # the ZWNJ kept
    why = _json(address, command, ids["team"])
    assert (why["actor"], why["session"], why["fact"]["subject"]) == (ACTOR, SESSION, LOOKALIKE)
    assert why["reviews"][0]["reason"] == REASON and why["fact"]["value"] == EMOJI


def test_history_escapes_the_actor_and_session_and_keeps_the_value_and_reason(
        address: str) -> None:
    ids = plant(address)
    text = _text(address, "history", ids["team"])
    assert f"by {SHOWN_ACTOR}  value \"{EMOJI}\"" in text
    assert f"session {SHOWN_SESSION}" in text and f"reason {REASON}" in text
    events = _json(address, "history", ids["team"])["events"]
    assert (events[0]["actor"], events[0]["session"], events[0]["subject"]) == (
        ACTOR, SESSION, LOOKALIKE)
    assert events[-1]["reason"] == REASON


def test_queue_text_tells_the_lookalike_writer_from_the_real_one(address: str) -> None:
    ids = plant(address)
    text = _text(address, "queue")
    assert f"by writer: {SHOWN_ACTOR} 2, agent:support-bot 1" in text
    assert f'{ids["claim"]}  {SHOWN_SUBJECT} plan = "{EMOJI}"' in text
    assert f"      by {SHOWN_ACTOR} at" in text
    queue = _json(address, "queue")
    assert queue["by_writer"] == {ACTOR: 2, "agent:support-bot": 1}
    assert [(i["writer"], i["fact"]["subject"]) for i in queue["items"][:2]] == [
        (ACTOR, LOOKALIKE)] * 2


def test_escaped_escapes_identifier_fields_only() -> None:
    event = EventView.model_validate({
        "seq": 1, "event_id": "e", "kind": "assert", "tx_at": "t", "actor": ACTOR,
        "policy_hash": "h", "session": SESSION, "reason": REASON,
        "cause": {"kind": "tool", "ref": "crm\u200b"},
        "value": {"subject": EMOJI, "actor": [REASON]}})
    shown = escaped(event)
    assert (shown.actor, (shown.model_extra or {})["session"]) == (SHOWN_ACTOR, SHOWN_SESSION)
    extra = shown.model_extra or {}
    assert extra["cause"] == {"kind": "tool", "ref": "crm\\u200b"}
    # A value is data whatever its keys are called; a reason is free text.
    assert extra["value"] == {"subject": EMOJI, "actor": [REASON]} and extra["reason"] == REASON
    assert escaped(ACTOR, markup=True, field="writer") == SHOWN_ACTOR
    assert escaped(ACTOR) == ACTOR  # a string held under no identifier's name: as stored


async def test_the_review_queue_shows_the_lookalike_escaped_and_marks_by_it(
        address: str) -> None:
    ids = plant(address)
    app = app_on(address)
    async with app.run_test(size=(200, 40)) as pilot:
        await idle(pilot)
        await pilot.press("2")
        await idle(pilot)
        screen = app.screen
        assert isinstance(screen, ReviewScreen)
        table = screen.query_one("#queue", DataTable)
        assert keys(table) == [ids["claim"], ids["claim2"], ids["real"]]
        row = cell_texts(table, ids["claim"])
        shown = " ".join(row)
        assert SHOWN_ACTOR in row and SHOWN_SUBJECT in row
        assert not any(char in shown for char in RAW)
        assert "\U0001f469\u200d\U0001f4bb" in shown  # the value's ZWJ as written
        await pilot.press("w")  # mark by the writer under the cursor: the lookalike's claims
        await idle(pilot)
        assert screen.marked == {ids["claim"], ids["claim2"]}
