"""A review decision names what the reviewer saw (DESIGN 14, issue 31): confirming or
rejecting a pending retraction names the retraction's event, on every surface (API, batch,
CLI); `queue` and `show` list pending retractions with the command that reviews that one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from custody_app.domain.errors import LedgerError
from tests.conftest import Env, day

AGENT = "agent:bot"
HUMAN = "user:dana"
REVIEWER = "user:rev"
OTHER_REVIEWER = "user:kim"


def pending(env: Env, fact_id: str, reason: str) -> str:
    """A retraction of `fact_id` by an agent whose writes are claimed: it waits; its event id."""
    done = env.ledger.retract(fact_id, actor=AGENT, reason=reason, provenance="claimed")
    assert done.pending and done.status == "active"
    return done.event_id


def test_a_confirm_applies_to_the_retraction_read_never_a_newer_one(env: Env) -> None:
    """Asset 'a review decision': the reviewer read retraction A; meanwhile A was discarded and
    the agent filed B. Confirming A carried out B. Now it is refused, naming B, unchanged."""
    theirs = env.put(value="pro", actor=HUMAN, provenance="verified")
    first = pending(env, theirs, "duplicate row")
    env.at(day(2))
    env.ledger.reject(theirs, actor=OTHER_REVIEWER, reason="not a duplicate",
                      retraction_event=first)
    second = pending(env, theirs, "customer left")
    before = env.snapshot()
    with pytest.raises(LedgerError) as refused:
        env.ledger.confirm(theirs, actor=REVIEWER, retraction_event=first)
    assert refused.value.code == "retraction_not_pending"
    assert first in refused.value.message and second in refused.value.message
    assert env.snapshot() == before and env.status(theirs) == "active"
    done = env.ledger.confirm(theirs, actor=REVIEWER, retraction_event=second)
    assert done.status == "retracted"
    body = json.loads(env.ledger.db.events.get(done.seq).body)  # type: ignore[union-attr]
    assert body["retraction"] == env.ledger.history(theirs).events[-2].seq


def test_a_review_naming_an_event_that_is_no_retraction_of_the_fact_is_refused(env: Env) -> None:
    theirs = env.put(value="pro", actor=HUMAN, provenance="verified")
    other = env.put(subject="acct:7", value="basic", actor=HUMAN, provenance="verified")
    mine = pending(env, theirs, "wrong")
    elsewhere = pending(env, other, "wrong too")
    assert_event = env.ledger.history(theirs).events[0].event_id
    before = env.snapshot()
    for named in (elsewhere, assert_event, "0" * 64):
        for review in (lambda n=named: env.ledger.confirm(theirs, actor=REVIEWER, retraction_event=n),
                       lambda n=named: env.ledger.reject(theirs, actor=REVIEWER, reason="no",
                                                         retraction_event=n)):
            with pytest.raises(LedgerError) as refused:
                review()
            assert refused.value.code == "retraction_not_pending", refused.value.message
    assert env.snapshot() == before
    assert env.ledger.reject(theirs, actor=REVIEWER, reason="no", retraction_event=mine).status \
        == "active"


def _cli(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "custody_app", *args, "--ledger", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_cli_queue_show_confirm_and_reject_work_on_pending_retractions(env: Env) -> None:
    """`confirm` on a pending retraction answered `not_quarantined`, and neither `queue` nor
    `show` said a retraction was waiting."""
    theirs = env.put(value="pro", actor=HUMAN, provenance="verified")
    kept = env.put(subject="acct:7", value="basic", actor=HUMAN, provenance="verified")
    event = pending(env, theirs, "the customer downgraded")
    other_event = pending(env, kept, "typo")
    env.ledger.close()
    queue = _cli(env.path, "queue")
    assert queue.returncode == 0, queue.stderr
    assert queue.stdout.count("RETRACTION PENDING") == 2
    assert f'RETRACTION PENDING of {theirs}  acct:42 plan = "pro"' in queue.stdout
    assert "asked by agent:bot" in queue.stdout and "the customer downgraded" in queue.stdout
    assert f"custody-app confirm {theirs} --retraction {event}" in queue.stdout
    listed = json.loads(_cli(env.path, "queue", "--json").stdout)["retractions"]
    assert {(r["fact"]["fact_id"], r["event_id"]) for r in listed} == {(theirs, event),
                                                                      (kept, other_event)}
    shown = _cli(env.path, "show", theirs)
    assert "RETRACTION PENDING" in shown.stdout and event in shown.stdout
    # Naming only the fact is refused: the decision must name the retraction read.
    unnamed = _cli(env.path, "confirm", theirs, "--actor", REVIEWER)
    assert unnamed.returncode != 0 and "retraction_not_named" in unnamed.stderr
    assert f"--retraction {event}" in unnamed.stderr
    wrong = _cli(env.path, "confirm", theirs, "--actor", REVIEWER, "--retraction", other_event)
    assert wrong.returncode != 0 and "retraction_not_pending" in wrong.stderr
    done = _cli(env.path, "confirm", theirs, "--actor", REVIEWER, "--retraction", event)
    assert done.returncode == 0, done.stderr
    assert "confirmed the retraction" in done.stdout and "retracted" in done.stdout
    rejected = _cli(env.path, "reject", kept, "--actor", REVIEWER, "--retraction", other_event,
                    "--reason", "a typo is no reason", "--json")
    assert rejected.returncode == 0, rejected.stderr
    assert json.loads(rejected.stdout)["status"] == "active"
    assert "RETRACTION PENDING" not in _cli(env.path, "queue").stdout
    env.reopen()
    assert env.status(theirs) == "retracted" and env.status(kept) == "active"


def test_batch_review_names_the_retraction_event(env: Env, tmp_path: Path) -> None:
    theirs = env.put(value="pro", actor=HUMAN, provenance="verified")
    event = pending(env, theirs, "wrong")
    env.ledger.close()
    ops = [{"op": "confirm", "id": "stale", "fact_id": theirs, "actor": REVIEWER,
            "retraction_event": "f" * 64},
           {"op": "confirm", "id": "bound", "fact_id": theirs, "actor": REVIEWER,
            "retraction_event": event}]
    run = subprocess.run([sys.executable, "-m", "custody_app", "--batch", "-", "--ledger",
                          str(env.path)], input="\n".join(json.dumps(o) for o in ops) + "\n",
                         capture_output=True, text=True, timeout=120, check=False)
    out: list[dict[str, Any]] = [json.loads(line) for line in run.stdout.splitlines()]
    assert (out[0]["ok"], out[0]["error"]["code"]) == (False, "retraction_not_pending")
    assert out[1]["ok"] and out[1]["result"]["status"] == "retracted"
    env.reopen()
