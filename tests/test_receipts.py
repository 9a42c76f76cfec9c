"""Signed tool receipts: verified at the door, stored with the event, re-checked by verify."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from custody_app.domain.errors import LedgerError
from custody_app.keys import crypto
from custody_app.ledger.facade import Ledger
from custody_app.receipts import json_sha256, public_hex, sign
from tests.audience import audience, recording
from tests.conftest import Env, stored_state

KEY = bytes(range(32))  # test material: a fixed issuer key
OTHER = bytes(range(1, 33))
ISSUER = "gateway:crm"
SESSION = "sess-1"
OUTPUT = {"account": "acct:42", "plan": {"tier": "pro", "seats": 12}}
ARGS = {"account": 42}


def policy(*, allow_declared: bool = True, corroborate: int = 0) -> str:
    return (f"[provenance]\nallow_declared = {str(allow_declared).lower()}\n"
            f'receipt_issuers = {{"{ISSUER}" = "{public_hex(KEY)}"}}\n'
            f"[quarantine]\ncorroborate = {corroborate}\n")


def receipt(key: bytes = KEY, **over: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"issuer": ISSUER, "receipt_id": "rc-1", "tool": "crm.lookup",
                              "session": SESSION, "arguments": ARGS, "output": OUTPUT,
                              "issued_at": "2026-09-01T00:00:00Z",
                              # The claims that bind it to the facts `write` asserts (DESIGN 14).
                              "subject": "acct:42", "predicate": "plan",
                              # ... and to the ledger it is cited in.
                              "audience": audience()}
    fields.update(over)
    return sign(key, **fields)


@pytest.fixture
def make_env(make_env: Any, backend: str) -> Any:
    """Receipts below are signed for the ledger the test made last (tests/audience.py).
    (`backend` is named so the contract suite runs these on both backends: this fixture hides
    conftest's, whose parametrized closure pytest would not see.)"""
    return recording(make_env)


def write(env: Env, value: Any, rc: dict[str, Any], *, session: str | None = SESSION,
          pointer: str | None = None, output: Any = None, provenance: str = "claimed") -> Any:
    cause: dict[str, Any] = {"kind": "tool", "ref": "call-1", "receipt": rc}
    if pointer is not None:
        cause["pointer"] = pointer
    extra: dict[str, Any] = {} if output is None else {"tool_output": output}
    return env.ledger.assert_fact("acct:42", "plan", value, actor="agent:bot", cause=cause,
                                  session=session, provenance=provenance, **extra)


def test_a_receipt_covering_the_value_makes_it_verified_and_verify_rechecks_it(
        make_env: Any) -> None:
    env = make_env(policy(allow_declared=False))
    whole = write(env, OUTPUT, receipt())
    part = write(env, {"tier": "pro", "seats": 12}, receipt(receipt_id="rc-2"),
                 pointer="/plan", output=OUTPUT)
    assert (whole.provenance, part.provenance) == ("verified", "verified")
    body = json.loads(env.ledger.db.events.get(part.seq).body)  # type: ignore[union-attr]
    assert body["cause"]["receipt"]["output_sha256"] == receipt()["output_sha256"]
    assert "tool_output" not in body and "seats" not in json.dumps(body["cause"])
    assert env.ledger.verify().valid


def test_a_valid_receipt_that_does_not_cover_the_value_changes_nothing(make_env: Any) -> None:
    """DESIGN 14 (was: it made the fact attested): the fact keeps the writer's own standing."""
    env = make_env(policy(allow_declared=False))
    result = write(env, "a summary the agent wrote", receipt())
    assert result.provenance == "claimed" and env.status(result.fact_id) == "quarantined"


@pytest.mark.parametrize(("case", "check"), [
    ("unknown_issuer", "issuer"), ("flipped_signature", "signature"),
    ("other_session", "session"), ("pointer_not_covering", "output_digest"),
    ("declared_verified_not_covering", "output_digest"), ("output_not_the_signed_one", "output_digest"),
    ("no_session", "session"), ("edited_after_signing", "signature"),
    ("no_audience", "audience"), ("another_ledgers_audience", "audience"),
])
def test_each_bad_receipt_is_refused_with_its_check_and_writes_nothing(
        make_env: Any, case: str, check: str) -> None:
    env = make_env(policy())
    env.put("acct:1", "name", "x")
    before, disk = env.snapshot(), stored_state(env)
    rc, kwargs = receipt(), {}
    if case == "unknown_issuer":
        rc = receipt(OTHER, issuer="gateway:rogue")
    elif case == "flipped_signature":
        sig = bytearray(bytes.fromhex(rc["signature"]))
        sig[7] ^= 0x01
        rc["signature"] = sig.hex()
    elif case == "other_session":
        rc = receipt(session="sess-2")
    elif case == "pointer_not_covering":
        kwargs = {"pointer": "/plan/tier", "output": OUTPUT}
    elif case == "declared_verified_not_covering":
        kwargs = {"provenance": "verified"}
    elif case == "output_not_the_signed_one":
        kwargs = {"pointer": "/plan", "output": {**OUTPUT, "plan": {"tier": "starter"}}}
    elif case == "no_session":
        kwargs = {"session": None}
    elif case == "edited_after_signing":
        rc["output_sha256"] = "0" * 64
    elif case == "no_audience":
        rc = receipt(audience=None)
    elif case == "another_ledgers_audience":
        rc = receipt(audience="0" * 32)
    value = {"tier": "pro", "seats": 12} if "pointer" in kwargs or case.startswith("output") \
        else "enterprise"
    if case == "output_not_the_signed_one":
        value = {"tier": "starter"}
    with pytest.raises(LedgerError) as refused:
        write(env, value, rc, **kwargs)
    assert refused.value.code == "receipt_invalid"
    assert refused.value.details["check"] == check
    assert env.snapshot() == before and stored_state(env) == disk


def test_an_action_carries_its_receipt_checked_for_tool_and_session(make_env: Any) -> None:
    env = make_env(policy())
    rc = receipt(tool="billing.issue_refund", receipt_id="rc-refund", subject=None, predicate=None)
    digest = "sha256:" + json_sha256(ARGS)
    ok = env.ledger.act(SESSION, "billing.issue_refund", "RF-1", "issued", actor="agent:bot",
                        receipt=rc, subject="acct:42", args_digest=digest)
    body = json.loads(env.ledger.db.events.get(ok.seq).body)  # type: ignore[union-attr]
    assert body["receipt"]["receipt_id"] == "rc-refund" and "acct:42" not in json.dumps(body)
    before = env.snapshot()
    for tool, session, code, check in (
            ("billing.void", SESSION, "receipt_mismatch", "tool"),
            ("billing.issue_refund", "sess-9", "receipt_invalid", "session")):
        with pytest.raises(LedgerError) as refused:
            env.ledger.act(session, tool, "RF-2", "issued", actor="agent:bot", receipt=rc,
                           args_digest=digest)
        assert (refused.value.code, refused.value.details["check"]) == (code, check)
    assert env.snapshot() == before


def test_verify_catches_a_receipt_whose_issuer_key_no_longer_matches(make_env: Any,
                                                                     tmp_path: Path) -> None:
    """A receipt hand-forged into a ledger (chain recomputed) under a key the policy never
    registered is named by verify, per event."""
    env = make_env(policy())
    result = write(env, OUTPUT, receipt())
    from custody_app.evidence.receipts import receipt_event_problem
    row = env.ledger.db.events.get(result.seq)
    assert row is not None
    body = json.loads(row.body)
    assert receipt_event_problem(env.ledger, row) is None
    forged = dict(body)
    forged["cause"] = {**body["cause"], "receipt": receipt(OTHER)}
    from custody_app.domain.chain import canonical
    problem = receipt_event_problem(env.ledger, dataclasses.replace(row, body=canonical(forged)))
    assert problem is not None and "signature" in problem and str(result.seq) in problem
    forged["provenance"] = "verified"
    forged["cause"] = {**body["cause"], "receipt": receipt(receipt_id="rc-x")}
    value_changed = dataclasses.replace(row, body=canonical(forged))
    assert receipt_event_problem(env.ledger, value_changed, value_text='"other"') is not None


def test_receipt_key_cli_and_offline_receipt_verify(tmp_path: Path) -> None:
    exe = [sys.executable, "-m", "custody_app"]
    key = tmp_path / "gw.key"
    made = subprocess.run([*exe, "receipt-key", str(key), "--issuer", ISSUER],
                          capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    public = Path(f"{key}.pub").read_text().strip()
    assert made.stdout.strip() == f'receipt_issuers = {{"{ISSUER}" = "{public}"}}'
    again = subprocess.run([*exe, "receipt-key", str(key)], capture_output=True, text=True,
                           check=False)
    assert again.returncode == 1 and "key_exists" in again.stderr
    rc = sign(key, issuer=ISSUER, receipt_id="r1", tool="t", session="s", arguments={},
              output=[1])
    file = tmp_path / "r.json"
    file.write_text(json.dumps(rc))
    run = [*exe, "receipt", "verify", str(file), "--key", f"{key}.pub"]
    good = subprocess.run(run, capture_output=True, text=True, check=False)
    assert good.returncode == 0 and json.loads(good.stdout)["valid"] is True
    file.write_text(json.dumps({**rc, "tool": "u"}))
    bad = subprocess.run(run, capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and "signature" in bad.stderr
    assert crypto.private_from_pem(key.read_text())


@pytest.mark.parametrize("hostile", ["gate\x1b[31mway", "grant\u202eevil", "a\x00b", "\x9bc"])
def test_a_receipt_field_with_a_control_character_is_refused(make_env: Any, hostile: str) -> None:
    env = make_env(policy())
    before = env.snapshot()
    with pytest.raises(LedgerError) as refused:
        write(env, OUTPUT, {**receipt(), "grant": hostile})
    assert refused.value.code == "bad_request" and "grant" in refused.value.message
    with pytest.raises(LedgerError):
        sign(KEY, issuer=hostile, receipt_id="r", tool="t", session="s", arguments={}, output=1)
    assert env.snapshot() == before


def test_explain_escapes_control_characters_from_stored_action_fields(make_env: Any) -> None:
    env = make_env(policy())
    env.ledger.act(SESSION, "billing.issue_refund", "RF-9", "ok \x1b]0;pwned\x07", actor="agent:bot")
    text = env.ledger.explain_full("RF-9").render()
    assert "\x1b" not in text and "\x07" not in text and "\\x1b]0;pwned\\x07" in text


@pytest.mark.sqlite_only  # hand-edits the SQLite file
def test_verify_names_a_forged_receipt_in_a_hand_edited_ledger_with_its_chain_recomputed(
        make_env: Any) -> None:
    """The attacker has the file and this code, drops the triggers, swaps an assert's receipt
    for one signed with their own key (or lifts an attested fact to verified) and re-hashes
    the chain: without a signed checkpoint after it, only the receipt check can tell."""
    from tests.reliability import _raw, _recompute_from, markless_keystore

    env = make_env(policy())
    good = write(env, OUTPUT, receipt())
    summary = write(env, "a summary", receipt(receipt_id="rc-2"), provenance="attested")
    assert summary.provenance == "attested"
    env.ledger.close()
    for seq, edit in ((good.seq, "forge"), (summary.seq, "lift")):
        con = _raw(env.path)
        body = json.loads(con.execute("SELECT body FROM events WHERE seq = ?", (seq,)).fetchone()[0])
        if edit == "forge":
            body["cause"]["receipt"] = receipt(OTHER)
        else:
            body["provenance"] = "verified"
        from custody_app.domain.chain import canonical
        con.execute("UPDATE events SET body = ? WHERE seq = ?", (canonical(body), seq))
        _recompute_from(con, seq)
        con.commit()
        con.close()
        # The key store's mark (made when the receipt's write made a subject key) refuses the
        # re-hashed ledger at open (issue 31); through a key store without marks, verify
        # still names the receipt itself.
        with pytest.raises(LedgerError) as refused:
            Ledger.open(env.path, clock=env.clock)
        assert refused.value.code == "ledger_forked"
        with Ledger.open(env.path, clock=env.clock, keystore=markless_keystore(env.path),
                         readonly=True) as ledger:
            report = ledger.verify()
        assert not report.valid and report.first_bad_seq == seq, report
        assert "receipt" in (report.problem or "")
        con = _raw(env.path)  # put it back for the next case
        body = json.loads(con.execute("SELECT body FROM events WHERE seq = ?", (seq,)).fetchone()[0])
        body["cause"]["receipt"] = receipt() if edit == "forge" else receipt(receipt_id="rc-2")
        body["provenance"] = "verified" if edit == "forge" else "attested"
        con.execute("UPDATE events SET body = ? WHERE seq = ?", (canonical(body), seq))
        _recompute_from(con, seq)
        con.commit()
        con.close()
    with Ledger.open(env.path, clock=env.clock, keystore=markless_keystore(env.path),
                     readonly=True) as ledger:
        assert ledger.verify().valid  # put back, the chain verifies again
