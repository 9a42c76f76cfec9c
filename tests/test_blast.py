"""Sessions, actions, blast radius and explain (issue 5): the refund incident in the sample data,
INCOMPLETE sessions, derivations without sessions, refusals, and the session index."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from custody_app import Ledger
from custody_app.domain.errors import LedgerError
from custody_app.domain.timeutil import ManualClock
from custody_app.interfaces.batch import run_batch
from custody_app.keys.demo_receipts import bind_demo_receipts
from store.sqlite.schema import SCHEMA_VERSION
from tests.conftest import CAUSE, WRITER, Env, day

ROOT = Path(__file__).resolve().parent.parent
INCIDENT = ROOT / "sample_data" / "incident_refund.jsonl"
SAMPLE = ROOT / "sample_data" / "support_agent.jsonl"
# The incident's receipts are signed by demo issuers that only the demo policy registers.
DEMO_POLICY = ROOT / "sample_data" / "demo_policy.toml"


@dataclass
class Incident:
    ledger: Ledger
    out: list[dict[str, Any]]

    def result(self, op_id: str) -> dict[str, Any]:
        [found] = [r for r in self.out if r["id"] == op_id]
        assert found["ok"], found
        return dict(found["result"])

    def fact(self, op_id: str) -> str:
        return str(self.result(op_id)["fact_id"])


def bound_incident(path: Path | str, into: Path | None = None) -> Path:
    """The ledger `path` made empty under the demo policy, and the incident sample with its
    receipts signed for it (as --demo does), written into `into` (default: beside a file
    ledger); returns the sample's path."""
    with Ledger.open(path, policy=DEMO_POLICY) as made:
        bound = (into or Path(path).parent) / "incident.jsonl"
        bound.write_text(bind_demo_receipts(INCIDENT.read_text(), str(made.ledger_id)))
    return bound


def replay(path: Path | str, *files: Path) -> Incident:
    ledger = Ledger.open(path, clock=ManualClock(), policy=DEMO_POLICY)
    out = io.StringIO()
    for file in files:
        # The sample's receipts are signed for this ledger, as --demo does (DESIGN 14).
        text = bind_demo_receipts(file.read_text(encoding="utf-8"), str(ledger.ledger_id))
        run_batch(ledger, text.splitlines(), out)
    return Incident(ledger, [json.loads(line) for line in out.getvalue().splitlines()])


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Incident]:
    """The support sample and then the refund incident, replayed into one ledger."""
    done = replay(tmp_path_factory.mktemp("incident") / "support.db", SAMPLE, INCIDENT)
    yield done
    done.ledger.close()


def test_incident_replays_cleanly(incident: Incident) -> None:
    assert [r for r in incident.out if not r["ok"]] == []
    assert incident.result("incident-verify")["valid"] is True
    refund = incident.result("refund")
    assert refund["session"] == "sess_0401_umbrella" and refund["ref"] == "RF-2026-0412"
    assert set(refund) >= {"event_id", "seq", "tx_at", "session", "ref"}


def test_blast_finds_both_sessions_the_refund_and_three_beliefs(incident: Incident) -> None:
    root = incident.fact("wrong-plan")
    result = incident.ledger.blast(root)
    assert result.root.fact_id == root and result.root.reached_via == "root"
    assert result.root.status == "retracted" and result.root.believed is False
    assert result.root_ended_by is not None
    assert result.root_ended_by["kind"] == "retract"
    assert result.root_ended_by["seq"] == incident.result("retract-plan")["seq"]
    assert result.root_ended_by["actor"] == "user:maria"
    reached = {s.session: s for s in result.sessions if not s.incomplete}
    assert set(reached) == {"sess_0401_umbrella", "sess_0401_billing"}
    assert [a.ref for a in result.actions] == ["RF-2026-0412"]
    assert result.actions[0].tool == "billing.issue_refund"
    assert [a.ref for a in reached["sess_0401_umbrella"].actions] == ["RF-2026-0412"]
    beliefs = {incident.fact(i) for i in ("belief-eligible", "belief-tier", "belief-credit")}
    facts = {f.fact_id: f for f in result.facts}
    assert beliefs <= set(facts)
    assert all(facts[b].believed and facts[b].status == "active" for b in beliefs)
    credit = facts[incident.fact("belief-credit")]
    assert credit.reached_via == "session" and credit.session == "sess_0401_billing"
    assert credit.from_fact == incident.fact("belief-eligible") and credit.depth == 2
    assert reached["sess_0401_billing"].served == [incident.fact("belief-eligible")]
    assert set(reached["sess_0401_umbrella"].writes) == {incident.fact("belief-eligible"),
                                                         incident.fact("belief-tier")}
    # nothing from the unrelated session that ran at the same time
    unrelated = {incident.fact("hooli-belief"), incident.fact("hooli-plan")}
    assert not unrelated & set(facts)
    assert all(s.session != "sess_0401_hooli" for s in result.sessions)
    assert all(a.session != "sess_0401_hooli" for a in result.actions)
    assert "sess_0401_hooli" not in result.incomplete_sessions
    # nor from the three weeks of the support sample before it
    assert all(f.tx_at >= "2026-04-01" for f in result.facts)
    assert "upper bound" in result.upper_bound


def test_batch_blast_matches_the_api(incident: Incident) -> None:
    from_batch = incident.result("blast-plan")
    assert from_batch == incident.ledger.blast(incident.fact("wrong-plan")).model_dump(mode="json")


def test_explain_the_refund_lists_the_wrong_plan_now_retracted(incident: Incident) -> None:
    result = incident.ledger.explain("RF-2026-0412")
    assert result.session == "sess_0401_umbrella"
    assert result.action.ref == "RF-2026-0412" and result.action.tool == "billing.issue_refund"
    [served] = result.served
    assert served.fact_id == incident.fact("wrong-plan")
    assert served.served_seq < result.action.seq
    assert served.status_now == "retracted" and served.ended is True
    assert served.ended_by_kind == "retract"
    assert served.ended_seq == incident.result("retract-plan")["seq"]
    assert incident.result("explain-refund") == result.model_dump(mode="json")
    assert "since retracted or erased: " + served.fact_id in result.render()


def test_session_after_the_retraction_is_ruled_out_in_the_incident(incident: Incident) -> None:
    """The nightly summariser wrote about the account with no recorded reads, but only after the
    wrong plan was retracted: it could not have read it, so it is ruled out, and counted."""
    result = incident.ledger.blast(incident.fact("wrong-plan"))
    assert result.incomplete_sessions == []
    assert all(s.session != "sess_0403_nightly" for s in result.sessions)
    assert incident.fact("nightly-summary") not in {f.fact_id for f in result.facts}
    ruled = {r.reason: r.sessions for r in result.ruled_out}
    assert ruled["not_active_while_believed"] >= 1
    assert "ruled out" in result.render() and "not_active_while_believed" in result.render()


def test_derived_fact_without_session_is_found(incident: Incident) -> None:
    result = incident.ledger.blast(incident.fact("wrong-plan"))
    [sla] = [f for f in result.facts if f.fact_id == incident.fact("sla-deadline")]
    assert sla.reached_via == "sources" and sla.session is None
    assert sla.from_fact == incident.fact("wrong-plan") and sla.believed


# ---- the fixpoint on small ledgers ------------------------------------------------------------

def _serve(env: Env, session: str, fact_id: str) -> None:
    """A read in `session` that returns exactly `fact_id`."""
    fact = env.ledger.db.facts.get(fact_id)
    assert fact is not None
    got = env.ledger.as_of(subject=fact.subject, predicate=fact.predicate, session=session)
    assert [f.fact_id for f in got.facts] == [fact_id]


def test_incomplete_only_for_sessions_that_wrote_after_the_root_without_reads(env: Env) -> None:
    env.put("acct:1", "note", "written before the root", session="s_before")
    env.at(day(2))
    root = env.put("acct:1", "plan", "gold")
    env.at(day(3))
    env.put("acct:2", "note", "blind write", session="s_blind")
    env.ledger.act("s_blind_act", "crm.update", "CRM-1", "ok", actor="agent:x")
    env.put("acct:3", "x", 1)
    _serve(env, "s_reader", env.put("acct:3", "y", 2))
    env.put("acct:3", "z", 3, session="s_reader")
    env.ledger.act("s_blind_act2", "crm.update", "CRM-2", "ok", actor="agent:x",
                   subject="acct:1")
    result = env.ledger.blast(root)
    # an action naming no subject touches neither the root's subject nor its space
    assert result.incomplete_sessions == ["s_blind", "s_blind_act2"]
    blind = {s.session: s for s in result.sessions if s.incomplete}
    assert [a.ref for a in blind["s_blind_act2"].actions] == ["CRM-2"]
    assert result.facts == [] and result.actions == []
    # once the blind session records a read, it is no longer incomplete (nor reached)
    _serve(env, "s_blind", env.put("acct:4", "w", 4))
    assert env.ledger.blast(root).incomplete_sessions == ["s_blind_act2"]


def test_fixpoint_through_sources_and_sessions_transitively(env: Env) -> None:
    root = env.put("acct:1", "plan", "gold")
    derived = env.put("acct:1", "tier", "t1", sources=[root])
    derived2 = env.put("acct:1", "score", 9, sources=[derived])
    env.at(day(2))
    _serve(env, "s1", derived2)  # the session never saw the root, only what derives from it
    w1 = env.put("acct:5", "guess", "g", session="s1")
    env.ledger.act("s1", "mail.send", "MSG-9", "sent", actor="agent:a")
    from_w1 = env.put("acct:5", "guess2", "h", sources=[w1])
    _serve(env, "s2", from_w1)
    w2 = env.put("acct:6", "guess3", "k", session="s2")
    env.ledger.retract(derived, actor="user:rev", reason="wrong tier")
    result = env.ledger.blast(root)
    got = {f.fact_id: (f.reached_via, f.depth, f.believed) for f in result.facts}
    assert got == {derived: ("sources", 1, False), derived2: ("sources", 2, True),
                   w1: ("session", 3, True), from_w1: ("sources", 4, True),
                   w2: ("session", 5, True)}
    assert [s.session for s in result.sessions] == ["s1", "s2"]
    assert [a.ref for a in result.actions] == ["MSG-9"]
    assert result.root_ended_by is None
    assert "of which 4 still believed" in result.render()


def test_writes_before_the_first_serve_are_not_reached(env: Env) -> None:
    root = env.put("acct:1", "plan", "gold")
    env.at(day(2))
    early = env.put("acct:2", "early", 1, session="s1")
    env.ledger.act("s1", "tool.a", "EARLY-1", "ok", actor="agent:a")
    _serve(env, "s1", root)
    late = env.put("acct:2", "late", 2, session="s1")
    result = env.ledger.blast(root)
    assert [f.fact_id for f in result.facts] == [late]
    assert early not in result.sessions[0].writes and result.actions == []
    env.ledger.act("s1", "tool.b", "LATE-1", "ok", actor="agent:a")
    assert [a.ref for a in env.ledger.blast(root).actions] == ["LATE-1"]


def test_root_ended_by_forget_and_supersede(env: Env) -> None:
    old = env.put("acct:1", "plan", "gold")
    env.at(day(2))
    new = env.ledger.assert_fact("acct:1", "plan", "silver", actor="agent:a", cause=CAUSE,
                                 provenance="attested", supersedes=old).fact_id
    ended = env.ledger.blast(old).root_ended_by
    assert ended is not None and ended["kind"] == "supersede" and ended["by"] == new
    env.ledger.forget(new, actor="user:rev", reason="subject_request")
    ended = env.ledger.blast(new).root_ended_by
    assert ended is not None and ended["kind"] == "forget" and ended["reason"] == "subject_request"


# ---- refusals ---------------------------------------------------------------------------------

def test_refusals_name_the_problem_and_write_nothing(env: Env) -> None:
    root = env.put()
    env.ledger.act("s1", "tool.x", "REF-1", "ok", actor="agent:a")
    before = env.snapshot()
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"session": "s1", "tool": "t", "ref": "r", "outcome": "ok", "actor": "robot:x"},
         "invalid_actor", "actor"),
        ({"session": "", "tool": "t", "ref": "r", "outcome": "ok", "actor": "agent:a"},
         "bad_request", "session"),
        ({"session": "s1", "tool": "t", "ref": "r", "outcome": "ok", "actor": "agent:a",
          "args_digest": "not a digest"}, "bad_request", "args_digest"),
    ]
    for fields, code, field in cases:
        with pytest.raises(LedgerError) as info:
            env.ledger.act(**fields)
        assert info.value.code == code and field in info.value.message
    with pytest.raises(LedgerError) as info:
        env.ledger.blast("f_nope")
    assert info.value.code == "unknown_fact" and "f_nope" in info.value.message
    with pytest.raises(LedgerError) as info:
        env.ledger.explain("REF-404")
    assert info.value.code == "unknown_action" and "REF-404" in info.value.message
    assert env.snapshot() == before
    second = env.ledger.act("s2", "tool.x", "REF-1", "retried", actor="agent:a")
    # DESIGN 14 (was: refused as ambiguous_action): a reused ref is answered for each action,
    # newest trusted first; neither has a receipt, so the newest comes first.
    both = env.ledger.explain("REF-1")
    assert both.action.seq == second.seq and len(both.same_ref) == 1
    assert env.ledger.explain(f"seq:{second.seq}").action.outcome == "retried"
    assert env.ledger.explain(f"seq:{second.seq}").incomplete is True
    # actions naming no subject: they touch neither the root's subject nor its space
    radius = env.ledger.blast(root)
    assert radius.incomplete_sessions == []
    assert [(r.reason, r.sessions) for r in radius.ruled_out] == [("unrelated", 2)]


def test_batch_act_and_blast_ops(env: Env) -> None:
    root = env.put()
    lines = [
        json.dumps({"op": "act", "id": "a", "session": "s9", "tool": "t", "ref": "R-1",
                    "outcome": "ok", "actor": "agent:a",
                    "args_digest": "sha256:" + "ab" * 32}),
        json.dumps({"op": "blast", "id": "b", "fact_id": root}),
        json.dumps({"op": "act", "id": "c", "session": "s9", "tool": "t", "ref": "R-2",
                    "outcome": "ok", "actor": "agent:a", "bogus": 1}),
        json.dumps({"op": "explain", "id": "d", "action_ref": "R-1"}),
    ]
    out = io.StringIO()
    run_batch(env.ledger, lines, out, sign=False)
    a, b, c, d = (json.loads(line) for line in out.getvalue().splitlines())
    assert a["ok"] and a["result"]["ref"] == "R-1" and a["result"]["session"] == "s9"
    assert b["ok"] and b["result"]["incomplete_sessions"] == []
    assert b["result"]["ruled_out"][0]["reason"] == "unrelated"
    assert not c["ok"] and c["error"]["code"] == "bad_request" and "bogus" in c["error"]["message"]
    assert d["ok"] and d["result"]["incomplete"] is True


# ---- the session index ------------------------------------------------------------------------

def test_rebuild_refills_the_session_index(incident: Incident, tmp_path: Path) -> None:
    assert incident.ledger.rebuild().differences == []
    copy = replay(tmp_path / "copy.db", INCIDENT)
    with copy.ledger:
        root = copy.fact("wrong-plan")
        expected = copy.ledger.blast(root)
        with copy.ledger.transaction():
            copy.ledger.db.sessions.replace_all([], [], [])
        assert copy.ledger.blast(root).sessions == []
        report = copy.ledger.rebuild(repair=True)
        assert any(d.startswith("served fact missing") for d in report.differences)
        assert any(d.startswith("session event missing") for d in report.differences)
        assert copy.ledger.rebuild().differences == []
        assert copy.ledger.blast(root) == expected


def test_schema_upgrade_backfills_the_session_index(tmp_path: Path) -> None:
    """A ledger written before the session index (schema 1) gets it filled at open."""
    made = replay(tmp_path / "old.db", INCIDENT)
    root = made.fact("wrong-plan")
    expected = made.ledger.blast(root)
    conn = made.ledger.db.conn
    conn.execute("DROP TABLE served_facts; DROP TABLE session_events; DROP TABLE sessions; "
                 "DROP INDEX events_retractions; DROP INDEX tombstones_by_subject;")
    conn.pragma("user_version", 1)
    made.ledger.close()
    with Ledger.open(tmp_path / "old.db") as reopened:
        assert reopened.db.conn.pragma("user_version") == SCHEMA_VERSION
        assert reopened.blast(root) == expected
        assert reopened.rebuild().differences == []


# ---- the command line -------------------------------------------------------------------------

def test_blast_and_explain_subcommands(tmp_path: Path) -> None:
    from tests.test_batch_cli import cli, results

    path = tmp_path / "inc.db"
    done = cli("--batch", bound_incident(path), "--ledger", path, "--manual-clock", "--policy", DEMO_POLICY,
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [plan] = [r["result"]["fact_id"] for r in results(done) if r["id"] == "wrong-plan"]
    text = cli("blast", plan, "--ledger", path)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert f"Blast radius of {plan} (acct:4520 plan), now retracted" in out
    assert "ended by retract" in out and "user:maria" in out
    assert ("2 session(s) read it, 0 could have (INCOMPLETE), 2 ruled out "
            "(1 reads_recorded, 1 not_active_while_believed); 1 action(s), 4 belief(s) of "
            "which 4 still believed") in out
    assert "acted billing.issue_refund RF-2026-0412" in out
    assert "INCOMPLETE session" not in out and "upper bound" in out
    assert "sess_0401_hooli" not in out and "sess_0403_nightly" not in out
    as_json = json.loads(cli("blast", plan, "--ledger", path, "--json").stdout)
    assert as_json["incomplete_sessions"] == []
    with Ledger.open(path, readonly=True) as led:  # the API and the CLI say the same
        radius = led.blast(plan)
    assert as_json == radius.model_dump(mode="json") and radius.counts() in out
    text = cli("explain", "RF-2026-0412", "--ledger", path)
    assert text.returncode == 0, text.stderr
    assert f"{plan} acct:4520 plan" in text.stdout and "now retracted" in text.stdout
    assert f"since retracted or erased: {plan}" in text.stdout
    assert json.loads(cli("explain", "RF-2026-0412", "--ledger", path, "--json").stdout)[
        "served"][0]["ended_by_kind"] == "retract"
    missing = cli("explain", "RF-404", "--ledger", path)
    assert missing.returncode == 1 and "unknown_action" in missing.stderr
    missing = cli("blast", "f_nope", "--ledger", path)
    assert missing.returncode == 1 and "unknown_fact" in missing.stderr
    usage = cli("pack", plan, "--ledger", path)
    assert usage.returncode == 2 and "--out" in usage.stderr
    usage = cli("pack", "--verify", tmp_path / "x.json")
    assert usage.returncode == 2 and "--key" in usage.stderr
    gone = cli("verify", "--export", tmp_path / "nope.jsonl")
    assert gone.returncode == 1 and "export_unreadable" in gone.stderr


def test_every_write_op_may_carry_its_session(env: Env) -> None:
    """Any write, read, recall or action may name its session: the event records it (and a
    write without one records none), through the Python API and the batch ops alike."""
    ledger = env.ledger
    claim = env.put("acct:9", "plan", "pro", provenance="claimed", session="s-1")
    other = env.put("acct:9", "tier", "gold", session="s-1")
    ledger.confirm(claim, actor="user:rev", session="s-2")
    ledger.affirm(other, actor="agent:support", session="s-1")
    ledger.hold(other, actor="user:counsel", reason="case 7", session="s-3")
    ledger.release(other, actor="user:counsel", reason="case closed")
    ledger.retract(other, actor="agent:support", reason="wrong", session="s-1")
    rejected = env.put("acct:9", "region", "eu", provenance="claimed")
    out = io.StringIO()
    run_batch(ledger, io.StringIO(json.dumps({
        "op": "reject", "fact_id": rejected, "actor": "user:rev", "reason": "no",
        "session": "s-4"}) + "\n"), out)
    assert json.loads(out.getvalue())["ok"]

    def sessions(fact_id: str) -> dict[str, str | None]:
        return {e.kind: json.loads(ledger.db.events.get(e.seq).body).get("session")  # type: ignore[union-attr]
                for e in ledger.history(fact_id).events}

    assert sessions(claim) == {"assert": "s-1", "confirm": "s-2"}
    assert sessions(other) == {"assert": "s-1", "affirm": "s-1", "hold": "s-3",
                               "release": None, "retract": "s-1"}
    assert sessions(rejected) == {"assert": None, "reject": "s-4"}
    assert ledger.verify().valid


# ---- known, possible, ruled out (issue 32) ----------------------------------------------------

def test_blast_separates_read_from_possible_and_counts_the_rest(env: Env) -> None:
    """Sessions with a recorded read of the fact first; sessions that could have read it (no
    reads recorded, active while it was believed, touching its subject or space) INCOMPLETE;
    every other session left out and counted per reason."""
    env.put("acct:1", "note", "before the root", session="s_before", space="org")
    env.at(day(2))
    root = env.put("acct:1", "plan", "gold", space="team:a")
    env.at(day(3))
    _serve(env, "s_read", root)
    env.put("acct:1", "note", "same subject", session="s_subject", space="org")
    env.put("acct:9", "note", "same space", session="s_space", space="team:a")
    env.ledger.act("s_act", "crm.update", "CRM-1", "ok", actor="agent:x", subject="acct:1")
    env.put("acct:7", "note", "elsewhere", session="s_other", space="team:b")
    env.ledger.act("s_plain", "mail.send", "M-1", "ok", actor="agent:x")
    env.ledger.act("s_act_other", "crm.update", "CRM-2", "ok", actor="agent:x", subject="acct:7")
    _serve(env, "s_reads_else", env.put("acct:8", "x", 1, space="team:a"))
    env.put("acct:8", "y", 2, session="s_reads_else", space="team:a")
    env.at(day(4))
    env.ledger.retract(root, actor=WRITER, reason="wrong")
    env.put("acct:1", "note", "after the retraction", session="s_after", space="team:a")
    result = env.ledger.blast(root)
    assert [s.session for s in result.sessions] == ["s_read", "s_act", "s_space", "s_subject"]
    assert [s.incomplete for s in result.sessions] == [False, True, True, True]
    assert result.incomplete_sessions == ["s_act", "s_space", "s_subject"]
    assert {r.reason: r.sessions for r in result.ruled_out} == {
        "reads_recorded": 1, "not_active_while_believed": 2, "unrelated": 3}
    with_reads, without = env.ledger.db.sessions.session_counts()
    listed = len(result.sessions) + sum(r.sessions for r in result.ruled_out)
    assert listed == with_reads + without == 10
    assert result.counts().startswith("1 session(s) read it, 3 could have (INCOMPLETE), 6 ruled "
                                      "out (1 reads_recorded, 2 not_active_while_believed, "
                                      "3 unrelated)")
    assert result.counts() in result.render()


def test_a_busy_ledger_does_not_list_every_later_writer(env: Env) -> None:
    """The issue's 95 of 95: a retracted fact no session read, then many sessions writing about
    other subjects in other spaces. None of them could have read it: none is INCOMPLETE."""
    root = env.put("acct:1", "plan", "gold", space="team:a")
    env.at(day(2))
    for n in range(30):
        env.put(f"acct:{100 + n}", "note", n, session=f"s{n:02d}", space="team:b")
    env.ledger.retract(root, actor=WRITER, reason="wrong")
    for n in range(30, 40):
        env.put("acct:1", "note", n, session=f"s{n:02d}", space="team:a")
    result = env.ledger.blast(root)
    assert result.sessions == [] and result.incomplete_sessions == []
    assert {r.reason: r.sessions for r in result.ruled_out} == {
        "unrelated": 30, "not_active_while_believed": 10}
