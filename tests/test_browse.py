"""The browsing reads the terminal app pages through: beliefs at any event agree with as_of,
pages concatenate to the whole, diffs mark what changed, queues and holds come oldest first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from custody_app.domain.errors import LedgerError
from custody_app.domain.timeutil import ManualClock
from custody_app.interfaces.tui.access import resolve_reviewer
from custody_app.ledger.facade import Ledger
from tests.tuikit import FROZEN, REVIEWER, WRITER, Story, build_story


@pytest.fixture
def story(ledger_at: Callable[[str], Any]) -> Story:
    return build_story(ledger_at("story.db"))


@pytest.fixture
def ledger(story: Story) -> Ledger:
    led = Ledger.open(story.path)
    yield led
    led.close()


def ids(page_facts: list) -> list[str]:  # type: ignore[type-arg]
    return [f.fact_id for f in page_facts]


@pytest.mark.parametrize("include", ["attested", "claimed"])
def test_beliefs_at_every_event_agree_with_as_of(ledger: Ledger, include: str) -> None:
    """At the last event of each transaction time, beliefs answer exactly what as_of does."""
    show = ["quarantined"] if include == "claimed" else []
    head = ledger.head_seq()
    assert head == 11
    for seq in range(1, head + 1):
        event = ledger.event_at(seq)
        assert event is not None and event.seq == seq
        for valid_at in (None, "2026-03-02T10:30:00Z"):
            last = ledger.seq_at(event.tx_at)
            page = ledger.beliefs(valid_at, at_seq=last, show=show, limit=500)
            want = ledger.as_of(valid_at, event.tx_at, include=include).facts
            assert ids(page.facts) == ids(want), (seq, valid_at)
            assert [f.status for f in page.facts] == [f.status for f in want]
            assert page.seq == last >= seq and page.tx_at == event.tx_at


def test_stepping_is_by_event_even_within_one_transaction_time(ledger: Ledger,
                                                               story: Story) -> None:
    """Seq 1 (policy), 2 and 3 (two asserts) share a tx time; each step shows one more."""
    assert ledger.event_at(2).tx_at == ledger.event_at(3).tx_at  # type: ignore[union-attr]
    assert ids(ledger.beliefs(at_seq=1).facts) == []
    assert ids(ledger.beliefs(at_seq=2).facts) == [story["plan"]]
    assert ids(ledger.beliefs(at_seq=3).facts) == [story["plan"], story["name"]]
    assert ledger.beliefs(at_seq=999).seq == ledger.head_seq()


def test_tx_at_jump_finds_the_last_event_learned_by_then(ledger: Ledger, story: Story) -> None:
    assert ledger.seq_at("2026-03-01T00:00:00Z") == 0
    assert ledger.seq_at(story.tx["plan2"]) == ledger.why(story["plan2"]).created_by.seq
    assert ledger.seq_at("2030-01-01T00:00:00Z") == ledger.head_seq()
    page = ledger.beliefs(tx_at=story.tx["region"])
    assert story["plan"] in ids(page.facts) and story["plan2"] not in ids(page.facts)
    with pytest.raises(LedgerError) as err:
        ledger.seq_at("yesterday")
    assert err.value.code == "invalid_time"


def test_pages_concatenate_to_the_whole(ledger_at: Callable[[str], Any]) -> None:
    story = build_story(ledger_at("big.db"), extra_facts=23)
    with Ledger.open(story.path) as led:
        whole = ids(led.beliefs(limit=500).facts)
        pages, after = [], 0
        while True:
            page = led.beliefs(after_seq=after, limit=5)
            pages += ids(page.facts)
            assert len(page.facts) <= 5
            if page.next_after is None:
                break
            after = page.next_after
        assert pages == whole and len(whole) == 4 + 23


def test_status_toggles_show_what_is_no_longer_believed(ledger: Ledger, story: Story) -> None:
    plain = ids(ledger.beliefs().facts)
    assert story["mistake"] not in plain and story["plan"] not in plain
    retracted = ledger.beliefs(show=["retracted"]).facts
    assert [f.status for f in retracted if f.fact_id == story["mistake"]] == ["retracted"]
    superseded = ledger.beliefs(show=["superseded"]).facts
    assert [f.status for f in superseded if f.fact_id == story["plan"]] == ["superseded"]
    claimed = ledger.beliefs(show=["quarantined"]).facts
    assert {story["claim"], story["claim2"]} <= set(ids(claimed))
    with pytest.raises(LedgerError) as err:
        ledger.beliefs(show=["deleted"])
    assert err.value.code == "bad_request" and "deleted" in err.value.message


def test_forgotten_toggle_and_values_erased_after_the_moment(ledger: Ledger,
                                                             story: Story) -> None:
    before = ledger.head_seq()
    ledger.forget(story["region"], actor="user:dpo", reason="subject_request")
    assert story["region"] not in ids(ledger.beliefs().facts)
    shown = {f.fact_id: f for f in ledger.beliefs(show=["forgotten"]).facts}
    assert shown[story["region"]].status == "forgotten" and shown[story["region"]].erased
    then = {f.fact_id: f for f in ledger.beliefs(at_seq=before).facts}
    assert then[story["region"]].value is None and then[story["region"]].erased
    assert then[story["region"]].change == "ended"


def test_diff_marks_added_ended_and_changed(ledger: Ledger, story: Story) -> None:
    seq = ledger.why(story["region"]).created_by.seq  # plan, name, region known then
    page = ledger.beliefs(at_seq=seq, diff=True)
    marks = {f.fact_id: f.change for f in page.facts}
    assert marks[story["plan"]] == "ended"  # superseded since
    assert marks[story["plan2"]] == "added" and marks[story["summary"]] == "added"
    assert marks[story["name"]] == "same" and marks[story["region"]] == "same"
    assert story["mistake"] not in marks  # added and retracted since: neither then nor now
    ledger.confirm(story["claim2"], actor=REVIEWER)  # region superseded by a confirmed claim
    marks = {f.fact_id: f.change for f in ledger.beliefs(at_seq=seq, diff=True).facts}
    assert marks[story["region"]] == "ended" and marks[story["claim2"]] == "added"
    before = ledger.head_seq()
    ledger.confirm(story["claim"], actor=REVIEWER)  # believed (claimed) then, active now
    changed = {f.fact_id: f for f in ledger.beliefs(at_seq=before, show=["quarantined"]).facts}
    assert changed[story["claim"]].change == "changed"
    assert (changed[story["claim"]].status, changed[story["claim"]].status_now) == (
        "quarantined", "active")


def test_salience_is_shown_for_facts_believed_now(ledger: Ledger, story: Story) -> None:
    facts = {f.fact_id: f for f in ledger.beliefs(show=["retracted"]).facts}
    assert facts[story["plan2"]].salience_class in ("hot", "warm", "cold")
    assert facts[story["mistake"]].salience_class is None


def test_review_queue_oldest_first_with_writer_cause_and_supersedes(ledger: Ledger,
                                                                    story: Story) -> None:
    queue = ledger.review_queue()
    assert [i.fact.fact_id for i in queue.items] == [story["claim"], story["claim2"]]
    first, second = queue.items
    assert first.writer == WRITER and first.cause.ref == "crm.lookup#1"
    assert first.supersedes is None
    assert second.supersedes is not None and second.supersedes.fact_id == story["region"]
    assert ledger.review_queue(limit=1).next_after == first.assert_seq
    assert [i.fact.fact_id for i in ledger.review_queue(after_seq=first.assert_seq).items] == [
        story["claim2"]]


def test_holds_say_who_and_why(ledger: Ledger, story: Story) -> None:
    [item] = ledger.holds().items
    assert item.fact.fact_id == story["name"]
    assert (item.held_by, item.reason) == ("user:counsel", "case 2026-114")


def test_erasure_preview_names_the_cascade_and_writes_nothing(ledger: Ledger,
                                                              story: Story) -> None:
    head = ledger.head_seq()
    preview = ledger.erasure_preview(story["plan2"])
    assert [f.fact_id for f in preview.facts] == [story["plan2"], story["summary"]]
    assert preview.held == []
    assert ledger.erasure_preview(story["name"]).held == [story["name"]]
    assert ledger.head_seq() == head


def test_status_and_policy_history(ledger: Ledger) -> None:
    s = ledger.status()
    assert s.events == 11 and s.policy_in_force == s.policy_recorded
    assert [p.seq for p in s.policy_history] == [1]
    assert s.counts["quarantined"] == 2 and s.db_bytes > 0
    assert ledger.policy_text(s.policy_in_force) is not None


def test_adopt_policy_records_a_policy_event_once(story: Story, tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text('default_space = "team:support"\n')
    with Ledger.open(story.path, policy=policy) as led:
        change = led.adopt_policy()
        assert change is not None and change.seq == 12 and change.hash == led.policy.hash
        assert led.adopt_policy() is None
        assert [p.seq for p in led.policy_history()] == [1, 12]
        assert led.verify().valid


def test_bad_page_size_is_refused(ledger: Ledger) -> None:
    for call in (lambda: ledger.beliefs(limit=0), lambda: ledger.review_queue(limit=501)):
        with pytest.raises(LedgerError) as err:
            call()
        assert err.value.code == "bad_request"


def test_reviewer_identity_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUSTODY_REVIEWER", raising=False)
    config = tmp_path / "config.toml"
    monkeypatch.setenv("CUSTODY_CONFIG", str(config))
    assert resolve_reviewer().startswith("user:")
    config.write_text('reviewer = "reviewer:dana"\n')
    assert resolve_reviewer() == "reviewer:dana"
    monkeypatch.setenv("CUSTODY_REVIEWER", "user:env")
    assert resolve_reviewer() == "user:env"
    assert resolve_reviewer("user:flag") == "user:flag"
    with pytest.raises(LedgerError) as err:
        resolve_reviewer("dana")
    assert err.value.code == "invalid_actor" and "--reviewer" in err.value.message
    config.write_text("reviewer = 3\n")
    monkeypatch.delenv("CUSTODY_REVIEWER")
    with pytest.raises(LedgerError) as err:
        resolve_reviewer()
    assert err.value.code == "config_invalid"


def test_retention_pages_through_spaces(story: Story, tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text('[retention.windows]\n"team:*" = "P1D"\n')
    with Ledger.open(story.path, policy=policy, clock=ManualClock(FROZEN)) as led:
        first = led.retention(limit=1)
        assert [s.space for s in first.spaces] == ["org"] and first.next_after == "org"
        assert first.spaces[0].window is None
        second = led.retention(after_space="org", limit=1)
        [team] = second.spaces
        assert (team.space, team.pattern, team.window) == ("team:support", "team:*", "P1D")
        assert team.cutoff == first.cutoffs["team:*"]
        assert led.retention(after_space="team:support").spaces == []
