"""Evidence is bound to what it covers (DESIGN 14, issue 31): a tool receipt raises a fact to
`verified` only for the session, subject, predicate and value it covers, within its age and
for this ledger; an action's receipt only authorises the action it was signed for."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from custody_app.core.host_mark import host_mark_file
from custody_app.domain.errors import LedgerError
from custody_app.erasure.epoch import SERVER_COPIES
from custody_app.keys.demo_receipts import bind_demo_receipts
from custody_app.ledger.facade import Ledger
from custody_app.receipts import json_sha256, public_hex, sign
from tests import rawsql
from tests.audience import audience, recording
from tests.conftest import Env, fixture_copy

KEY = bytes(range(32))  # test material: a fixed issuer key
ISSUER = "gateway:crm"
SESSION = "sess-1"
AT = "2026-09-01T00:00:00Z"  # the manual clock's start (tests.conftest.T0)
CRM_ARGS = {"account": "acct:42"}
CRM_OUT = {"account": "acct:42", "billed_seats": 120, "quoted_seats": 500}
ROOT = Path(__file__).resolve().parent.parent


def policy(*, allow_declared: bool = False) -> str:
    return (f"[provenance]\nallow_declared = {str(allow_declared).lower()}\n"
            f'receipt_issuers = {{"{ISSUER}" = "{public_hex(KEY)}"}}\n')


def crm(**over: Any) -> dict[str, Any]:
    """A CRM lookup's receipt as today's gateways sign it (no binding claims unless given)."""
    fields: dict[str, Any] = {"issuer": ISSUER, "receipt_id": "rc-crm", "tool": "crm.lookup",
                              "session": SESSION, "arguments": CRM_ARGS, "output": CRM_OUT,
                              "issued_at": AT, "audience": audience()}
    fields.update(over)
    return sign(KEY, **fields)


@pytest.fixture
def make_env(make_env: Any, backend: str) -> Any:
    """Receipts below are signed for the ledger the test made last (tests/audience.py).
    (`backend` is named so the contract suite runs these on both backends: this fixture hides
    conftest's, whose parametrized closure pytest would not see.)"""
    return recording(make_env)


def cite(env: Env, subject: str, predicate: str, value: Any, rc: dict[str, Any], *,
         pointer: str | None = None, output: Any = None, **extra: Any) -> Any:
    cause: dict[str, Any] = {"kind": "tool", "ref": "call-1", "receipt": rc}
    if pointer is not None:
        cause["pointer"] = pointer
    if output is not None:
        extra["tool_output"] = output
    return env.ledger.assert_fact(subject, predicate, value, actor="agent:bot", cause=cause,
                                  session=SESSION, **extra)


def believed(env: Env, subject: str) -> list[Any]:
    return [f.value for f in env.ledger.as_of(subject=subject).facts]


def refused_unchanged(env: Env, fn: Any) -> LedgerError:
    before = env.snapshot()
    with pytest.raises(LedgerError) as refused:
        fn()
    assert env.snapshot() == before
    return refused.value


# -- 1. tool receipts: the failures of issue 31, reproduced on a fresh ledger --

def test_a_weather_receipt_cited_on_a_made_up_write_earns_nothing(make_env: Any) -> None:
    """Unkeyed agent, asset 'what is believed': a genuine receipt for an unrelated call (same
    session) made the made-up fact attested and believed at once."""
    env = make_env(policy())
    weather = sign(KEY, issuer=ISSUER, receipt_id="rc-wx", tool="weather.lookup",
                   session=SESSION, arguments={"city": "Paris"}, output={"temp_c": 12},
                   issued_at=AT, audience=audience())
    made_up = cite(env, "acct:42", "plan", "enterprise", weather)
    assert made_up.provenance == "claimed" and made_up.status == "quarantined"
    assert believed(env, "acct:42") == []


@pytest.mark.parametrize("subject", ["acct:42", "acct:7", "acct:99"])
def test_a_receipt_without_a_subject_claim_verifies_no_subject(make_env: Any,
                                                               subject: str) -> None:
    """Holder of a stolen receipt: today's CRM receipt (no subject claim), its whole output as
    a value, was `verified` for any subject it was cited for, again and again."""
    env = make_env(policy())
    wrote = cite(env, subject, "billed_seats", CRM_OUT, crm())
    assert wrote.provenance == "claimed" and believed(env, subject) == []


def test_one_crm_receipt_verifies_only_its_own_field_subject_and_predicate(make_env: Any) -> None:
    """A pointer to another field, another subject, another predicate: each was `verified`
    by one CRM receipt; each is refused now, naming the check, with nothing written."""
    env = make_env(policy())
    bound = crm(subject="acct:42")
    good = cite(env, "acct:42", "billed_seats", 120, bound, pointer="/billed_seats", output=CRM_OUT)
    assert good.provenance == "verified" and believed(env, "acct:42") == [120]
    for subject, predicate, value, pointer, check in (
            ("acct:42", "billed_seats", 500, "/quoted_seats", "predicate"),  # another field
            ("acct:43", "billed_seats", 120, "/billed_seats", "subject"),    # another subject
            ("acct:42", "licensed_seats", 120, "/billed_seats", "predicate")):  # another predicate
        err = refused_unchanged(env, lambda s=subject, p=predicate, v=value, q=pointer: cite(
            env, s, p, v, bound, pointer=q, output=CRM_OUT))
        assert (err.code, err.details["check"]) == ("receipt_invalid", check), err.message
    # The same attacks with a receipt that names no subject (today's shape) fail the same way.
    for subject in ("acct:42", "acct:43"):
        err = refused_unchanged(env, lambda s=subject: cite(
            env, s, "billed_seats", 120, crm(), pointer="/billed_seats", output=CRM_OUT))
        assert (err.code, err.details["check"]) == ("receipt_invalid", "subject")


def test_the_subject_may_be_named_in_the_signed_arguments_instead(make_env: Any) -> None:
    env = make_env(policy())
    cause = {"kind": "tool", "ref": "call-1", "receipt": crm(), "pointer": "/billed_seats",
             "subject_pointer": "/account"}
    ok = env.ledger.assert_fact("acct:42", "billed_seats", 120, actor="agent:bot", cause=cause,
                                session=SESSION, tool_output=CRM_OUT, tool_arguments=CRM_ARGS)
    assert ok.provenance == "verified"
    for subject, arguments, check in (("acct:43", CRM_ARGS, "subject"),
                                      ("acct:43", {"account": "acct:43"}, "subject")):
        err = refused_unchanged(env, lambda s=subject, a=arguments: env.ledger.assert_fact(
            s, "billed_seats", 120, actor="agent:bot", cause=cause, session=SESSION,
            tool_output=CRM_OUT, tool_arguments=a))
        assert (err.code, err.details["check"]) == ("receipt_invalid", check), err.message
    assert env.ledger.verify().valid


def test_a_receipt_for_another_ledger_is_refused_there(make_env: Any) -> None:
    """Another ledger registering the same issuer: a receipt naming ledger A's id verifies
    there, and is refused in ledger B (check `audience`), which stays unchanged."""
    a, b = make_env(policy(), "a.db"), make_env(policy(), "b.db")
    assert a.ledger.ledger_id and b.ledger.ledger_id and a.ledger.ledger_id != b.ledger.ledger_id
    rc = crm(subject="acct:42", audience=a.ledger.ledger_id)
    assert cite(a, "acct:42", "billed_seats", 120, rc, pointer="/billed_seats",
                output=CRM_OUT).provenance == "verified"
    b.put("acct:1", "name", "x", provenance="claimed")
    err = refused_unchanged(b, lambda: cite(b, "acct:42", "billed_seats", 120, rc,
                                            pointer="/billed_seats", output=CRM_OUT))
    assert (err.code, err.details["check"]) == ("receipt_invalid", "audience")
    # The id is stable: the same after a reopen.
    first = a.ledger.ledger_id
    assert a.reopen().ledger_id == first


def test_a_receipt_naming_no_audience_is_refused_in_every_ledger(make_env: Any) -> None:
    """Holder of a stolen receipt: one signed for no ledger in particular was accepted in any
    ledger that registers its issuer. Now refused in each (check `audience`), writing nothing,
    with a message that says what is wrong and which audience to sign for."""
    for name in ("a.db", "b.db"):
        env = make_env(policy(), name)
        env.put("acct:1", "name", "x", provenance="claimed")
        rc = crm(subject="acct:42", audience=None)
        assert "audience" not in rc
        err = refused_unchanged(env, lambda e=env, r=rc: cite(
            e, "acct:42", "billed_seats", 120, r, pointer="/billed_seats", output=CRM_OUT))
        assert (err.code, err.details["check"]) == ("receipt_invalid", "audience")
        assert "names no audience" in err.message and str(env.ledger.ledger_id) in err.message
        # Cited on an action (or in its cause), refused the same way.
        err = refused_unchanged(env, lambda e=env, r=rc: e.ledger.act(
            SESSION, "helpdesk.close", "T-1", "closed", actor="agent:bot",
            cause={"kind": "tool", "ref": "call-1", "receipt": r}))
        assert (err.code, err.details["check"]) == ("receipt_invalid", "audience")


def _set_meta_id(path: Path, value: str) -> None:
    """What someone holding the file (or a role on the database) can do: rewrite the ledger
    id in its meta rows."""
    rawsql.edit(path, ("UPDATE ledger_meta SET value = ? WHERE key = 'ledger_id'", (value,)))


def _file_bytes(path: Path) -> Any:
    return rawsql.stored(path)


def test_an_edited_meta_ledger_id_cannot_redirect_a_receipts_audience(make_env: Any) -> None:
    """Someone with the ledger file: the ledger id was kept in the file's meta rows only, so
    setting ledger A's meta id to ledger B's made B's receipt verify facts in A. The id is now
    chained (A's first event carries it): a read-write open refuses the edited file
    (`ledger_id_mismatch`, naming both ids) leaving it byte for byte, `verify` names it, and
    the receipt is checked against the chained id whatever the meta says."""
    a, b = make_env(policy(), "a.db"), make_env(policy(), "b.db")
    a.put("acct:1", "name", "x", provenance="claimed")
    chained, other = str(a.ledger.ledger_id), str(b.ledger.ledger_id)
    rc = crm(subject="acct:42", audience=other)
    a.ledger.close()
    _set_meta_id(a.path, other)
    disk = _file_bytes(a.path)
    with pytest.raises(LedgerError) as refused:
        a.reopen()
        # Before the id was chained: the receipt for ledger B made this fact verified in A.
        cite(a, "acct:42", "billed_seats", 120, rc, pointer="/billed_seats", output=CRM_OUT)
    assert refused.value.code == "ledger_id_mismatch", refused.value.message
    assert chained in refused.value.message and other in refused.value.message
    assert _file_bytes(a.path) == disk
    reader = a.reopen(readonly=True)
    assert reader.ledger_id == chained  # the chain wins over the meta
    report = reader.verify()
    assert not report.valid and "(ledger_id_mismatch)" in (report.problem or "")
    assert chained in (report.problem or "") and other in (report.problem or "")
    first = reader.db.events.get(1)
    assert first is not None and json.loads(first.body).get("ledger_id") == chained


def test_an_older_ledger_without_a_chained_id_opens_and_verifies_unchanged(
        tmp_path: Path) -> None:
    """A ledger made before the id was chained opens and verifies as before, its event hashes
    unchanged, and says its id is not chained (older ledger); a new ledger's id is chained."""
    path = fixture_copy(ROOT / "tests" / "fixtures" / "v5", tmp_path)
    con = sqlite3.connect(path)
    hashes = con.execute("SELECT seq, hash FROM events ORDER BY seq").fetchall()
    con.close()
    with Ledger.open(path) as led:
        report = led.verify()
        assert report.valid, report.problem
        assert report.ledger_id_chained is False and report.ledger_id == led.db.meta("ledger_id")
        assert [(r.seq, r.hash) for r in led.events()][:len(hashes)] == hashes
    with Ledger.open(tmp_path / "new.db") as led:
        led.assert_fact("acct:1", "name", "x", actor="user:ana", cause={"kind": "manual",
                                                                        "ref": "t"})
        report = led.verify()
        assert report.valid and report.ledger_id_chained is True
        assert report.ledger_id == led.db.meta("ledger_id")


def test_a_receipt_older_than_max_receipt_age_is_refused(make_env: Any) -> None:
    env = make_env(policy() + 'max_receipt_age = "PT10M"\n')
    env.put("acct:1", "name", "x", provenance="claimed")
    env.at("2026-09-01T00:11:00Z")
    err = refused_unchanged(env, lambda: cite(env, "acct:42", "billed_seats", 120,
                                              crm(subject="acct:42"), pointer="/billed_seats",
                                              output=CRM_OUT))
    assert (err.code, err.details["check"]) == ("receipt_invalid", "age")
    future = crm(subject="acct:42", issued_at="2026-09-01T01:00:00Z")
    err = refused_unchanged(env, lambda: cite(env, "acct:42", "billed_seats", 120, future,
                                              pointer="/billed_seats", output=CRM_OUT))
    assert err.details["check"] == "age"


def test_the_default_age_limit_is_an_hour_and_the_policy_hash_is_unchanged() -> None:
    from custody_app.domain.policy import load_policy, policy_from_text
    assert load_policy().policy.provenance.max_receipt_age == "PT1H"
    plain = policy_from_text("[provenance]\nallow_declared = true\n", "a.toml")
    same = policy_from_text('[provenance]\nallow_declared = true\nmax_receipt_age = "PT1H"\n',
                            "b.toml")
    assert plain.hash == same.hash
    assert policy_from_text('[provenance]\nmax_receipt_age = "PT2H"\n', "c.toml").hash != plain.hash


def test_a_subject_claim_is_erased_with_the_subject_and_verify_rechecks_it(make_env: Any) -> None:
    """The receipt's signed subject claim names the data principal: it is sealed with the
    fact, so forget_subject leaves no plaintext of it (certificate complete; on a server,
    pending only for the server's WAL, archives, backups and replicas until rotate-epoch),
    and verify checks the receipt's signature while the claim can be opened."""
    env = make_env(policy())
    wrote = cite(env, "acct:42", "billed_seats", 120, crm(subject="acct:42"),
                 pointer="/billed_seats", output=CRM_OUT)
    row = env.ledger.db.events.get(wrote.seq)
    assert row is not None and "acct:42" not in row.body
    assert env.ledger.verify().valid
    cert = env.ledger.forget_subject("acct:42", actor="user:dpo", reason="subject_request")
    pending = [p.place for p in cert.certificate.places if p.outcome in ("pending", "found")]
    assert pending == ([] if not rawsql.is_server(env.path) else [SERVER_COPIES]), \
        cert.certificate.render()
    assert cert.certificate.complete is not pending
    assert env.ledger.verify().valid


# -- 2. action receipts --

def _demo(tmp_path: Path) -> Path:
    """The demo ledger, its receipts signed for it (`--demo` binds them to its id)."""
    ledger = tmp_path / "demo.db"
    run = subprocess.run(
        [sys.executable, "-m", "custody_app", "--demo", "--no-tui", "--ledger", str(ledger)],
        capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert all(json.loads(line)["ok"] for line in run.stdout.splitlines())
    return ledger


def _batch(ledger: Path, ops: list[dict[str, Any]], *extra: str) -> list[dict[str, Any]]:
    run = subprocess.run(
        [sys.executable, "-m", "custody_app", "--batch", "-", "--ledger", str(ledger),
         "--manual-clock", "--policy", str(ROOT / "sample_data/demo_policy.toml"), *extra],
        input="\n".join(json.dumps(op) for op in ops) + "\n", capture_output=True, text=True,
        timeout=120, check=False)
    return [json.loads(line) for line in run.stdout.splitlines()]


def _refund(ledger_id: str) -> dict[str, Any]:
    """The sample's refund op, its receipt signed for the ledger `ledger_id` (as --demo does)."""
    for line in (ROOT / "sample_data/incident_refund.jsonl").read_text().splitlines():
        if line.startswith('{"op":"act","id":"refund"'):
            return dict(json.loads(bind_demo_receipts(line, ledger_id)))
    raise AssertionError("no refund in the sample")


def test_the_demo_refund_receipt_authorises_no_other_refund(tmp_path: Path) -> None:
    """Holder of a stolen receipt, asset 'the evidence of an action': the demo refund's
    receipt 'authorised' a made-up EUR 25,000 refund eight months later (explain said
    'receipt: ok'). Now refused, each binding by its check, and the ledger unchanged."""
    ledger = _demo(tmp_path)
    verified = _batch(ledger, [{"op": "verify"}])[0]["result"]
    events, genuine = verified["events"], _refund(verified["ledger_id"])
    made_up = {**genuine, "id": "fake", "ref": "RF-2026-1201",
               "outcome": "issued: EUR 25,000 to card on file",
               "args_digest": "sha256:" + json_sha256({"amount_eur": 25000})}
    # The demo batch ended with a checkpoint at the wall clock: "now" is months after the
    # receipt was issued (2026-04-01), as in the issue. Tool, ref and arguments on their own:
    # test_an_action_receipt_that_signs_a_ref_authorises_that_ref_only and the API tests.
    for op in (made_up, {**genuine, "id": "again"}):
        out = _batch(ledger, [op])
        assert out[-1]["ok"] is False, out
        assert (out[-1]["error"]["code"], out[-1]["error"].get("check")) == \
            ("receipt_invalid", "age"), out
    # Nothing was recorded: no action has the made-up ref, and the chain has as many events.
    assert _batch(ledger, [{"op": "explain", "action_ref": "RF-2026-1201"}])[0]["ok"] is False
    assert _batch(ledger, [{"op": "verify"}])[0]["result"]["events"] == events


def test_the_demo_refund_receipt_within_its_hour_authorises_its_own_refund_only(
        make_env: Any) -> None:
    env = make_env((ROOT / "sample_data/demo_policy.toml").read_text())
    env.at("2026-04-01T09:25:00Z")
    genuine = _refund(str(env.ledger.ledger_id))
    fields = {k: genuine[k] for k in ("session", "tool", "ref", "outcome", "actor", "receipt",
                                      "args_digest")}
    for change, check in (({"ref": "RF-2026-1201", "outcome": "issued: EUR 25,000",
                            "args_digest": "sha256:" + json_sha256({"amount_eur": 25000})},
                           "arguments"),
                          ({"tool": "billing.issue_credit"}, "tool")):
        op = {**fields, **change}
        err = refused_unchanged(env, lambda o=op: env.ledger.act(
            o["session"], o["tool"], o["ref"], o["outcome"], actor=o["actor"],
            receipt=o["receipt"], args_digest=o["args_digest"]))
        assert (err.code, err.details["check"]) == ("receipt_mismatch", check), err.message
    env.ledger.act(fields["session"], fields["tool"], fields["ref"], fields["outcome"],
                   actor=fields["actor"], receipt=fields["receipt"], args_digest=fields["args_digest"])
    answers = {a.question: a.answer for a in env.ledger.explain_full("RF-2026-0412").answers}
    assert answers["can it be verified"].startswith("receipt: ok")


def test_an_action_receipt_that_signs_a_ref_authorises_that_ref_only(make_env: Any) -> None:
    env = make_env(policy())
    args = {"amount_eur": 1840}
    rc = sign(KEY, issuer=ISSUER, receipt_id="rc-rf", tool="billing.issue_refund",
              session=SESSION, arguments=args, output={"ok": True}, issued_at=AT, ref="RF-1",
              audience=audience())
    digest = "sha256:" + json_sha256(args)
    env.ledger.act(SESSION, "billing.issue_refund", "RF-1", "issued", actor="agent:bot",
                   receipt=rc, args_digest=digest)
    for ref, args_digest, check in (("RF-2", digest, "ref"), ("RF-1", None, "arguments")):
        err = refused_unchanged(env, lambda r=ref, d=args_digest: env.ledger.act(
            SESSION, "billing.issue_refund", r, "issued", actor="agent:bot", receipt=rc,
            args_digest=d))
        assert (err.code, err.details["check"]) == ("receipt_mismatch", check)


def test_an_actions_cause_receipt_is_checked_not_just_stored(make_env: Any) -> None:
    """`cause.receipt` on an act was stored and signed into the action pack unchecked."""
    env = make_env(policy())
    env.put("acct:1", "name", "x", provenance="claimed")
    forged = crm()
    forged["output_sha256"] = "0" * 64
    for rc, check in ((forged, "signature"), (crm(session="sess-9"), "session")):
        cause = {"kind": "tool", "ref": "call-1", "receipt": rc}
        err = refused_unchanged(env, lambda c=cause: env.ledger.act(
            SESSION, "helpdesk.close", "T-1", "closed", actor="agent:bot", cause=c))
        assert (err.code, err.details["check"]) == ("receipt_invalid", check)
    ok = env.ledger.act(SESSION, "helpdesk.close", "T-1", "closed", actor="agent:bot",
                        cause={"kind": "tool", "ref": "call-1", "receipt": crm()})
    assert ok.seq > 0 and env.ledger.verify().valid


# -- 3. explain REF when another agent reused the ref --

def test_explain_answers_for_each_action_with_a_reused_ref_trusted_first(tmp_path: Path) -> None:
    """An agent reusing the refund's ref made `explain RF-2026-0412` refuse. Now it answers for
    both, the one whose receipt checks first, in text and in --json."""
    ledger = _demo(tmp_path)
    out = _batch(ledger, [{"op": "clock", "set": "2026-04-04T00:00:00Z"},
                          {"op": "act", "session": "sess_evil", "tool": "billing.issue_refund",
                           "ref": "RF-2026-0412", "outcome": "voided", "actor": "agent:evil"}])
    assert out[-1]["ok"], out
    exe = [sys.executable, "-m", "custody_app", "explain", "RF-2026-0412", "--ledger", str(ledger)]
    text = subprocess.run(exe, capture_output=True, text=True, timeout=120, check=False)
    assert text.returncode == 0, text.stderr
    assert "2 recorded actions have the ref RF-2026-0412" in text.stdout
    first, second = text.stdout.split("== 2 of 2")
    assert "agent:support-bot" in first and "receipt: ok" in first and "agent:evil" in second
    js = subprocess.run([*exe, "--json"], capture_output=True, text=True, timeout=120, check=False)
    doc = json.loads(js.stdout)
    assert [a["answers"][0]["answer"].split()[0] for a in doc["actions"]] == \
        ["agent:support-bot", "agent:evil"]
    assert doc["seq"] == doc["actions"][0]["seq"] and doc["same_ref"] == [doc["actions"][1]["seq"]]


def test_hostile_tool_arguments_are_refused_by_name(make_env: Any) -> None:
    """The arguments a write gives to name its subject are hashed whole: bounded like a value."""
    env = make_env(policy())
    deep: Any = "acct:42"
    for _ in range(3000):
        deep = [deep]
    cause = {"kind": "tool", "ref": "call-1", "receipt": crm(), "pointer": "/billed_seats",
             "subject_pointer": "/account"}
    err = refused_unchanged(env, lambda: env.ledger.assert_fact(
        "acct:42", "billed_seats", 120, actor="agent:bot", cause=cause, session=SESSION,
        tool_output=CRM_OUT, tool_arguments=deep))
    assert err.code == "bad_request" and "tool_arguments" in err.message


def test_an_action_whose_receipt_does_not_match_is_named_by_verify_explain_and_the_pack(
        make_env: Any) -> None:
    """Someone with the ledger file (or an action recorded before receipts were bound) swaps a
    receipted refund's arguments and re-hashes the chain: explain said 'receipt: ok' and the
    signed action pack verified. Now verify, explain and the pack's offline check name it."""
    from custody_app.domain.chain import canonical
    from custody_app.evidence.actionpack import action_pack_text, verify_action_pack
    from tests.reliability import _recompute_from

    env = make_env(policy())
    args = {"amount_eur": 1840}
    rc = sign(KEY, issuer=ISSUER, receipt_id="rc-rf", tool="billing.issue_refund",
              session=SESSION, arguments=args, output={"ok": True}, issued_at=AT,
              audience=audience())
    done = env.ledger.act(SESSION, "billing.issue_refund", "RF-1", "issued: EUR 1,840",
                          actor="agent:bot", receipt=rc, args_digest="sha256:" + json_sha256(args))
    env.ledger.close()
    with rawsql.session(env.path, unguarded=True) as con:
        [(text,)] = con.execute("SELECT body FROM events WHERE seq = ?", (done.seq,)).fetchall()
        body = json.loads(text)
        body["args_digest"] = "sha256:" + json_sha256({"amount_eur": 25000})
        body["outcome"] = "issued: EUR 25,000"
        con.execute("UPDATE events SET body = ? WHERE seq = ?", (canonical(body), done.seq))
        _recompute_from(con, done.seq)
    seen = host_mark_file(str(env.path))
    if seen is not None:
        # On a server this host saw the head it wrote: the rewritten chain is refused at open
        # (core.host_mark). Another host, which never saw it, opens it: verify names it there.
        with pytest.raises(LedgerError) as refused:
            env.reopen()
        assert refused.value.code == "ledger_forked"
        rawsql.as_another_host(env.path)
    ledger = env.reopen()
    report = ledger.verify()
    assert not report.valid and report.first_bad_seq == done.seq
    assert "arguments" in (report.problem or "")
    answers = {a.question: a.answer for a in ledger.explain_full("RF-1").answers}
    assert not answers["can it be verified"].startswith("receipt: ok")
    assert "arguments" in answers["can it be verified"]
    pack = verify_action_pack(action_pack_text(ledger.action_pack("RF-1")),
                              ledger.keys.public_pem())  # type: ignore[union-attr]
    assert not pack.valid and any("does not match" in p for p in pack.problems), pack.problems
