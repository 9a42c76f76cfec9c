"""Bitemporal reads (DESIGN sections 5 and 10), and the SQL path against the pure fold."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from custody_app.domain import timeutil
from custody_app.domain.errors import LedgerError
from custody_app.domain.fold import fold_as_of
from custody_app.domain.readmodels import FactView
from custody_app.domain.timeutil import ManualClock, format_time, parse_time
from custody_app.ledger.facade import Ledger
from tests.conftest import REVIEWER, T0, WRITER, Env, day


def ids(env: Env, **query: Any) -> list[str]:
    return [f.fact_id for f in env.ledger.as_of(**query).facts]


def only(env: Env, **query: Any) -> FactView:
    [fact] = env.ledger.as_of(**query).facts
    return fact


def shift(moment: str, **delta: float) -> str:
    return format_time(parse_time(moment) + timedelta(**delta))


# ---- valid time and transaction time ----------------------------------------------------

def test_fact_learned_late_is_absent_as_the_ledger_knew_it_then(env: Env) -> None:
    env.at(day(5))
    fact = env.put(valid_from=day(1))
    assert ids(env, valid_at=day(3), tx_at=day(3)) == []
    assert ids(env, valid_at=day(3)) == [fact]
    # Transaction time is inclusive: at the very tx_at of the assert it is known.
    assert ids(env, valid_at=day(3), tx_at=day(5)) == [fact]
    assert ids(env, valid_at=day(3), tx_at=shift(day(5), microseconds=-1)) == []
    # Valid time starts at valid_from, inclusive.
    assert ids(env, valid_at=day(1)) == [fact]
    assert ids(env, valid_at=shift(day(1), microseconds=-1)) == []


def test_valid_from_defaults_to_transaction_time(env: Env) -> None:
    env.at(day(2))
    fact = env.put()
    assert only(env).valid_from == day(2)
    assert ids(env, valid_at=shift(day(2), microseconds=-1)) == []
    assert ids(env, valid_at=day(2)) == [fact]


def test_future_fact(env: Env) -> None:
    fact = env.put(valid_from=day(10))
    assert ids(env) == []
    assert ids(env, valid_at=day(10)) == [fact]


def test_valid_interval_is_half_open(env: Env) -> None:
    fact = env.put(valid_from=day(1), valid_to=day(3))
    assert ids(env, valid_at=shift(day(3), microseconds=-1)) == [fact]
    assert ids(env, valid_at=day(3)) == []
    assert only(env, valid_at=day(2)).valid_to == day(3)


def test_times_with_offsets_are_normalised_to_utc(env: Env) -> None:
    fact = env.put(valid_from="2026-09-01T02:00:00+02:00")
    assert only(env, valid_at="2026-09-01T00:00:00Z").valid_from == day(1)
    assert ids(env, valid_at="2026-09-01T01:59:59.999999+02:00") == []
    assert ids(env, valid_at="2026-09-01T00:00:00Z") == [fact]


def test_naive_time_is_refused(env: Env) -> None:
    try:
        env.ledger.as_of(valid_at="2026-09-01T00:00:00")
    except LedgerError as exc:
        assert exc.code == "invalid_time"
    else:
        raise AssertionError("a time without a zone was accepted")


def test_normalise_cached_answers_what_parsing_afresh_answers_and_names_the_field() -> None:
    # normalise keeps recent answers (a group validates one tx_at thousands of times): each
    # answer, the second time too, is the fresh parse's; a refusal, asked twice, names the
    # field each time (a cache must not keep the first caller's message).
    for text in ("2026-09-01T02:00:00+02:00", "2026-09-01T00:00:00Z", " 2026-09-01T00:00:00.5Z",
                 "0999-01-01T00:00:00Z", "2026-09-01T00:00:00-00:30"):
        fresh = timeutil.format_time(timeutil.parse_time(text))
        assert timeutil.normalise(text) == fresh and timeutil.normalise(text) == fresh
    for field in ("tx_at", "valid_at"):
        for bad in ("2026-09-01T00:00:00", "next tuesday", 20260901):
            with pytest.raises(LedgerError) as err:
                timeutil.normalise(bad, field)  # type: ignore[arg-type]
            assert err.value.code == "invalid_time" and field in err.value.message


# ---- quarantine as of a moment ----------------------------------------------------------

def test_confirmed_fact_is_still_quarantined_as_of_before_its_confirm(env: Env) -> None:
    fact = env.put(provenance="claimed")
    env.at(day(3))
    env.ledger.confirm(fact, actor=REVIEWER)
    before = shift(day(3), microseconds=-1)
    assert ids(env, valid_at=day(2), tx_at=before) == []
    then = only(env, valid_at=day(2), tx_at=before, include="claimed")
    assert (then.fact_id, then.status, then.provenance) == (fact, "quarantined", "claimed")
    now = only(env, valid_at=day(2), tx_at=day(3))
    assert (now.fact_id, now.status, now.provenance) == (fact, "active", "attested")
    assert ids(env, valid_at=day(2), include="verified") == []


def test_retracted_fact_is_believed_as_of_before_the_retraction(env: Env) -> None:
    fact = env.put()
    env.at(day(3))
    env.ledger.retract(fact, actor=WRITER, reason="wrong")
    assert ids(env, valid_at=day(2), tx_at=day(2)) == [fact]
    assert ids(env, valid_at=day(2), tx_at=day(3)) == []


def test_rejected_fact_vanishes_from_claimed_reads_at_the_reject(env: Env) -> None:
    fact = env.put(provenance="claimed")
    env.at(day(3))
    env.ledger.reject(fact, actor=REVIEWER, reason="no")
    assert ids(env, valid_at=day(2), tx_at=day(2), include="claimed") == [fact]
    assert ids(env, valid_at=day(2), include="claimed") == []


# ---- supersession -----------------------------------------------------------------------

def test_supersession_ends_validity_at_the_replacements_valid_from(env: Env) -> None:
    old = env.put(valid_from=day(1))
    env.at(day(5))
    new = env.put(value="pro", supersedes=old, valid_from=day(10))
    before = only(env, valid_at=day(9))
    assert (before.fact_id, before.status, before.valid_to) == (old, "superseded", day(10))
    assert ids(env, valid_at=shift(day(10), microseconds=-1)) == [old]
    assert ids(env, valid_at=day(10)) == [new]
    # As the ledger knew it before the replacement, the old fact was open-ended and active.
    then = only(env, valid_at=day(12), tx_at=day(4))
    assert (then.fact_id, then.status, then.valid_to) == (old, "active", None)


def test_supersession_keeps_an_earlier_own_valid_to(env: Env) -> None:
    old = env.put(valid_from=day(1), valid_to=day(4))
    env.at(day(2))
    new = env.put(value="pro", supersedes=old, valid_from=day(6))
    assert only(env, valid_at=day(3)).valid_to == day(4)
    assert ids(env, valid_at=day(5)) == []
    assert ids(env, valid_at=day(6)) == [new]


def test_supersession_from_the_same_instant_hides_the_old_fact_entirely(env: Env) -> None:
    old = env.put(valid_from=day(1))
    env.at(day(2))
    new = env.put(value="pro", supersedes=old, valid_from=day(1))
    assert ids(env, valid_at=day(1)) == [new]
    assert ids(env, valid_at=day(1), tx_at=day(1)) == [old]


def test_pending_replacement_for_claimed_reads_at_once_for_default_from_confirm(env: Env) -> None:
    old = env.put(valid_from=day(1))
    env.at(day(5))
    pending = env.put(value="pro", supersedes=old, valid_from=day(6), provenance="claimed")
    # Default reads: the replacement is invisible and does not cut the old fact.
    default = only(env, valid_at=day(7))
    assert (default.fact_id, default.status, default.valid_to) == (old, "active", None)
    # Claimed reads: the supersession holds at once.
    assert ids(env, valid_at=day(7), include="claimed") == [pending]
    claimed = only(env, valid_at=day(5.5), include="claimed")
    assert (claimed.fact_id, claimed.status, claimed.valid_to) == (old, "superseded", day(6))
    env.at(day(8))
    env.ledger.confirm(pending, actor=REVIEWER)
    confirmed = only(env, valid_at=day(7))
    assert (confirmed.fact_id, confirmed.status, confirmed.provenance) == (
        pending, "active", "attested")
    assert only(env, valid_at=day(5.5)).valid_to == day(6)
    # Before the confirm, default reads still see the old picture.
    assert ids(env, valid_at=day(7), tx_at=shift(day(8), microseconds=-1)) == [old]
    assert ids(env, valid_at=day(7), tx_at=day(7), include="claimed") == [pending]


def test_retracted_replacement_restores_validity_from_the_retraction_on(env: Env) -> None:
    old = env.put(valid_from=day(1))
    env.at(day(2))
    new = env.put(value="pro", supersedes=old, valid_from=day(2))
    env.at(day(3))
    env.ledger.retract(new, actor=WRITER, reason="misheard")
    assert ids(env, valid_at=day(5), tx_at=day(2)) == [new]
    restored = only(env, valid_at=day(5))
    assert (restored.fact_id, restored.status, restored.valid_to) == (old, "active", None)


# ---- include and order ------------------------------------------------------------------

def test_include_levels(env: Env) -> None:
    claimed = env.put("acct:1", provenance="claimed")
    attested = env.put("acct:2", provenance="attested")
    verified = env.put("acct:3", provenance="verified")
    assert ids(env, include="claimed") == [claimed, attested, verified]
    assert ids(env) == [attested, verified]
    assert ids(env, include="attested") == [attested, verified]
    assert ids(env, include="verified") == [verified]
    assert {f.provenance for f in env.ledger.as_of(include="verified").facts} == {"verified"}


def test_results_come_in_first_assert_order(env: Env) -> None:
    order = [env.put(subject) for subject in ("acct:9", "acct:1", "acct:5", "acct:3")]
    assert ids(env) == order
    # A replacement takes the place of its own assert, not that of the fact it replaced.
    env.at(day(2))
    replacement = env.put("acct:9", value="pro", supersedes=order[0])
    assert ids(env) == [*order[1:], replacement]


def test_filters(env: Env) -> None:
    a = env.put("acct:1", "plan", space="team:a")
    b = env.put("acct:1", "tier", space="team:b")
    c = env.put("acct:2", "plan")
    assert ids(env, subject="acct:1") == [a, b]
    assert ids(env, predicate="plan") == [a, c]
    assert ids(env, space="team:b") == [b]
    assert ids(env, space="org") == [c]
    assert ids(env, subject="acct:1", predicate="plan") == [a]
    assert ids(env, limit=2) == [a, b]


def test_as_of_fields(env: Env) -> None:
    fact = env.put("acct:7", "plan", {"name": "pro", "seats": 3}, space="team:support",
                   valid_from=day(1), valid_to=day(9))
    view = only(env)
    assert view.model_dump() == {
        "fact_id": fact, "subject": "acct:7", "predicate": "plan",
        "value": {"name": "pro", "seats": 3}, "space": "team:support", "status": "active",
        "provenance": "attested", "valid_from": day(1), "valid_to": day(9), "actor": WRITER,
        "erased": False,
    }


# ---- history and why --------------------------------------------------------------------

def test_history_includes_the_superseding_assert(env: Env) -> None:
    old = env.put(provenance="claimed")
    env.at(day(2))
    env.ledger.confirm(old, actor=REVIEWER)
    env.at(day(3))
    new = env.put(value="pro", supersedes=old)
    env.ledger.affirm(new, actor=WRITER)
    history = env.ledger.history(old)
    assert history.status == "superseded"
    assert [(e.kind, e.actor) for e in history.events] == [
        ("assert", WRITER), ("confirm", REVIEWER), ("assert", WRITER)]
    assert [e.seq for e in history.events] == sorted(e.seq for e in history.events)
    assert history.events[0].model_extra is not None
    assert history.events[0].model_extra["value"] == "basic"
    assert history.events[2].model_extra["fact_id"] == new
    assert history.events[2].model_extra["supersedes"] == old


def test_why(env: Env) -> None:
    src = env.put("acct:1", "email", "a@example.org")
    a = env.put("acct:1", "plan", "basic", valid_from=day(1))
    env.at(day(2))
    cause = {"kind": "tool", "ref": "call-17", "detail": "billing lookup"}
    b = env.ledger.assert_fact("acct:1", "plan", "pro", actor=WRITER, cause=cause,
                               supersedes=a, sources=[src], session="sess-9",
                               valid_from=day(2)).fact_id
    env.at(day(3))
    env.ledger.confirm(b, actor=REVIEWER, reason="invoice seen")
    c = env.put("acct:1", "plan", "enterprise", supersedes=b, valid_from=day(3))
    d = env.put("acct:1", "tier", "gold", sources=[b])

    why = env.ledger.why(b)
    assert why.fact.fact_id == b and why.fact.status == "superseded"
    assert why.fact.provenance == "attested" and why.fact.valid_to == day(3)
    assert why.created_by.kind == "assert" and why.created_by.tx_at == day(2)
    assert why.created_by.event_id == env.ledger.events()[why.created_by.seq - 1].hash
    assert why.actor == WRITER
    assert why.cause.model_dump() == cause
    assert why.session == "sess-9"
    assert why.llm is None
    assert [s.fact_id for s in why.sources] == [src]
    assert [d_.fact_id for d_ in why.dependents] == [d]
    assert [f.fact_id for f in why.supersedes] == [a]
    assert [f.fact_id for f in why.superseded_by] == [c]
    assert [(r.kind, r.actor, r.reason, r.tx_at) for r in why.reviews] == [
        ("confirm", REVIEWER, "invoice seen", day(3))]
    assert why.policy.hash == env.ledger.policy.hash
    assert why.policy.canonical == env.ledger.policy.canonical
    assert why.events_verified is True

    # The chain both ways from its ends.
    assert [f.fact_id for f in env.ledger.why(a).superseded_by] == [b, c]
    assert [f.fact_id for f in env.ledger.why(c).supersedes] == [b, a]
    assert env.ledger.why(c).superseded_by == []


def test_why_shows_retraction_and_rejection(env: Env) -> None:
    fact = env.put(provenance="claimed")
    env.ledger.reject(fact, actor=REVIEWER, reason="no evidence")
    assert [(r.kind, r.reason) for r in env.ledger.why(fact).reviews] == [
        ("reject", "no evidence")]


def test_history_and_why_of_unknown_fact(env: Env) -> None:
    for call in (env.ledger.history, env.ledger.why):
        try:
            call("f_nope")
        except LedgerError as exc:
            assert exc.code == "unknown_fact"
        else:
            raise AssertionError("an unknown fact was explained")


# ---- the SQL path against the pure fold -------------------------------------------------

SUBJECTS = ("acct:1", "acct:2", "acct:3")
PREDICATES = ("plan", "email")
PROVENANCES = ("claimed", "attested", "verified")
WRITERS = ("agent:a", "agent:b", REVIEWER)
# Valid times and clock steps on an hour grid so they often coincide exactly.
offsets = st.none() | st.integers(-72, 72)

assert_op = st.tuples(st.just("assert"), st.sampled_from(SUBJECTS), st.sampled_from(PREDICATES),
                      st.sampled_from(PROVENANCES), offsets, st.none() | st.integers(1, 96),
                      st.sampled_from(WRITERS))
# Negative targets count from the newest fact, so chains (A <- B <- C) and retractions in their
# middle come up often.
targets = st.integers(-3, -1) | st.integers(0, 50)
supersede_op = st.tuples(st.just("supersede"), targets, st.sampled_from(PROVENANCES),
                         st.none() | st.integers(-2, 48), st.none() | st.integers(1, 96),
                         st.integers(0, 9))
fact_op = st.tuples(st.sampled_from(["retract", "reject", "confirm", "confirm"]), targets)
tick_op = st.tuples(st.just("tick"), st.sampled_from([0, 0, 1, 1, 2, 24]))
ops_strategy = st.lists(st.one_of(assert_op, supersede_op, supersede_op, fact_op, tick_op),
                        min_size=6, max_size=50)


def _iso(moment_hours: float) -> str:
    return format_time(T0 + timedelta(hours=moment_hours))


def _run(ledger: Ledger, clock: ManualClock, ops: list[tuple[Any, ...]]) -> None:
    """Apply the ops; whatever the ledger refuses is skipped (and must leave it unchanged)."""
    hours = 0
    facts: list[tuple[str, str, str, str]] = []  # (fact_id, subject, predicate, valid_from)
    claimed: list[str] = []  # reviews mostly aim at claimed facts, or few would be legal
    for n, op in enumerate(ops):
        cause = {"kind": "message", "ref": f"m{n}"}
        count = ledger.db.events.count()
        try:
            if op[0] == "tick":
                hours += op[1]
                clock.set(T0 + timedelta(hours=hours))
            elif op[0] == "assert":
                _, subject, predicate, prov, vf, length, actor = op
                kwargs: dict[str, Any] = {}
                if vf is not None:
                    kwargs["valid_from"] = _iso(hours + vf)
                if length is not None:
                    kwargs["valid_to"] = _iso(hours + (vf or 0) + length)
                r = ledger.assert_fact(subject, predicate, n, actor=actor, cause=cause,
                                       provenance=prov, **kwargs)
                facts.append((r.fact_id, subject, predicate, r.tx_at if vf is None
                              else kwargs["valid_from"]))
                if prov == "claimed":
                    claimed.append(r.fact_id)
            elif op[0] == "supersede":
                if not facts:
                    continue
                _, target, prov, vf, length, mismatch = op
                old, subject, predicate, old_from = facts[target % len(facts)]
                if mismatch == 0:
                    predicate = "other"  # refused: supersede_mismatch
                kwargs = {"supersedes": old}
                start = old_from if vf is None else format_time(
                    parse_time(old_from) + timedelta(hours=vf))
                if vf is not None:
                    kwargs["valid_from"] = start
                if length is not None:
                    base = start if vf is not None else _iso(hours)
                    kwargs["valid_to"] = format_time(parse_time(base) + timedelta(hours=length))
                r = ledger.assert_fact(subject, predicate, n, actor="agent:a", cause=cause,
                                       provenance=prov, **kwargs)
                facts.append((r.fact_id, subject, predicate,
                              kwargs.get("valid_from", r.tx_at)))
                if prov == "claimed":
                    claimed.append(r.fact_id)
            elif facts:
                kind, target = op
                pool = claimed if kind != "retract" and claimed and target % 4 else [
                    f[0] for f in facts]
                fact_id = pool[target % len(pool)]
                if kind == "retract":
                    ledger.retract(fact_id, actor="agent:a", reason="wrong")
                elif kind == "reject":
                    ledger.reject(fact_id, actor=REVIEWER, reason="no")
                else:
                    ledger.confirm(fact_id, actor=REVIEWER)
                if fact_id in claimed:
                    claimed.remove(fact_id)
        except LedgerError:
            assert ledger.db.events.count() == count


def _key(f: Any) -> tuple[Any, ...]:
    return (f.fact_id, f.subject, f.predicate, f.space, f.value, f.status, f.provenance,
            f.valid_from, f.valid_to, f.actor, f.erased)


def _moments(events: list[Any]) -> list[str]:
    """Every interesting instant: event times, valid boundaries, and their neighbours."""
    base: set[str] = {_iso(-1000), _iso(1000)}
    for e in events:
        base.add(e.tx_at)
        if e.kind == "assert":
            body = json.loads(e.body)
            base.add(body["valid_from"])
            if body.get("valid_to"):
                base.add(body["valid_to"])
    out = set(base)
    for moment in base:
        out.add(shift(moment, microseconds=-1))
        out.add(shift(moment, microseconds=1))
    return sorted(out)


@settings(max_examples=int(os.environ.get("CUSTODY_FOLD_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=ops_strategy, data=st.data())
def test_sql_as_of_matches_the_fold(ops: list[tuple[Any, ...]], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        clock = ManualClock(T0)
        ledger = Ledger.open(Path(tmp) / "ledger.db", clock=clock, id_seed=3)
        try:
            _run(ledger, clock, ops)
            events = ledger.events(plaintext=True)
            assert ledger.verify().valid
            assert ledger.rebuild().differences == []
            moments = _moments(events)
            queries = data.draw(st.lists(st.tuples(
                st.sampled_from(moments), st.sampled_from(moments),
                st.sampled_from(PROVENANCES), st.none() | st.sampled_from(SUBJECTS),
                st.none() | st.sampled_from(PREDICATES)), min_size=20, max_size=40))
            # Always also ask "now", in every include level.
            queries += [(None, None, inc, None, None) for inc in PROVENANCES]
            for valid_at, tx_at, include, subject, predicate in queries:
                filters = {k: v for k, v in (("subject", subject), ("predicate", predicate))
                           if v is not None}
                got = ledger.as_of(valid_at=valid_at, tx_at=tx_at, include=include, **filters)
                want = fold_as_of(events, valid_at=got.valid_at, tx_at=got.tx_at,
                                  include=include, **filters)
                assert [_key(f) for f in got.facts] == [_key(f) for f in want], (
                    valid_at, tx_at, include, filters)
        finally:
            ledger.close()
